"""A combined Triton kernel that Triton 3.6 miscompiles on the H200 (2026-12-02).

kernel.py is the combined kernel our emitter wrote (compiler/codegen/combo.py) for the first
32 of the OpInfo suite's constant_pad_nd samples in int32. Run with real Triton, its part 16
(r24: a [1, 3, 3, 3, 3] input padded by 1 on every side of its last three dimensions) stored
25 of 375 wrong elements under 4 and 8 warps, at XBLOCK 1024 and 2048, and was right under 1
and 2 warps; each part compiled alone as a kernel of its own was right at every XBLOCK from
128 to 2048 and 1, 4 and 8 warps; Triton's interpreter runs the whole kernel right. Since
then compiler/scheduler/horizontal.py combines only kernels that stream (no coordinates, no
masked loads), which no such part is.

    python benchmarks/combo_probe/probe.py            # on a GPU machine
    TRITON_INTERPRET=1 python benchmarks/combo_probe/probe.py   # here: everything right

Prints, per launch config, the parts whose output differs from eager's constant_pad_nd, and
then each part alone.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile

import torch
import triton

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SOURCE = open(os.path.join(HERE, "kernel.py")).read()


def _layout(text: str) -> list[int]:
    m = re.match(r"\w+\[([\d, ]*)\] stride", text)
    return [int(v) for v in m.group(1).split(",") if v.strip()]


def _load(text: str, name: str):
    """A @triton.jit function from source (Triton reads the source back from the file)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(os.path.basename(f.name)[:-3], f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    shapes = {m.group(1): _layout(m.group(3))
              for m in re.finditer(r"# ((?:in|out)_ptr\d+) = (\w+): (.*)", SOURCE)}  # fmt: skip
    ins = [p for p in shapes if p.startswith("in")]
    outs = [p for p in shapes if p.startswith("out")]
    calls = re.findall(r"r\d+ = _op\(t\d+, (\(.*?\))(?:, (\d+))?\)", SOURCE)
    g = torch.Generator().manual_seed(0)
    buffers = {p: torch.randint(-9, 10, shapes[p], generator=g, dtype=torch.int32).to(DEVICE)
               for p in ins}  # fmt: skip
    buffers.update({p: torch.empty(shapes[p], dtype=torch.int32, device=DEVICE) for p in outs})
    expected = {
        out: torch.constant_pad_nd(buffers[inp], eval(pad), int(value or 0))
        for inp, out, (pad, value) in zip(ins, outs, calls)
    }

    def wrong(names) -> list[str]:
        return [f"part {k}: {int((buffers[o] != expected[o]).sum())}"
                for k, o in enumerate(outs) if o in names and not torch.equal(buffers[o], expected[o])]  # fmt: skip

    combo = _load(SOURCE, "triton_combo")
    for xblock in (1024, 2048):
        for warps in (1, 2, 4, 8):
            for o in outs:
                buffers[o].fill_(-99)
            combo[(len(outs),)](*(buffers[p] for p in ins + outs), XBLOCK=xblock, num_warps=warps)
            _sync()
            print(f"combined, XBLOCK={xblock}, {warps} warps: {wrong(outs) or 'right'}", flush=True)
    # each part as a kernel of its own: its branch's body, from its own program ids
    for k, body in enumerate(re.split(r"\n    # part \d+ \(programs [\d.]+\): ", SOURCE)[1:]):
        lines = [line[4:] for line in body.split("\n")[2:] if line.startswith("        ")]
        text = re.sub(r"xoffset = .*", "xoffset = tl.program_id(0) * XBLOCK", "\n".join(lines))
        used = sorted(set(re.findall(r"(?:in|out)_ptr\d+", text)), key=lambda p: int(p[p.index("r") + 1:]))  # fmt: skip
        fn = _load(
            "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
            f"def part({', '.join(used)}, XBLOCK: tl.constexpr):\n{text}\n",
            "part",
        )
        numel = int(re.search(r"xnumel = (\d+)", text).group(1))
        bad = []
        for xblock in (128, 512, 1024, 2048):
            for warps in (1, 4, 8):
                for o in outs:
                    buffers[o].fill_(-99)
                fn[(triton.cdiv(numel, xblock),)](
                    *(buffers[p] for p in used), XBLOCK=xblock, num_warps=warps
                )
                _sync()
                bad += [f"XBLOCK={xblock}, {warps} warps: {w}" for w in wrong(used)]
        print(f"part {k} alone: {bad or 'right'}", flush=True)


if __name__ == "__main__":
    main()
