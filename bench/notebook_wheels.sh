#!/usr/bin/env bash
# The H200 check of the notebooks (`python -m tklab.course.report --skip tests,bench --notebooks '1*'`) needs nbval
# and a Jupyter kernel, which a GPU image without internet may lack (the lent H200's does: 2026-12-05). This fetches
# them as wheels for the GPU box's Python, here, where pip reaches PyPI (about 43 MB; numpy left out, the box has it):
#   bench/notebook_wheels.sh .whl                 # here (echo /.whl/ >> .git/info/exclude first)
# and on the GPU box, before the report:
#   python3 -m pip install -q --no-index --find-links .whl nbval ipykernel ipywidgets nbclient matplotlib
# pip installs only what the box lacks (without --target, so what is there already satisfies the rest).
set -euo pipefail
out=${1:?usage: notebook_wheels.sh OUT_DIR [PYTHON_VERSION, default 3.12]}
py=${2:-3.12}
mkdir -p "$out"
python3 -m pip download -q --only-binary=:all: --python-version "$py" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$out" nbval ipykernel ipywidgets nbclient nbformat matplotlib
rm -f "$out"/numpy-*.whl
du -sh "$out"
