"""The C++/OpenMP kernel emitter: one `extern "C"` function per fused group, for CPU tensors.

Each `KernelGroup` of a `Schedule` becomes a loop nest over its outer variables, with the
reduction loops inside (see compiler/scheduler/kernel.py for the step model):

    extern "C" void cpp_fused_cos_sin_0(const float* in_ptr0, const float* in_ptr1,
                                        float* out_ptr0) {
      #pragma omp parallel for simd schedule(static)
      for (int64_t x0 = 0; x0 < 16777216; ++x0) { ... }
    }

* Sizes are compile-time constants (the graph was traced for these shapes), so loop bounds
  and strides fold into the code and nothing but data pointers crosses ctypes.
* OpenMP threads only when a kernel does enough work to pay for waking them; the innermost
  loop carries `#pragma omp simd` (with reduction clauses for the accumulators), which with
  the prelude's libmvec declarations vectorises sin/exp/tanh/... too.
* Reductions accumulate in float for float16/bfloat16 and in int64 for integer sums; max/min
  carry a NaN flag so they propagate NaN as torch does while still vectorising.
* When the outer extent is too small to keep the cores busy (a full sum, a mean over a
  batch of 2), a plain reduction is split across threads with OpenMP reduction clauses.
* Padding and concatenation masks are decided per range of the loop variables
  (compiler/ir/ranges.py): the innermost loop is split and the outer ones dispatch with an
  `if` chain, so each copy of the body has no masked loads and reads one concatenated piece.

The source of a kernel is its function alone (what the inspector shows); `load_many` puts
kernels behind the shared prelude into a few translation units (one per core) and compiles
them in parallel (compiler/codegen/cpp_kernels.py). A dynamic graph's kernels are written
size-generic (`_KernelWriter.size_generic`) and run code compiled once for every size
(compiler/codegen/size_args.py).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from compiler.codegen import size_args
from compiler.codegen.common import LOW_PRECISION, KernelEmitter, KernelSource, store_order
from compiler.codegen.cpp_kernels import CppKernel, build_kernels, load_sized
from compiler.codegen.cpp_ops import (
    Accumulator,
    c_constant,
    c_index,
    convert,
    load_expr,
    op_expr,
    store_expr,
)
from compiler.codegen.cpp_prelude import COMPUTE_TYPE, STORAGE_TYPE
from compiler.codegen.cpp_rows import ROW_CACHE_MAX, RowCache, along_rows, row_caches
from compiler.ir.index import Index, Var
from compiler.ir.nodes import Constant, IndexValue, Layout, Load, Op, Ref, Value, children
from compiler.ir.ranges import breakpoints, decide, intervals
from compiler.ir.transform import substitute_indices, substitution
from compiler.scheduler.kernel import KernelGroup, Schedule, Step

# Elements of work below which a kernel runs on the calling thread: waking the OpenMP team
# costs a few microseconds, about what 32k simple elements take on one core.
PARALLEL_MIN_WORK = 32768
# A reduction kernel parallelises its outer loop only when each thread gets several points;
# otherwise (and when the reduction is big) it splits the reduction itself.
OUTER_MIN_POINTS = 16
# Reductions this short (pooling windows) vectorise across output points, not along r.
SHORT_REDUCTION = 32
# At most this many copies of a kernel's loop body, specialised to the ranges of its loop
# variables where padding and concatenation conditions are constant (`_specialised`).
MAX_SPECIALISED = 64


# ---- one kernel ---------------------------------------------------------------------------


def _sanitize(name: str) -> str:
    name = re.sub(r"\W", "_", name)
    name = re.sub(r"^triton_", "cpp_", name)
    return name if name.startswith("cpp_") else f"cpp_{name}"


def _comment(text: str) -> str:
    return " ".join(text.split())


def _comment_line(line: str, limit: int = 200) -> str:
    """A `//` comment line that stays one line: a trailing backslash (a user line continued
    with `\\`) would splice the next line of C++ into the comment."""
    return re.sub(r"[\s\\]+$", "", line[:limit])


class _KernelWriter:
    def __init__(self, group: KernelGroup, schedule: Schedule, size_generic: bool = False) -> None:
        self.group = group
        self.schedule = schedule
        # A dynamic graph's kernel (compiler/codegen/size_args.py): decisions that depend on
        # its sizes are taken at run time (threads) or not taken (unrolled reductions), so
        # that every size has one skeleton.
        self.size_generic = size_generic
        self.name = _sanitize(group.name)
        self.steps = {s.name: s for s in group.steps}
        self.across = False
        # Row caches of a reduction kernel (compiler/codegen/cpp_rows.py): those the loop
        # being emitted writes, those it reads (written by an earlier loop of this copy of
        # the body), and the flat position in the row that indexes them.
        self.caches: list[RowCache] = []
        self.cache_writes: dict[Value, RowCache] = {}
        self.cache_reads: dict[Value, RowCache] = {}
        self.cache_written: set[str] = set()
        self.position = ""
        self.threads = ""  # a reduction kernel's `_threads_if` clause
        # Ranges of loop variables in the code being emitted, narrower than their loops where
        # the loop was split (see `_specialised`); conditions decided there are not emitted.
        self.ranges: dict[str, tuple[int, int]] = {}
        self.addresses: dict[tuple, tuple[str, bool]] = {}  # (buffer, indices) -> C, in bounds
        self.lines: list[str] = []
        self.depth = 1
        self.scopes: list[dict] = [{}]
        self.counter = 0
        self.ptrs: dict[str, str] = {}
        self.params: list[str] = []
        self.arg_names: list[str] = []
        writes = set(group.writes)
        for k, buf in enumerate(b for b in group.reads if b not in writes):
            self._param(buf, f"in_ptr{k}", const=True)
        for k, buf in enumerate(group.writes):
            self._param(buf, f"out_ptr{k}", const=False)

    def _param(self, buf: str, cname: str, const: bool) -> None:
        layout = self.schedule.buffers[buf]
        ctype = STORAGE_TYPE[layout.dtype]
        self.params.append(f"{'const ' if const else ''}{ctype}* {cname}")
        self.ptrs[buf] = cname
        self.arg_names.append(buf)

    # -- lines and scopes --

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def open(self, header: str, pragma: str | None = None) -> None:
        if pragma:
            self.emit(pragma)
        self.emit(f"{header} {{" if header else "{")
        self.depth += 1
        self.scopes.append({})

    def close(self) -> None:
        self.scopes.pop()
        self.depth -= 1
        self.emit("}")

    def tmp(self, prefix: str = "tmp") -> str:
        self.counter += 1
        return f"{prefix}{self.counter - 1}"

    def lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def bind(self, key, var: str, keep=None) -> None:
        self.scopes[-1][key] = (var, keep)

    # -- values --

    def value(self, v: Value) -> str:
        """A C++ expression for `v`, emitting temporaries for its loads and operations."""
        found = self.lookup(("id", id(v)))
        if found is not None:
            return found[0]
        if isinstance(v, Constant):
            return c_constant(v.value, v.dtype)
        if isinstance(v, IndexValue):
            return f"static_cast<{COMPUTE_TYPE[v.dtype]}>({c_index(v.index)})"
        if isinstance(v, Ref):
            return self.ref(v.name)
        if isinstance(v, Op) and v.dtype == torch.bool:
            decided = decide(v, self.ranges)
            if decided is not None:
                return "true" if decided else "false"
        if isinstance(v, Op) and v.op == "where":
            decided = decide(v.args[0], self.ranges)
            if decided is not None:
                return self.value(v.args[1] if decided else v.args[2])
        cache = self.cache_reads.get(v) if self.cache_reads else None
        if cache is not None:
            return f"{cache.name}[{self.position}]"
        if isinstance(v, Load):
            expr = self._load(v)
        elif isinstance(v, Op):
            expr = op_expr(v, [self.value(c) for c in children(v)])
        else:
            raise TypeError(f"unknown IR value {v!r}")
        var = self.tmp()
        self.emit(f"const {COMPUTE_TYPE[v.dtype]} {var} = {expr};")
        self.bind(("id", id(v)), var, keep=v)
        cache = self.cache_writes.get(v) if self.cache_writes else None
        if cache is not None and cache.name not in self.cache_written:
            self.emit(f"{cache.name}[{self.position}] = {var};")
            self.cache_written.add(cache.name)
        return var

    def _load(self, load: Load) -> str:
        layout = self.schedule.buffers[load.buf]
        ptr = self.ptrs[load.buf]
        in_bounds = False
        if all(isinstance(i, Index) for i in load.indices):
            # The same loads are emitted in every specialised copy of the loop body.
            key = (load.buf, load.indices)
            if key not in self.addresses:
                address = layout.index(load.indices)
                lo, hi = address.bounds()
                self.addresses[key] = (c_index(address), 0 <= lo and hi < layout.storage_size())
            index, in_bounds = self.addresses[key]
        else:  # a gather: some coordinates are computed values (already wrapped by lowering)
            terms = [str(layout.offset)] if layout.offset else []
            for i, stride, size in zip(load.indices, layout.stride, layout.size):
                coord = (
                    c_index(i)
                    if isinstance(i, Index)
                    else f"jc_index(static_cast<int64_t>({self.value(i)}), {size}, {_INDEX_ERROR})"
                )
                terms.append(f"({coord})*{stride}" if stride != 1 else f"({coord})")
            index = " + ".join(terms) or "0"
        # A masked load whose address is valid everywhere (a per-channel parameter inlined
        # under a padding mask) loads unconditionally: the IR guarantees a `where` on the same
        # mask above it, so the masked-off value is never observed, and without the select
        # the parameter math is loop-invariant and hoisted by the compiler.
        mask = None
        if load.mask is not None and not in_bounds:
            decided = decide(load.mask, self.ranges)
            if decided is False:
                return c_constant(0, load.dtype)
            mask = self.value(load.mask) if decided is None else None
        expr = load_expr(ptr, index, layout.dtype)
        if layout.dtype != load.dtype:
            expr = convert(expr, layout.dtype, load.dtype)
        if mask is None:
            return expr
        # The load stays inside the select: GCC turns it into a masked vector load when the
        # address is contiguous (a concatenation's pieces), touching no memory where the
        # mask is off, where an always-executed load with a clamped address would need
        # gathers.
        return f"({mask} ? {expr} : static_cast<{COMPUTE_TYPE[load.dtype]}>(0))"

    def ref(self, name: str) -> str:
        found = self.lookup(("step", name))
        if found is not None:
            return found[0]
        step = self.steps[name]
        if step.reduction_type is not None:
            raise AssertionError(f"reduction {name} read before its loop finished")
        # An inner step of an earlier reduction loop: recompute it at this point.
        var = self.value(step.value)
        self.bind(("step", name), var)
        return var

    def store(self, step: Step, var: str) -> None:
        if step.store is None:
            return
        layout = self.schedule.buffers[step.name]
        index = c_index(layout.index(step.store))
        self.emit(f"{self.ptrs[step.name]}[{index}] = {store_expr(var, layout.dtype)};")

    # -- kernels --

    def write(self) -> str:
        group = self.group
        if group.kind == "pointwise" or not group.reduction:
            self._pointwise()
        else:
            self._reduction()
        body = self.lines
        if any("jc_index(" in line for line in body):
            body = _with_index_flag(body)
        lines = self._header()
        lines.append(f'extern "C" void {self.name}({", ".join(self.params)}) {{')
        lines.extend(body)
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _header(self) -> list[str]:
        group = self.group
        out = [f"// {self.name}: {group.kind} kernel"]
        if group.origins:
            out.append(f"// fused FX nodes: {', '.join(group.origins)}")
        seen = set()
        for origin in group.origins:
            line = self.schedule.source_lines.get(origin)
            if line is None:
                continue
            where = f"{getattr(line, 'filename', '?')}:{getattr(line, 'lineno', '?')}"
            if where in seen:
                continue
            seen.add(where)
            text = _comment(getattr(line, "text", ""))
            out.append(_comment_line(f"//   {where}: {text}"))
        return out

    def _pointwise(self) -> None:
        order = self._merge_loops(store_order(self.group, self.schedule.buffers))
        numel = self.group.outer_numel
        parallel = self.size_generic or numel >= PARALLEL_MIN_WORK
        threads = self._threads_if(numel)
        if not order:
            self._outer_body()
            return
        # Threads over the loops outside the innermost (collapsed into one range), or over
        # the innermost loop itself when the outer ones are too short to share out.
        outside, inner = order[:-1], order[-1]
        thread_inner = parallel and self._few(math.prod(v.size for v in outside), not outside)
        for k, var in enumerate(outside):
            pragma = None
            if k == 0 and parallel and not thread_inner:
                pragma = "#pragma omp parallel for" + (
                    f" collapse({len(outside)})" if len(outside) > 1 else ""
                )
                pragma += threads
            self.open(self._for(var), pragma)
        pragma = (
            f"#pragma omp parallel for simd schedule(static){threads}" if thread_inner else None
        )
        self._specialised(outside, inner, pragma, self._outer_body, split_inner=not thread_inner)
        for _ in outside:
            self.close()

    def _threads_if(self, work: int) -> str:
        """The clause that makes a size-generic kernel's OpenMP team conditional on its work,
        as a static kernel's pragma is (the `parallel:` modifier leaves `simd` alone)."""
        return f" if(parallel: {work} >= {PARALLEL_MIN_WORK})" if self.size_generic else ""

    def _few(self, points: int, none: bool) -> bool:
        """Whether `points` outer iterations (`none`: there is no outer loop) are too few to
        share out between threads. A size-generic kernel cannot tell how many a size gives:
        it threads its outer loops whenever it has some."""
        return none if self.size_generic else points < OUTER_MIN_POINTS

    def _for(self, var: Var, lo: int = 0, hi: int | None = None) -> str:
        hi = var.size if hi is None else hi
        return f"for (int64_t {var.name} = {lo}; {var.name} < {hi}; ++{var.name})"

    def _specialised(
        self,
        outside: list[Var],
        inner: Var | None,
        pragma: str | None,
        body,
        split_inner: bool = True,
        unrolled: Sequence[Var] = (),
    ) -> None:
        """`body` inside the loop over `inner` (`pragma` on it, `#pragma omp simd` by
        default; no loop if None), emitted once per range of the loop variables over which
        the kernel's padding and concatenation conditions are constant (compiler/ir/ranges.py):
        an `if` chain on the variables of the enclosing loops in `outside`, consecutive loops
        over the ranges of `inner`. Each copy then has no masked loads and reads one
        concatenation piece, which is what lets GCC vectorise it."""
        loop_vars = [*outside, *([inner] if inner is not None else [])]
        points = breakpoints([st.value for st in self.group.steps], loop_vars, unrolled)
        cuts = {v.name: intervals(v.size, points.get(v.name, [])) for v in loop_vars}
        if inner is not None and not split_inner:
            cuts[inner.name] = [(0, inner.size)]
        # Code size: each copy is the whole body; give up on the most-split loops first.
        while math.prod(len(c) for c in cuts.values()) > MAX_SPECIALISED:
            name = max(cuts, key=lambda n: len(cuts[n]))
            cuts[name] = [(0, cuts[name][-1][1])]

        def leaf() -> None:
            if inner is None:
                body()
                return
            for lo, hi in cuts[inner.name]:
                if (lo, hi) != (0, inner.size):
                    self.ranges[inner.name] = (lo, hi)
                self.open(self._for(inner, lo, hi), pragma or "#pragma omp simd")
                body()
                self.close()
                self.ranges.pop(inner.name, None)

        self._dispatch([v for v in outside if len(cuts[v.name]) > 1], cuts, leaf)

    def _dispatch(self, split: list[Var], cuts: dict, leaf) -> None:
        if not split:
            leaf()
            return
        var, rest = split[0], split[1:]
        ranges = cuts[var.name]
        for k, (lo, hi) in enumerate(ranges):
            self.ranges[var.name] = (lo, hi)
            if k == 0:
                header = f"if ({var.name} < {hi})"
            elif k < len(ranges) - 1:
                header = f"else if ({var.name} < {hi})"
            else:
                header = "else"
            self.emit(f"// {var.name} in [{lo}, {hi})")
            self.open(header)
            self._dispatch(rest, cuts, leaf)
            self.close()
        self.ranges.pop(var.name, None)

    def _merge_loops(self, order: list[Var]) -> list[Var]:
        """Fuse neighbouring loops whose every index is affine in the fused variable (a
        contiguous H x W becomes one loop of H*W): longer vectorised inner loops and fewer
        loop levels. The group's steps are rewritten to the fused variables."""
        k = len(order) - 1
        while k > 0:
            a, b = order[k - 1], order[k]
            fused = Var(a.name, a.size * b.size)
            mapping = {
                a.name: Index.of(fused) // max(b.size, 1),
                b.name: Index.of(fused) % max(b.size, 1),
            }
            # Checked on the steps' indices first: most neighbours do not fuse, and then the
            # steps need not be rewritten.
            subs = substitution(mapping)
            if all(
                i.coefficient(fused) is not None
                for s in self.group.steps
                for i in _step_indices(s, self.schedule.buffers, subs)
            ):
                steps = [_substitute_step(s, subs) for s in self.group.steps]
                self.group = replace(self.group, steps=tuple(steps))
                self.steps = {s.name: s for s in steps}
                order[k - 1 : k + 1] = [fused]
            k -= 1
        return order

    def _outer_body(self) -> None:
        for step in self.group.steps:
            var = self.value(step.value)
            self.bind(("step", step.name), var)
            self.store(step, var)

    # -- reduction kernels --

    def _segments(self) -> list[tuple[str, list[Step]]]:
        """Steps cut into ("outer", [step]) and ("loop", [inner steps]) pieces: a loop ends
        where a step needs a reduction of the same loop finished."""
        deps: dict[str, set[str]] = {}  # inner step -> reductions it reads (transitively)
        segments: list[tuple[str, list[Step]]] = []
        current: list[Step] | None = None
        in_current: set[str] = set()
        for step in self.group.steps:
            refs = {v.name for v in _iter(step.value) if isinstance(v, Ref)}
            needs = set()
            for r in refs:
                s = self.steps.get(r)
                if s is not None and s.reduction_type is not None:
                    needs.add(r)
                needs |= deps.get(r, set())
            if step.loop == "outer":
                current = None
                segments.append(("outer", [step]))
                continue
            deps[step.name] = needs
            if current is None or needs & in_current:
                current = []
                in_current = set()
                segments.append(("loop", current))
            current.append(step)
            if step.reduction_type is not None:
                in_current.add(step.name)
        return segments

    def _reduction(self) -> None:
        outer = self._merge_loops(store_order(self.group, self.schedule.buffers))
        # Reduction loops fuse in their own order only, so argmax positions stay flat indices.
        self.rvars = self._merge_loops(list(self.group.reduction))
        group = self.group
        segments = self._segments()
        work = group.outer_numel * group.reduction_numel
        big = self.size_generic or work >= PARALLEL_MIN_WORK
        self.threads = self._threads_if(work)
        split = (
            big
            and self._few(group.outer_numel, not outer)
            and len([s for s in segments if s[0] == "loop"]) == 1
            and all(
                s.store is None or s.reduction_type is not None
                for kind, ss in segments
                if kind == "loop"
                for s in ss
            )
            and all(
                s.reduction_type not in ("argmax", "argmin")
                for kind, ss in segments
                if kind == "loop"
                for s in ss
            )
        )
        parallel_outer = big and not split and outer
        # Windows (pooling) and other short reductions: vectorise across output points
        # instead; the short reduction loops are left to the compiler to unroll. A short row
        # that is contiguous (softmax over 32 keys) still vectorises along itself.
        self.across = (
            bool(outer)
            and group.reduction_numel <= SHORT_REDUCTION
            and not self.size_generic
            and not along_rows(group.steps, self.schedule.buffers, self.rvars)
        )
        loops = [ss for kind, ss in segments if kind == "loop"]
        if (
            not self.across
            and not split
            and not self.size_generic
            and group.reduction_numel <= ROW_CACHE_MAX
        ):
            self.caches = row_caches(loops, self.steps, self.rvars, COMPUTE_TYPE.get)
        self.position = c_index(_flat(self.rvars))
        # The loops opened here: all outer ones, or all but the one vectorised across.
        opened = outer[:-1] if self.across else outer
        for k, var in enumerate(opened):
            pragma = None
            if k == 0 and parallel_outer:
                collapse = f" collapse({len(opened)})" if len(opened) > 1 else ""
                pragma = "#pragma omp parallel for" + collapse + self.threads
            self.open(self._for(var), pragma)

        def body() -> None:
            # Per copy of the body: each is its own scope, with its own caches.
            self.cache_written = set()
            for cache in self.caches:
                self.emit(f"{cache.ctype} {cache.name}[{group.reduction_numel}];")
            segment = 0
            for kind, steps in segments:
                if kind == "outer":
                    step = steps[0]
                    var = self.value(step.value)
                    self.bind(("step", step.name), var)
                    self.store(step, var)
                else:
                    self._reduction_loop(steps, split, segment)
                    segment += 1

        if self.across:
            # With one outer loop, threads share the vectorised loop itself.
            threads_inner = parallel_outer and not opened
            pragma = "#pragma omp parallel for simd" if threads_inner else None
            self._specialised(
                opened, outer[-1], pragma, body, split_inner=not threads_inner, unrolled=self.rvars
            )
        else:
            self._specialised(opened, None, None, body)
        for _ in opened:
            self.close()

    def _reduction_loop(self, steps: list[Step], split: bool, segment: int) -> None:
        self.cache_writes = {c.value: c for c in self.caches if c.written == segment}
        self.cache_reads = {
            c.value: c for c in self.caches if c.written < segment and c.name in self.cache_written
        }
        accs = []
        for step in steps:
            if step.reduction_type is None:
                continue
            value_ctype = COMPUTE_TYPE[step.value.dtype]
            kind = step.reduction_type
            if kind in ("argmax", "argmin", "max", "min"):
                ctype = value_ctype
            elif kind in ("any", "all"):
                ctype = "int"
            else:
                ctype = COMPUTE_TYPE[step.dtype]
                if self.group.reduction_numel > NARROW_SUM_MAX or self.size_generic:
                    ctype = _WIDER_SUM.get(ctype, ctype)
            acc = Accumulator(step, self.tmp("acc"), ctype, value_ctype=value_ctype)
            # Across output points each lane owns its accumulator and NaN can win inside
            # the select; an OpenMP reduction clause needs the separate NaN flag.
            if kind in ("max", "min") and value_ctype in ("float", "double") and not self.across:
                acc.nan = self.tmp("nan")
            if kind in ("argmax", "argmin"):
                acc.index = self.tmp("pos")
            accs.append(acc)
            for line in acc.declare():
                self.emit(line)
        clauses = " ".join(c for a in accs for c in a.clauses())
        vectorise = all(a.clauses() for a in accs)
        rvars = self.rvars
        position = c_index(_flat(rvars))
        by_step = {a.step.name: a for a in accs}

        def body() -> None:
            for step in steps:
                var = self.value(step.value)
                if step.reduction_type is None:
                    self.bind(("step", step.name), var)
                    self.store(step, var)
                else:
                    for line in by_step[step.name].combine(var, position):
                        self.emit(line)

        if self.across:
            # Unrolled here: GCC only vectorises the loop over output points when no loop
            # nest is left inside it, and its own unrolling comes after vectorisation.
            for point in itertools.product(*(range(v.size) for v in rvars)):
                self.open("")
                for var, value in zip(rvars, point):
                    self.emit(f"const int64_t {var.name} = {value};")
                    self.ranges[var.name] = (value, value + 1)
                body()
                self.close()
            for var in rvars:
                self.ranges.pop(var.name, None)
        else:
            for k, var in enumerate(rvars):
                innermost = k == len(rvars) - 1
                pragma = None
                if split and k == 0:
                    simd = " simd" if innermost and vectorise else ""
                    collapse = f" collapse({len(rvars) - 1})" if len(rvars) > 2 else ""
                    pragma = f"#pragma omp parallel for{simd}{collapse}{self.threads} {clauses}"
                    pragma = pragma.rstrip()
                elif innermost and vectorise:
                    pragma = f"#pragma omp simd {clauses}".rstrip()
                self.open(
                    f"for (int64_t {var.name} = 0; {var.name} < {var.size}; ++{var.name})",
                    pragma,
                )
            body()
            for _ in rvars:
                self.close()
        self.cache_writes, self.cache_reads = {}, {}
        for acc in accs:
            result = self.tmp("red")
            value = acc.result()
            if acc.step.dtype in LOW_PRECISION:  # rounded here only to emulate eager
                value = convert(value, torch.float32, acc.step.dtype)
            self.emit(f"const {COMPUTE_TYPE[acc.step.dtype]} {result} = {value};")
            self.bind(("step", acc.step.name), result)
            self.store(acc.step, result)


