#!/usr/bin/env bash
# One device-machine session, in parts (GPU_PARTS, default "tracer gputests codegen"):
#   tracer   the tracer suite on that machine's Python (3.12)
#   gputests the GPU-marked tests, in a process of their own (tests/codegen's conftest turns
#            Triton's interpreter on for its whole process; tests/jupyter needs IPython, which
#            that machine lacks)
#   cudatests the code generator's tests on CUDA: the Triton differential tests compiled by
#            real Triton and every GPU-marked test of tests/codegen (CODEGEN_TEST_DEVICE=cuda)
#   codegen  benchmarks/codegen_gpu.py: the Triton differential tests on CUDA, then eager vs
#            ours vs torch.compile ($CODEGEN_ARGS)
#   train    benchmarks/train_gpu.py ($TRAIN_ARGS)
#   overhead benchmarks/overhead.py on CUDA
#   cold     benchmarks/cold_gpu.py: where a cold compile's time goes ($COLD_ARGS)
# Logs go to $OUT; the last lines of each are printed.
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PYTEST="python3 -m pytest -q -p no:cacheprovider -p no:logging -o addopts=--import-mode=importlib"
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
for part in ${GPU_PARTS:-tracer gputests codegen}; do
  case $part in
    tracer)
      timeout 240 $PYTEST tests/tracer > "$OUT/tracer_py312.txt" 2>&1
      tail -3 "$OUT/tracer_py312.txt" ;;
    gputests)
      timeout 300 $PYTEST -m gpu tests/runtime tests/aot tests/backends tests/tracer > "$OUT/gpu_tests.txt" 2>&1
      tail -3 "$OUT/gpu_tests.txt" ;;
    cudatests)
      CODEGEN_TEST_DEVICE=cuda timeout "${CUDA_TESTS_TIMEOUT:-300}" $PYTEST \
        tests/codegen/test_triton_*.py > "$OUT/cuda_differential.txt" 2>&1
      tail -3 "$OUT/cuda_differential.txt"
      CODEGEN_TEST_DEVICE=cuda timeout "${CUDA_TESTS_TIMEOUT:-300}" $PYTEST -rs -m gpu \
        tests/codegen > "$OUT/cuda_gpu_marked.txt" 2>&1
      tail -3 "$OUT/cuda_gpu_marked.txt" ;;
    codegen)
      timeout "${CODEGEN_TIMEOUT:-400}" python3 benchmarks/codegen_gpu.py ${CODEGEN_ARGS:-} > "$OUT/codegen_gpu.txt" 2>&1
      tail -20 "$OUT/codegen_gpu.txt" ;;
    train)
      timeout "${TRAIN_TIMEOUT:-400}" python3 benchmarks/train_gpu.py ${TRAIN_ARGS:-} > "$OUT/train_gpu.txt" 2>&1
      tail -12 "$OUT/train_gpu.txt" ;;
    cold)
      timeout 200 python3 benchmarks/cold_gpu.py ${COLD_ARGS:-} > "$OUT/cold_gpu.txt" 2>&1
      tail -40 "$OUT/cold_gpu.txt" ;;
    overhead)
      timeout 90 python3 benchmarks/overhead.py --device cuda > "$OUT/overhead.txt" 2>&1
      tail -8 "$OUT/overhead.txt" ;;
  esac
done
