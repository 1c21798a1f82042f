#!/usr/bin/env bash
# Downloads into ./.whl the wheels benchmarks/gpu_check.sh installs on a bare device machine
# (listed in benchmarks/device_wheels.txt: Python 3.12, x86-64 Linux), about 38 MB.
#
#   benchmarks/device_wheels.sh            # then carry .whl with the run (the device tool's `carry`)
set -euo pipefail
cd "$(dirname "$0")/.."
platforms=()
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
"${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl -r benchmarks/device_wheels.txt
echo "$(ls .whl/*.whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl"
