#!/usr/bin/env bash
# What a GPU box without internet needs for the notebooks' check there (`python -m tklab.course.report --skip
# tests,bench --notebooks '1*'`), as one folder that travels in ONE device call beside the working tree (64 MiB in
# all), so that nothing depends on the machine staying warm between calls:
#   - nbval and a Jupyter kernel, as wheels for the box's Python, less what its image has already (numpy,
#     matplotlib, pytest and their kind, as /work/.library/device/KINDS.md lists them) and less what a kernel run by
#     nbval never imports (debugpy: the debugger; jedi and parso: tab completion; widgetsnbextension: the classic
#     notebook's front end; IPython and ipykernel import the first three only if present). About 5 MB.
#   - the NVRTC the workbook pins, re-packed with LZMA (58 -> 41 MB; pip reads any compression zipfile reads, and the
#     wheel's RECORD hashes the uncompressed files, so it installs as the original): the box's own NVRTC (13.0.88)
#     schedules other SASS than the pinned one, so the notebooks' stored instruction counts and the kernels timed
#     there would not be what a learner's pip install gets.
#   bench/notebook_wheels.sh .nbkit               # here (echo /.nbkit/ >> .git/info/exclude first)
# and on the GPU box (attention_gpu_round.sh's part `kit`, carry .nbkit):
#   python3 -m pip install -q --no-deps --no-index .nbkit/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: notebook_wheels.sh OUT_DIR [PYTHON_VERSION, default 3.12]}
py=${2:-3.12}
mkdir -p "$out"
python3 -m pip download -q --only-binary=:all: --python-version "$py" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$out" nbval ipykernel ipywidgets nbclient nbformat
# already in the GPU image (KINDS.md: pip finds them there), then what nbval's kernel never imports (see above)
for have in numpy matplotlib pillow fonttools kiwisolver contourpy cycler pyparsing python_dateutil packaging pytest \
            pluggy iniconfig psutil pygments attrs coverage typing_extensions \
            debugpy jedi parso widgetsnbextension; do rm -f "$out"/"$have"-*.whl; done
du -sh "$out"
pinned=$(grep -o 'nvidia-cuda-nvrtc==[0-9.]*' pyproject.toml | cut -d= -f3)  # the workbook's pin
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
  -d "$tmp" "nvidia-cuda-nvrtc==$pinned"
whl=$(ls "$tmp"/nvidia_cuda_nvrtc-*.whl)
python3 - "$whl" "$out/$(basename "$whl")" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as src, zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_LZMA) as dst:
    for info in src.infolist():
        dst.writestr(info, src.read(info), compress_type=zipfile.ZIP_LZMA)
PY
rm -rf "$tmp"
du -sh "$out"
