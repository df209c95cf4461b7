# tklab — two commands: `make lab` starts the workbook, `make test` runs the tests.
# Both create .venv and install tklab with its dependencies from PyPI (no system CUDA toolkit needed).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PORT   ?= 8888
# GPU-side wheels matching your driver: CuPy, and numba-cuda's NVVM/nvJitLink for chapter 01 on a GPU.
# CUDA 13 drivers (e.g. our H200): the default. CUDA 12 drivers: GPU_PKGS="cupy-cuda12x numba-cuda[cu12]".
GPU_PKGS ?= cupy-cuda13x numba-cuda[cu13]
# Set WHEELHOUSE=/path/to/wheels to install offline (GPU boxes without internet); see README.
WHEELHOUSE ?=
PIP_FLAGS := $(if $(WHEELHOUSE),--no-index --find-links $(WHEELHOUSE),)

.PHONY: lab test lint gpu-check install clean-cache notebooks

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(PIP_FLAGS) --upgrade pip
	$(PY) -m pip install -q $(PIP_FLAGS) -e '.[dev]' $(GPU_PKGS)
	@touch $@

install: $(VENV)/.installed

lab: install
	@echo "Starting JupyterLab on port $(PORT) (open the URL printed below; notebooks are in notebooks/)"
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks --port=$(PORT) --ip=$${LAB_IP:-127.0.0.1} \
		$$( [ -z "$$DISPLAY" ] && echo --no-browser ) $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

test: install
	$(PY) -m ruff check tklab tests bench
	$(PY) -m pytest -q tests
	$(PY) -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider --ignore-glob='*.bak-*' notebooks

lint: install
	$(PY) -m ruff check tklab tests bench

# On a machine with an NVIDIA GPU: GPU tests, every notebook, the benchmarks, and a dated report in
# bench/results/. GPU_PYTHON=python3 uses an environment that already has the packages (a cluster module,
# an offline box) instead of .venv; REPORT_ARGS passes options (e.g. --skip bench --timeout 600).
GPU_PYTHON ?= $(PY)
REPORT_DIR ?= bench/results
REPORT_ARGS ?=
gpu-check: $(if $(filter $(PY),$(GPU_PYTHON)),install)
	$(GPU_PYTHON) -m tklab.report --out $(REPORT_DIR) $(REPORT_ARGS)

# Re-execute every notebook and store clean outputs (after new GPU results are recorded). Notebooks with
# uncommitted edits are refused unless NB_ARGS=--backup (they are copied aside first).
notebooks: install
	$(PY) -m tklab.nbrefresh $(NB_ARGS)

clean-cache:
	rm -rf $${TKLAB_CACHE_DIR:-$$HOME/.cache/tklab} .cache
