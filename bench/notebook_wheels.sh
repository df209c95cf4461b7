#!/usr/bin/env bash
# The H200 check of the notebooks (`python -m tklab.course.report --skip tests,bench --notebooks '1*'`) needs nbval
# and a Jupyter kernel, which a GPU image without internet may lack (the lent H200's does: 2026-12-05). This fetches
# them as wheels for the GPU box's Python, here, where pip reaches PyPI (about 18 MB: what the box's image has already,
# numpy, matplotlib, pillow, pytest and their kind, is left out, as /work/.library/device/KINDS.md lists it):
#   bench/notebook_wheels.sh .whl                 # here (echo /.whl/ >> .git/info/exclude first)
# and on the GPU box, before the report:
#   python3 -m pip install -q --no-index --find-links .whl nbval ipykernel ipywidgets nbclient matplotlib
# pip installs only what the box lacks (without --target, so what is there already satisfies the rest).
# It also splits the NVRTC wheel the workbook pins (58 MB) into .nvrtca and .nvrtcb, one per call (a call carries at
# most 64 MiB with the working tree): the box's own NVRTC (13.0.88) schedules other SASS than the pinned one, so
# the notebooks' stored instruction counts and the kernels timed there would not be what a learner's pip install
# gets. attention_gpu_round.sh's parts nvrtc-a and nvrtc-b put it together and install it there.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: notebook_wheels.sh OUT_DIR [PYTHON_VERSION, default 3.12]}
py=${2:-3.12}
mkdir -p "$out"
python3 -m pip download -q --only-binary=:all: --python-version "$py" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$out" nbval ipykernel ipywidgets nbclient nbformat matplotlib
# already in the GPU image (KINDS.md): pip finds them there
for have in numpy matplotlib pillow fonttools kiwisolver contourpy cycler pyparsing python_dateutil packaging pytest \
            pluggy iniconfig psutil pygments attrs coverage typing_extensions; do rm -f "$out"/"$have"-*.whl; done
du -sh "$out"
pinned=$(grep -o 'nvidia-cuda-nvrtc==[0-9.]*' pyproject.toml | cut -d= -f3)  # the workbook's pin
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
  -d "$tmp" "nvidia-cuda-nvrtc==$pinned"
rm -rf .nvrtca .nvrtcb && mkdir -p .nvrtca .nvrtcb
split -b 26000000 "$tmp"/nvidia_cuda_nvrtc-*.whl "$tmp"/part.
mv "$tmp"/part.aa .nvrtca/ && mv "$tmp"/part.a[b-z] .nvrtcb/
basename "$tmp"/nvidia_cuda_nvrtc-*.whl > .nvrtcb/NAME
rm -rf "$tmp"
du -sh .nvrtca .nvrtcb