# A gathering kernel's flag of out-of-range indices (see the prelude's jc_index).
_INDEX_ERROR = "jc_err"


def _with_index_flag(lines: list[str]) -> list[str]:
    """A gathering kernel's body with its index flag: declared first, a reduction of every
    loop construct (`|`, so threads and vector lanes each keep their own), and passed to
    the library's flag once at the end."""
    out = [f"  int {_INDEX_ERROR} = 0;"]
    for line in lines:
        if line.lstrip().startswith("#pragma omp"):
            line += f" reduction(|:{_INDEX_ERROR})"
        out.append(line)
    out.append(f"  if ({_INDEX_ERROR}) __atomic_store_n(&jc_index_error, 1, __ATOMIC_RELAXED);")
    return out


def _substitute_step(step: Step, subs: Callable[[Index], Index]) -> Step:
    store = tuple(subs(i) for i in step.store) if step.store is not None else None
    return replace(step, value=substitute_indices(step.value, subs), store=store)


def _step_indices(
    step: Step, buffers: dict[str, Layout], subs: Callable[[Index], Index]
) -> list[Index]:
    """Every address and index value a step computes (what loop fusion must keep affine),
    with its indices through `subs` (as they are once the step is rewritten by it)."""
    out = []
    if step.store is not None:
        out.append(buffers[step.name].index(tuple(subs(i) for i in step.store)))
    for v in _iter(step.value):
        if isinstance(v, Load):
            if all(isinstance(i, Index) for i in v.indices):
                out.append(buffers[v.buf].index(tuple(subs(i) for i in v.indices)))
            else:
                out.extend(subs(i) for i in v.indices if isinstance(i, Index))
        elif isinstance(v, IndexValue):
            out.append(subs(v.index))
    return out


