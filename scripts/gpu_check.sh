#!/usr/bin/env bash
# The GPU check, for a machine with a CUDA GPU (run through the library's device tool
# when one is lent): build with CUDA kernels, run the CUDA tests, run a short GPU
# benchmark. Budget: under 5 minutes. The benchmark table is printed last.
#
#   bash scripts/gpu_check.sh            # OUT=<dir> keeps the logs and JSON there
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fastload-gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FASTLOAD_CUDA=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"

start=$(date +%s)
make build > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
.venv/bin/python -m fastload.info | tee "$OUT/info.txt"

# CUDA tests first: kernels vs CPU kernel vs reference, nvJPEG vs libjpeg, loader transfer.
timeout 150 .venv/bin/python -m pytest -q -m cuda -p no:cacheprovider tests 2>&1 | tee "$OUT/cuda_tests.log" | tail -25
tests_status=${PIPESTATUS[0]}

# DALI for CUDA 13 if it installs (the CPU contender uses nvidia-dali-cuda120).
.venv/bin/python -m pip install -q nvidia-dali-cuda130 > "$OUT/dali.log" 2>&1 || true

timeout 150 .venv/bin/python benchmarks/gpu.py --images 3000 --dataset-images 1000 --json "$OUT/gpu_bench.json" \
  2> "$OUT/gpu_bench.log" | tee "$OUT/gpu_table.txt"
echo "cuda tests exit status: $tests_status; total $(( $(date +%s) - start )) s"
exit "$tests_status"
