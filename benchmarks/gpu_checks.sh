#!/usr/bin/env bash
# Every CUDA check of a session in one device call (the device machine has 16 cores and one
# GPU; the checks run side by side, each in a process of its own, each stopped with SIGINT at
# its time limit so that pytest still prints what it ran):
#   tracer      the tracer suite on the machine's Python (3.12)
#   gputests    the GPU-marked tests of runtime/aot/backends/tracer
#   cudatests   the Triton differential tests compiled by real Triton, and every GPU-marked
#               test of tests/codegen (CODEGEN_TEST_DEVICE=cuda), the OpInfo CI subset included
#   opinfo      the full OpInfo run (every sample) on CUDA in $OPINFO_SHARDS interleaved shards
#   fuzz        the FX-graph fuzzer on CUDA, $FUZZ_CASES cases
#   amp         with AMP_GPU set (a second GPU's index), benchmarks/amp_train_gpu.py's GPT-2 and
#               Llama steps in reduce-overhead mode against torch.compile, on that GPU (its
#               times share the host's cores with the tests: read them as a check, not a record)
# CHECKS names the checks to run (default: all but amp); OPINFO_K adds a -k selection of the
# OpInfo cases with all their samples; PYTEST_N=k runs each pytest check in k xdist workers
# (for a short call with few checks).
# Summaries go to $OUT/gpu_checks.txt (the device returns at most 8 files).
set -u
OUT=${OUT:-/tmp/gpu_out}
LOGS=/tmp/gpu_logs
LIMIT=${LIMIT:-480}
mkdir -p "$OUT" "$LOGS"
[ -d .whl ] && pip install --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
# ~13 processes share 16 cores: a few compile workers each, not 16
export COMPILER_COMPILE_WORKERS=${COMPILER_COMPILE_WORKERS:-2} COMPILER_COMPILE_THREADS=2
python3 -m compiler.runtime.cpp_ext build >/dev/null 2>&1 || echo "the C++ extension is not built: guards and launches stay in Python"
PYTEST="python3 -m pytest -q -p no:cacheprovider -p no:logging -o addopts=--import-mode=importlib ${PYTEST_N:+-n $PYTEST_N}"
summarise() {  # name: its log's counts and failures, appended to the summary
  { echo "== $1"
    grep -E "^(FAILED|ERROR)|passed|failed|^total|^cuda |exit [0-9]+|ms/step|CUDA graph \(|^  +[0-9.]+ ms x|GPU time|loss difference" "$LOGS/$1.txt" | cut -c1-400 | tail -60
  } >> "$OUT/gpu_checks.txt"
}
# Each check is stopped with SIGINT at $LIMIT and killed 20 s later (a pytest that ignores the
# interrupt must not hold the whole call past the device's limit); its summary is written as
# soon as it ends, so a call cut short still returns what finished.
run() {  # name, command...
  local name=$1; shift
  (timeout -s INT -k 20 "$LIMIT" "$@" > "$LOGS/$name.txt" 2>&1; echo "exit $?" >> "$LOGS/$name.txt"
   summarise "$name") &
}
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())" > "$OUT/gpu_checks.txt"
want() { [[ " ${CHECKS:-tracer gputests cuda_differential cuda_gpu_marked opinfo fuzz} " == *" $1 "* ]]; }
want tracer && run tracer $PYTEST tests/tracer
want gputests && run gputests $PYTEST -m gpu tests/runtime tests/aot tests/backends tests/tracer
want cuda_differential && CODEGEN_TEST_DEVICE=cuda run cuda_differential $PYTEST tests/codegen/test_triton_*.py
# OPINFO_K: a -k selection of the OpInfo cases (its full samples), run beside the rest
want cuda_gpu_marked && CODEGEN_TEST_DEVICE=cuda run cuda_gpu_marked $PYTEST -rs -m gpu tests/codegen \
  ${OPINFO_K:+-k "not test_opinfo"}
[ -n "${OPINFO_K:-}" ] && OPINFO_FULL=1 CODEGEN_TEST_DEVICE=cuda \
  run opinfo_selected $PYTEST -m gpu tests/codegen/test_opinfo_differential.py -k "$OPINFO_K"
SHARDS=${OPINFO_SHARDS:-8}
want opinfo && for i in $(seq 0 $((SHARDS - 1))); do
  OPINFO_FULL=1 OPINFO_SHARD=$i/$SHARDS CODEGEN_TEST_DEVICE=cuda \
    run opinfo_$i $PYTEST -m gpu tests/codegen/test_opinfo_differential.py
done
want fuzz && FUZZ_EXAMPLES=${FUZZ_CASES:-2000} FUZZ_SHRINK=0 CODEGEN_TEST_DEVICE=cuda \
  run fuzz $PYTEST --timeout=0 -k test_fuzz_cuda tests/codegen/test_fuzz_graphs.py
if [ -n "${AMP_GPU:-}" ]; then
  (for model in gpt2 llama; do
     CUDA_VISIBLE_DEVICES=$AMP_GPU timeout -k 10 240 python3 benchmarks/amp_train_gpu.py --model $model \
       --mode reduce-overhead --steps 3 --time 10 --tc --profile --notes
   done > "$LOGS/amp.txt" 2>&1; summarise amp) &
fi
wait
cp test-output/fuzz/*.json "$LOGS"/ 2>/dev/null
tar czf "$OUT/gpu_logs.tgz" -C "$LOGS" .
cat "$OUT/gpu_checks.txt" | cut -c1-300 | tail -150
