#!/bin/bash
# Run the GPU tests, the GEMM and attention benchmarks and the main commands on an H100/H200 machine.
#
#   bash bench/device_run.sh OUTDIR [pytest -k expression for the bench]
#
# Expects `argus_cutlass` importable (pip install . ; or wheels in .whl/, installed below
# to /tmp/site when present: the lent device has no package index), nvcc, and torch for
# the cuBLAS baseline. Kernels are compiled first, in parallel, through the shared cache.
set -o pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: bench/device_run.sh OUTDIR}
mkdir -p "$OUT"
if ls "$R"/.whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$R"/.whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
nvcc --version | tail -1
cd /tmp  # import the installed package, not the source folder
python3 -m pytest -q -rA -m gpu "$R/tests/gpu" -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | grep -vE "^PASSED" | tail -20
ARGUS_BENCH_TABLE="$OUT/bench_table.md" python3 -m pytest -q -s "$R/bench/test_gemm_bench.py" \
  -p no:cacheprovider --benchmark-json="$OUT/bench.json" ${2:+-k "$2"} 2>&1 | tee "$OUT/bench.log" | tail -22
ARGUS_BENCH_TABLE="$OUT/attention_table.md" python3 -m pytest -q -s "$R/bench/test_attention_bench.py" \
  -p no:cacheprovider --benchmark-json="$OUT/attention.json" 2>&1 | tee "$OUT/attention_bench.log" | tail -30
python3 -m argus_cutlass.cli gemm --m 4096 --n 4096 --k 4096 --out "$OUT/cli" 2>&1 | tee "$OUT/cli.log"
python3 -m argus_cutlass.cli attention --batch 2 --heads 16 --seqlen-q 8192 --head-dim 128 --out "$OUT/cli" 2>&1 \
  | tee "$OUT/cli_attention.log"
