#!/usr/bin/env bash
# One device-machine session: the tracer suite on that machine's Python (3.12), the per-call
# overhead benchmark, and the code generator's GPU checks and timings. Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 --version | tee "$OUT/env.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee -a "$OUT/env.txt"
timeout 180 python3 -m pytest tests/tracer -q -p no:cacheprovider -o addopts="--import-mode=importlib" 2>&1 | tail -25 > "$OUT/tracer_py312.txt"
tail -3 "$OUT/tracer_py312.txt"
timeout 60 python3 benchmarks/overhead.py --device cuda 2>&1 | tail -20 > "$OUT/overhead.txt"
cat "$OUT/overhead.txt"
timeout ${CODEGEN_TIMEOUT:-330} python3 benchmarks/codegen_gpu.py ${CODEGEN_ARGS:-} 2>&1 | tail -60 > "$OUT/codegen_gpu.txt"
cat "$OUT/codegen_gpu.txt"
