"""Real models through eager, ours (`compiler.compile`) and torch.compile: capture, correctness,
speed, cold compile time and peak memory, one row per model and mode.

    .venv/bin/python benchmarks/models.py --suite torchvision --mode eval --device cpu
    .venv/bin/python benchmarks/models.py --suite timm --only resnet18,vit_tiny_patch16_224
    .venv/bin/python benchmarks/models.py --merge a.jsonl b.jsonl --out all   # tables of both

Suites (benchmarks/model_suites.py): every classification model of torchvision.models, ~60
timm models across families, and BERT, DistilBERT, RoBERTa, GPT-2, the T5 encoder, ViT and a
small Llama-style decoder from transformers' config classes. Weights are random; dropout and
drop-path are switched off (a compiled model draws other random numbers than eager).

CPU defaults are small: batch 2 (4 in train mode, see default_batch), 64x64 images where the
model allows (fixed-size models get theirs), 64 tokens; GPU defaults: batch 16, 128x128, 128.

Each model and mode runs in its own subprocess with fresh, empty cache folders
(COMPILER_CACHE_DIR for ours, TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR for
torch.compile), so a crash or a hang is one failed row (--timeout) and every first call is a
cold compile. In the subprocess:

1. eager runs once for the reference: outputs in eval mode (under no_grad), and in train mode
   the loss (the outputs weighted by fixed random tensors, averaged), every parameter's
   gradient and every buffer after one forward+backward;
2. ours, then torch.compile, run their first call from the same weights and buffers; the
   results are compared with eager's (largest error over the largest reference value, per
   tensor, against a tolerance for the dtype; a tensor over it is judged against a float64
   eager run instead, as PyTorch's benchmarks do: an RMS error within 3x eager's own float32
   error passes, 10x for a tensor that eager cannot compute to the tolerance either);
   graphs, breaks with reasons, eager fallbacks and CompilerWarnings come from
   compiler.inspect;
3. all three are timed interleaved round-robin after warm-up (medians; CUDA events on GPU,
   perf_counter on CPU); cold compile is the first call minus the median call;
4. peak memory: the most bytes allocated at once during one call beyond what was live before
   it (torch.cuda's peak statistics on GPU, the profiler's allocation events on CPU), with a
   train step's old gradients freed before the call;
5. torch._dynamo.explain gives torch.compile's graph count and break reasons (run even with
   --skip-torch-compile, which skips only its compile and timing).

Rows are appended to OUT.jsonl as they finish (--resume skips rows already there, so a long
run can be done in chunks); OUT.md gets the tables and per-suite summaries; worker logs go to
OUT.logs/. torch.compile and torch._dynamo appear here only, as the anchor we measure against.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.model_runs import commit, default_batch, new_row, read_rows, run_all  # noqa: E402
from benchmarks.model_suites import (  # noqa: E402
    ModelSpec,
    disable_randomness,
    make_inputs,
    suite_specs,
)
from benchmarks.model_tables import render_markdown  # noqa: E402

RUNNERS = ("eager", "ours", "torch.compile")
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 3e-2, torch.float16: 1e-2}
FP64_MULTIPLIER = 3.0
FP64_NOISE_MULTIPLIER = 10.0
# Ours compiled in float64 against eager in float64: the same function up to float64 rounding
# and eager's own float64 kernels, not all exact: hardsigmoid's backward multiplies by
# 1.0f / 6.0f, the float32 sixth, 3e-8 off (timm ghostnet_100's train step: every gradient
# through its squeeze-excite gates is 3.0e-8 off, while with a Python hard sigmoid ours is
# eager to 8e-11). A different function is off by far more.
FLOAT64_EXACT = 1e-7


# ---- results of one call ---------------------------------------------------------------------


def flatten(value: Any) -> list[torch.Tensor]:
    """The tensors of a model's output (tensors, tuples, lists, dicts, HF ModelOutputs)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flatten(v)]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flatten(v)]
    return []


_LOSS_WEIGHTS: dict[tuple, torch.Tensor] = {}