def _iter(value: Value):
    stack = [value]
    seen = set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        yield v
        stack.extend(children(v))


# Sums and products of float values over long rows accumulate in double: one float
# accumulator per lane added to millions of times rounds each addition at the size of the
# total (4M values near 1000 summed 3e-3 off, where eager's cascade sums are exact to 3e-8);
# the result is rounded to float once. Memory, not the adds, bounds these loops. A row of at
# most NARROW_SUM_MAX values (a softmax or a norm over a transformer's keys or features)
# adds at most that many per lane, a float's error of eager's order, and there the
# conversions to double took a tenth of a softmax's time.
_WIDER_SUM = {"float": "double"}
NARROW_SUM_MAX = 1024


def _flat(rvars: Sequence[Var]) -> Index:
    out = Index()
    stride = 1
    for var in reversed(rvars):
        out = out + Index.of(var) * stride
        stride *= max(var.size, 1)
    return out


# ---- the emitter and its loaded kernels ---------------------------------------------------


def emit_kernel_source(
    group: KernelGroup, schedule: Schedule, size_generic: bool = False
) -> tuple[str, str, list[str]]:
    """(function name, C++ function text, buffer names of its parameters in order)."""
    writer = _KernelWriter(group, schedule, size_generic)
    source = writer.write()
    return writer.name, source, writer.arg_names


