#!/usr/bin/env bash
# A session's H200 timings in one device call, one benchmark after another (each alone on the
# GPU, so their CUDA-event medians are not shared with other work), each under its own time
# limit, its log's last lines appended to $OUT/gpu_bench.txt as soon as it ends (a call cut
# short still returns what finished). Parts (GPU_BENCH, in order; default all):
#   probe     benchmarks/range_factories_gpu.py: integer linspace/logspace against eager's kernels
#   optim     benchmarks/optim_gpu.py: the AdamW step alone, GPT-2 small's parameters
#   amp       benchmarks/amp_train_gpu.py: the bf16 training steps of $AMP_MODELS (default
#             gpt2 llama), reduce-overhead mode, eager and ours (AMP_ARGS=--tc adds
#             torch.compile)
#   sweep     benchmarks/dynamic_sweep.py --device cuda: the 24-length decoder sweep
# Extra arguments per part: PROBE_ARGS, OPTIM_ARGS, AMP_ARGS, SWEEP_ARGS.
set -u
OUT=${OUT:-/tmp/gpu_out}
LOGS=/tmp/gpu_bench_logs
mkdir -p "$OUT" "$LOGS"
[ -d .whl ] && pip install --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
python3 -m compiler.runtime.cpp_ext build >/dev/null 2>&1 || echo "the C++ extension is not built"
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())" > "$OUT/gpu_bench.txt"
part() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  timeout -s INT -k 10 "$limit" "$@" > "$LOGS/$name.txt" 2>&1
  { echo "== $name (exit $?)"; tail -40 "$LOGS/$name.txt" | cut -c1-300; } >> "$OUT/gpu_bench.txt"
}
for p in ${GPU_BENCH:-probe optim amp sweep}; do
  case $p in
    probe) part probe 60 python3 benchmarks/range_factories_gpu.py ${PROBE_ARGS:-} ;;
    optim) part optim 90 python3 benchmarks/optim_gpu.py ${OPTIM_ARGS:---models gpt2 --optimizer adamw} ;;
    amp) for model in ${AMP_MODELS:-gpt2 llama}; do
           part amp_$model 170 python3 benchmarks/amp_train_gpu.py --model $model \
             --mode reduce-overhead --steps 3 --time 10 ${AMP_ARGS:-}
         done ;;
    sweep) part sweep 120 python3 benchmarks/dynamic_sweep.py --device cuda ${SWEEP_ARGS:-} ;;
  esac
done
tar czf "$OUT/gpu_bench_logs.tgz" -C "$LOGS" .
cat "$OUT/gpu_bench.txt"