def scalar_loss(out: Any) -> torch.Tensor:
    """Each floating output against fixed random weights, summed. A plain mean would be
    blind: the mean of a normalised output (a batch or layer norm last) does not depend on
    anything before the norm, so those gradients would be rounding noise. Half-precision
    outputs are summed in float32, float64 ones in float64 (a float32 sum would put float32
    rounding into the float64 re-check)."""
    tensors = [t for t in flatten(out) if t.is_floating_point() and t.requires_grad]
    if not tensors:
        raise RuntimeError("no output requires grad: nothing to train")
    total = 0.0
    for i, t in enumerate(tensors):
        key = (i, tuple(t.shape), t.device, t.dtype)
        if key not in _LOSS_WEIGHTS:
            gen = torch.Generator().manual_seed(1000 + i)
            _LOSS_WEIGHTS[key] = torch.randn(t.shape, generator=gen).to(t.device, t.dtype)
        total = (
            total + (t * _LOSS_WEIGHTS[key]).to(torch.promote_types(t.dtype, torch.float32)).mean()
        )
    return total


def capture(model: torch.nn.Module, out: Any, loss: torch.Tensor | None) -> dict[str, Any]:
    """Everything a call produced that must match eager: outputs, and for a train step the
    loss, the gradients and the buffers (batch-norm running statistics)."""
    result = {f"output {i}": t.detach().clone() for i, t in enumerate(flatten(out))}
    if loss is not None:
        result["loss"] = loss.detach().clone()
        for name, p in model.named_parameters():
            result[f"grad {name}"] = None if p.grad is None else p.grad.detach().clone()
        for name, b in model.named_buffers():
            result[f"buffer {name}"] = b.detach().clone()
    return result


def tensor_error(ref: torch.Tensor | None, got: torch.Tensor | None) -> float:
    """Largest absolute difference over the reference's largest magnitude (0 = equal)."""
    if ref is None or got is None:
        return 0.0 if ref is None and got is None else math.inf
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return math.inf
    if not ref.is_floating_point() and not ref.is_complex():
        return 0.0 if torch.equal(ref, got) else math.inf
    if ref.numel() == 0:
        return 0.0
    r, g = ref.double(), got.double()
    if not torch.equal(r.isnan(), g.isnan()):
        return math.inf
    finite = ~r.isnan()
    r, g = r[finite], g[finite]
    if r.numel() == 0:
        return 0.0
    if not torch.equal(r.isinf(), g.isinf()) or not torch.equal(r[r.isinf()], g[g.isinf()]):
        return math.inf
    both = ~r.isinf()
    r, g = r[both], g[both]
    if r.numel() == 0:
        return 0.0
    return ((r - g).abs().max() / (r.abs().max() + 1e-6)).item()


def _rmse(ref: torch.Tensor, got: torch.Tensor) -> float:
    return (ref.double() - got.double()).pow(2).mean().sqrt().item()


def compare(
    ref: dict[str, Any], got: dict[str, Any], tol: float, ref64: Callable[[], dict] | None
) -> dict[str, Any]:
    """Per-tensor errors against eager; tensors over `tol` are judged again against a float64
    eager run (computed on demand) when `ref64` is given."""
    if set(ref) != set(got):
        missing = sorted(set(ref) ^ set(got))[:3]
        return {"correct": False, "err": math.inf, "worst": f"different outputs: {missing}"}
    errors = {k: tensor_error(ref[k], got[k]) for k in ref}
    worst = max(errors, key=errors.get) if errors else ""
    result = {"err": errors.get(worst, 0.0), "worst": worst, "check": "vs eager"}
    over = [k for k, e in errors.items() if e > tol]
    if not over:
        return {**result, "correct": True}
    if ref64 is None or any(math.isinf(errors[k]) for k in over):
        return {**result, "correct": False}
    r64 = ref64()
    failing = []
    for k in over:
        eager_rmse, ours_rmse = _rmse(r64[k], ref[k]), _rmse(r64[k], got[k])
        scale = _rmse(r64[k], torch.zeros_like(r64[k]))
        # As PyTorch's benchmarks judge accuracy: no further from float64 than a multiple
        # of eager's own float32 error. A tensor that eager cannot compute to `tol` either
        # (a batch mean that is zero up to rounding) is noise: a wider multiple.
        noise = eager_rmse > tol * scale
        multiplier = FP64_NOISE_MULTIPLIER if noise else FP64_MULTIPLIER
        if ours_rmse > max(tol * scale, multiplier * eager_rmse):
            failing.append((k, ours_rmse, eager_rmse))
    result["check"] = "vs float64 eager"
    if failing:
        k, ours_err, eager_err = failing[0]
        return {
            **result,
            "correct": False,
            "worst": f"{k} (RMS error vs float64 {ours_err:.1e}, eager's {eager_err:.1e})",
        }
    return {**result, "correct": True}