def _bytes(schedule: Schedule, names: Sequence[str]) -> int:
    total = 0
    for name in names:
        layout = schedule.buffers[name]
        total += layout.numel * layout.dtype.itemsize
    return total


class CppEmitter(KernelEmitter):
    """The KernelEmitter for CPU tensors (see compiler/codegen/common.py)."""

    language = "cpp"
    welford = False  # two passes in one kernel: see KernelEmitter.welford
    materialise_recomputed = True

    def emit_kernel(self, group: KernelGroup, schedule: Schedule) -> KernelSource:
        generic = size_args.generic_kernels()
        name, source, args = emit_kernel_source(group, schedule, generic)
        if not generic:
            # The kernel as a dynamic graph would have it, noted for the first dynamic size
            # of this graph (compiler/codegen/size_args.py): its one generic compile.
            _, sized, _ = emit_kernel_source(group, schedule, size_generic=True)
            size_args.note_sample(size_args.split(sized, name))
        loops = " x ".join(str(v.size) for v in group.outer) or "1"
        if group.reduction:
            loops += " (reduce " + " x ".join(str(v.size) for v in group.reduction) + ")"
        return KernelSource(
            name=name,
            language="cpp",
            source=source,
            call=f"{name}({', '.join(args)})",
            grid=loops,
            config={"threads": "openmp" if "omp parallel" in source else "1"},
            bytes_accessed=_bytes(schedule, list(dict.fromkeys([*group.reads, *group.writes]))),
        )

    def load(self, kernel: KernelSource, mode: str | None = None) -> CppKernel:
        return self.load_many([kernel], mode)[0]

    def load_many(
        self, kernels: Sequence[KernelSource], mode: str | None = None
    ) -> list[CppKernel]:
        """Compile kernels together: one translation unit per core, built in parallel. A
        dynamic graph's kernels run size-generic code where there is some (size_args.py)."""
        if size_args.generic_kernels():
            return load_sized(kernels)
        return build_kernels(kernels)

    def alias(self, loaded: CppKernel, kernel: KernelSource) -> CppKernel:
        """`kernel` run by the compiled code of `loaded` (the same code, another name): its
        own name in profiles and errors."""
        return CppKernel(
            kernel.name,
            loaded.function,
            loaded.nargs,
            loaded.index_error,
            loaded.sizes,
            loaded.generic,
        )


EMITTER = CppEmitter()