# ---- timing and memory -------------------------------------------------------------------------


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_once(fn: Callable[[], Any], device: str) -> float:
    """Seconds of one call."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_interleaved(
    steps: dict[str, Callable[[], Any]], device: str, budget_s: float
) -> dict[str, float]:
    """Median seconds per call of each step, calls interleaved round-robin so a change of load
    on a shared machine hits every runner alike; as many rounds as fit `budget_s` per runner."""
    single = {name: time_once(step, device) for name, step in steps.items()}
    rounds = max(3, min(50, int(budget_s / max(max(single.values()), 1e-6))))
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            times[name].append(time_once(step, device))
    return {name: statistics.median(ts) for name, ts in times.items()}


def peak_bytes(fn: Callable[[], Any], device: str) -> int:
    """Most bytes allocated at once during `fn()` beyond what was live before it."""
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # Each allocation event carries the CPU allocator's running total of the bytes allocated
    # while profiling (frees of blocks from before the profile are not subtracted).
    allocations = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _EventType.Allocation:
            fields = event.extra_fields
            allocations.append((event.start_time_ns, fields.alloc_size, fields.total_allocated))
    if not allocations:
        return 0
    allocations.sort()
    _, first_size, first_total = allocations[0]
    return max(total for _, _, total in allocations) - (first_total - first_size)


# ---- one model in one mode (the subprocess) ----------------------------------------------------


def _error_text(exc: BaseException) -> str:
    """`Type: message` plus the innermost frame of the compiler (or the last frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/compiler/" in f.filename]
    where = (ours or frames or [None])[-1]
    message = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {message[0][:300] if message else ''}"
    if where is not None:
        text += f" [{Path(where.filename).parent.name}/{Path(where.filename).name}:{where.lineno}]"
    return text


def _break_text(reason: str, filename: str | None, lineno: int | None) -> str:
    reason = " ".join(reason.split())[:200]
    return f"{reason} ({Path(filename).name}:{lineno})" if filename else reason


def ours_records(compiled: Any) -> dict[str, Any]:
    """Graphs, breaks, fallbacks and backend notes of a compiled model, from its records."""
    import compiler

    report = compiler.inspect(compiled)
    breaks = []
    for entry in report.entries:
        brk = entry.graph_break
        if brk is not None:
            where = brk.user_stack[-1] if brk.user_stack else None
            breaks.append(_break_text(brk.reason, where and where.filename, where and where.lineno))
    fallbacks = [g.fallback for g in report.graphs if g.fallback]
    fallbacks += [w for f in report.functions for w in f.warnings]
    # Eager by design (a training graph the partitioner cannot split, ...): a note, no warning.
    fallbacks += [n for g in report.graphs for n in g.notes if "eagerly" in n]
    notes = sorted({n for g in report.graphs for n in g.notes})
    stages: dict[str, float] = {}
    for g in report.graphs:
        for st in g.stage_times:
            stages[st.stage] = round(stages.get(st.stage, 0.0) + st.seconds, 2)
    return {
        "stages": stages,
        "graphs": len(report.graphs),
        "entries": len(report.entries),
        "breaks": breaks,
        "fallbacks": [" ".join(f.split())[:300] for f in fallbacks],
        "notes": notes[:8],
        "kernels": len(report.kernels),
    }


def dynamo_explain(model: torch.nn.Module, inputs: tuple, train: bool) -> dict[str, Any]:
    import torch._dynamo

    torch._dynamo.reset()
    with torch.set_grad_enabled(train):
        ex = torch._dynamo.explain(model)(*inputs)
    breaks = []
    for br in ex.break_reasons:
        where = br.user_stack[-1] if br.user_stack else None
        breaks.append(_break_text(br.reason, where and where.filename, where and where.lineno))
    return {"graphs": ex.graph_count, "breaks": breaks}


class Worker:
    """One model in one mode: builds it, runs the three runners, fills `row` phase by phase
    and saves it after each phase, so a crash or timeout still leaves what was measured."""

    def __init__(self, spec: ModelSpec, args: argparse.Namespace, row: dict, save: Callable):
        self.spec, self.args, self.row, self.save = spec, args, row, save
        self.device = args.device
        self.train = args.mode == "train"
        self.dtype = getattr(torch, args.dtype)
        self.tol = TOLERANCE[self.dtype]

    def phase(self, name: str) -> None:
        self.row["phase"] = name
        self.save()

    def build(self) -> None:
        self.phase("build")
        torch.manual_seed(0)
        model = self.spec.build()
        disable_randomness(model)
        model = model.to(self.device)
        if self.dtype != torch.float32:
            model = model.to(self.dtype)
        self.model = model.train(self.train)
        args = self.args
        self.inputs = make_inputs(
            self.spec, args.batch, args.size, args.seq, self.device, self.dtype
        )
        self.row["input"] = " ".join("x".join(map(str, t.shape)) for t in self.inputs)
        self.row["params_m"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
        self.state0 = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def restore(self) -> None:
        """Back to the weights and buffers of the start (a train step moves BN statistics)."""
        with torch.no_grad():
            for k, v in self.model.state_dict().items():
                v.copy_(self.state0[k])
        for p in self.model.parameters():
            p.grad = None

    def step_of(self, fn: Callable) -> Callable[..., tuple[Any, torch.Tensor | None]]:
        model, inputs = self.model, self.inputs
        if self.train:

            def step(clear_grads: bool = True):
                if clear_grads:
                    for p in model.parameters():
                        p.grad = None
                out = fn(*inputs)
                loss = scalar_loss(out)
                loss.backward()
                return out, loss

        else:

            def step(clear_grads: bool = True):
                with torch.no_grad():
                    return fn(*inputs), None

        return step

    def reference64(self) -> dict[str, Any]:
        """The eager result in float64, from the same start state (on demand, once)."""
        if not hasattr(self, "_ref64"):
            self._ref64 = self.run64(lambda model: model)
        return self._ref64

    def run64(
        self, wrap: Callable[[torch.nn.Module], Callable], device: str | None = None
    ) -> dict[str, Any]:
        """One step of `wrap(a float64 copy of the model)` from the same start state, on
        `device` (default: the model's)."""
        model = copy.deepcopy(self.model).double().to(device or self.device)
        with torch.no_grad():
            for k, v in model.state_dict().items():
                v.copy_(self.state0[k])
        for p in model.parameters():
            p.grad = None
        fn = wrap(model)
        inputs = tuple(
            (t.double() if t.is_floating_point() else t).to(device or self.device)
            for t in self.inputs
        )
        if self.train:
            out = fn(*inputs)
            loss = scalar_loss(out)
            loss.backward()
        else:
            with torch.no_grad():
                out, loss = fn(*inputs), None
        return capture(model, out, loss)

    def float64_recheck(self, res: dict[str, Any], compile_fn: Callable) -> None:
        """A result further from float64 than eager's own float32 error, compiled and run again
        in float64: when that agrees with eager in float64 to FLOAT64_EXACT, the compiled code
        computes eager's function and the float32 step is ill-conditioned (rounding in any
        other algorithm moves it as much: shufflenet_v2's train step with oneDNN off in eager
        moved conv5's gradient by 5%). Recorded as such, not as wrong.

        On CUDA eager's own float64 is not always the closer one: mobilenet_v3_large's and
        levit_128s's train steps in eager float64 on the H100 are 6.3e-7 and 1.5e-7 from eager
        float64 on the CPU, where ours on CUDA is 3.1e-8 and 8e-11 from the CPU's
        (benchmarks/f64_gpu.py). There ours is also judged against eager's CPU float64."""
        try:
            got64 = self.run64(compile_fn)
        except Exception as exc:  # the verdict stays "wrong"
            res["float64_error"] = _error_text(exc)
            return
        ref64 = self.reference64()
        err = max((tensor_error(ref64[k], got64[k]) for k in ref64), default=0.0)
        res["float64_err"] = err
        if set(ref64) != set(got64):
            return
        if err <= FLOAT64_EXACT:
            res["correct"] = True
            res["check"] = f"float32 ill-conditioned; in float64 ours is eager to {err:.0e}"
        elif self.device != "cpu":
            cpu64 = self.run64(lambda model: model, device="cpu")
            ours = max(tensor_error(cpu64[k], got64[k].cpu()) for k in cpu64)
            eager = max(tensor_error(cpu64[k], ref64[k].cpu()) for k in cpu64)
            res["float64_err_vs_cpu"] = ours
            if ours <= FLOAT64_EXACT:
                res["correct"] = True
                res["check"] = (
                    f"float32 ill-conditioned; in float64 ours is eager's CPU float64 to "
                    f"{ours:.0e} (eager's own {self.device} float64 is {eager:.0e} from it)"
                )

    def eager(self) -> None:
        self.phase("eager")
        try:
            self.reference()
        except Exception as exc:
            spec, args = self.spec, self.args
            if spec.kind != "image" or spec.fixed_size or args.size >= spec.default_size:
                raise
            # Too small for the model (timm's inception_v3 below 75 px): its default size.
            self.row["note"] = f"fails at {args.size} px ({_error_text(exc)[:120]})"
            self.inputs = make_inputs(
                spec, args.batch, spec.default_size, args.seq, self.device, self.dtype
            )
            self.row["input"] = " ".join("x".join(map(str, t.shape)) for t in self.inputs)
            self.reference()
        self.steps = {"eager": self.step_of(self.model)}
        self.row["eager"] = {}

    def reference(self) -> None:
        self.restore()
        out, loss = self.step_of(self.model)()
        self.ref = capture(self.model, out, loss)

    def first_call(self, name: str, compiled: Any) -> None:
        """Compile (the first call) and check the result against eager's."""
        res = self.row[name]
        self.restore()
        step = self.step_of(compiled)
        sync(self.device)
        start = time.perf_counter()
        out, loss = step()
        sync(self.device)
        res["first_call_s"] = time.perf_counter() - start
        got = capture(self.model, out, loss)
        res.update(compare(self.ref, got, self.tol, self.reference64))
        self.steps[name] = step

    def ours(self) -> None:
        self.phase("ours")
        import compiler
        from compiler.records import CompilerWarning

        res = self.row["ours"] = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                compiled = compiler.compile(self.model)
                self.first_call("ours", compiled)
                if res.get("correct") is False and res.get("check") == "vs float64 eager":
                    self.float64_recheck(res, compiler.compile)
                res.update(ours_records(compiled))
                for _ in range(2):  # a warm-up that recompiles shows up as more entries
                    self.steps["ours"]()
                res["recompiles"] = ours_records(compiled)["entries"] - res["entries"]
            except Exception as exc:
                res["error"] = _error_text(exc)
                self.steps.pop("ours", None)
                try:
                    res.update(ours_records(compiled))
                except Exception:
                    pass
        res["warnings"] = sorted(
            {
                " ".join(str(w.message).split())[:300]
                for w in caught
                if w.category is CompilerWarning or str(w.message).startswith("compiler:")
            }
        )

    def torch_compile(self) -> None:
        self.phase("torch.compile")
        res = self.row["torch.compile"] = {}
        try:
            compiled = torch.compile(self.model)
            self.first_call("torch.compile", compiled)
            for _ in range(2):
                self.steps["torch.compile"]()
        except Exception as exc:
            res["error"] = _error_text(exc)
            self.steps.pop("torch.compile", None)

    def timing(self) -> None:
        self.phase("timing")
        for step in self.steps.values():
            step()  # warm-up (eager's first call, everyone's caches)
        medians = time_interleaved(self.steps, self.device, self.args.budget)
        for name, seconds in medians.items():
            res = self.row[name]
            res["ms"] = seconds * 1e3
            if "first_call_s" in res:
                res["compile_s"] = max(res["first_call_s"] - seconds, 0.0)

    def memory(self) -> None:
        self.phase("memory")
        for name, step in self.steps.items():
            # Last call's gradients are freed first, so a train step's peak counts the
            # gradients it makes, not the ones it replaces.
            for p in self.model.parameters():
                p.grad = None
            peak = peak_bytes(lambda step=step: step(clear_grads=False), self.device)
            self.row[name]["peak_mb"] = peak / 2**20

    def explain(self) -> None:
        self.phase("torch._dynamo.explain")
        tc = self.row.setdefault("torch.compile", {})
        try:
            tc.update(dynamo_explain(self.model, self.inputs, self.train))
        except Exception as exc:
            tc["explain_error"] = _error_text(exc)

    def run(self) -> None:
        self.build()
        self.eager()
        self.ours()
        if not self.args.skip_torch_compile:
            self.torch_compile()
        if not self.args.no_timing:
            self.timing()
            self.memory()
        self.explain()
        self.row["phase"] = "done"
        self.save()


def run_worker(args: argparse.Namespace) -> None:
    suite, name = args.worker.split(":", 1)
    spec = next(s for s in suite_specs(suite) if s.name == name)
    row = new_row(spec, args)
    path = Path(args.partial)

    def save() -> None:
        path.write_text(json.dumps(row, default=str))

    worker = Worker(spec, args, row, save)
    try:
        worker.run()
    except Exception as exc:
        # The eager model itself failed, or a measuring step did: the row says where.
        row["error"] = f"in {row.get('phase')}: {_error_text(exc)}"
        save()
        raise


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--suite", default="all", choices=("torchvision", "timm", "transformers", "all")
    )
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--skip", default="", help="comma-separated model names to leave out")
    parser.add_argument("--mode", default="eval", choices=("eval", "train", "both"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--batch", type=int, help="default 2 (train: 4) on CPU, 16 on GPU")
    parser.add_argument("--size", type=int, help="image side; default 64 on CPU, 128 on GPU")
    parser.add_argument("--seq", type=int, help="text models' length; default 64 / 128")
    parser.add_argument("--budget", type=float, help="timing seconds per runner; 1 / 2")
    parser.add_argument("--skip-torch-compile", action="store_true")
    parser.add_argument(
        "--no-timing", action="store_true", help="capture and correctness only (no speed, memory)"
    )
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per model and mode")
    parser.add_argument(
        "--out", help="OUT.jsonl / OUT.md / OUT.logs (default test-output/models/...)"
    )
    parser.add_argument("--resume", action="store_true", help="skip rows already in OUT.jsonl")
    parser.add_argument(
        "--jobs", type=int, default=1, help="models at once (more than 1 implies --no-timing)"
    )
    parser.add_argument("--list", action="store_true", help="print the models and exit")
    parser.add_argument("--merge", nargs="+", type=Path, help="tables from these .jsonl files")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--partial", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cpu = args.device == "cpu"
    args.size = args.size or (64 if cpu else 128)
    args.seq = args.seq or (64 if cpu else 128)
    args.budget = args.budget or (1.0 if cpu else 2.0)
    args.no_timing = args.no_timing or args.jobs > 1

    if args.worker:
        args.batch = default_batch(args, args.mode)
        run_worker(args)
        return
    command = "python benchmarks/models.py " + " ".join(sys.argv[1:])
    if args.merge:
        text = render_markdown(read_rows(args.merge), command)
        if args.out:
            Path(args.out).with_suffix(".md").write_text(text)
        print(text)
        return

    specs = suite_specs(args.suite)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {s.name for s in specs}
        if unknown:
            parser.error(f"unknown models for --suite {args.suite}: {', '.join(sorted(unknown))}")
        specs = [s for s in specs if s.name in wanted]
    skip = set(args.skip.split(",")) if args.skip else set()
    specs = [s for s in specs if s.name not in skip]
    if args.list:
        for s in specs:
            print(f"{s.suite}:{s.name}" + (f" ({s.fixed_size}px)" if s.fixed_size else ""))
        return

    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(
        args.out
        or ROOT / "test-output" / "models" / f"{args.suite}-{args.mode}-{args.device}-{stamp}"
    )
    out = out.with_suffix("") if out.suffix in (".jsonl", ".md") else out
    jsonl, logs = out.with_suffix(".jsonl"), Path(str(out) + ".logs")
    logs.mkdir(parents=True, exist_ok=True)
    args.commit = os.environ.get("MODELS_BENCH_COMMIT") or commit()
    done = (
        {(r["suite"], r["model"], r["mode"]) for r in read_rows([jsonl])}
        if (args.resume and jsonl.exists())
        else set()
    )
    modes = ("eval", "train") if args.mode == "both" else (args.mode,)
    work = [(s, m) for s in specs for m in modes if (s.suite, s.name, m) not in done]
    run_all(work, args, jsonl, logs)
    text = render_markdown(read_rows([jsonl]), command)
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
