"""Markdown tables of benchmarks/models.py rows: one table per suite and mode, the summaries
(pass rate, geometric-mean speedups, median cold compile), and why each failing row failed."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

# A row passes for ours when none of these holds (checked in this order).
FAILURES = ("eager fails", "timeout", "crash", "error", "wrong", "fallback", "more graphs")


def ours_status(row: dict[str, Any]) -> str:
    """ "pass", or the first failure of FAILURES that the row shows for ours."""
    phase = row.get("phase", "")
    ours = row.get("ours", {})
    tc = row.get("torch.compile", {})
    if phase in ("", "build", "eager"):
        return "timeout" if row.get("outcome", "").startswith("timeout") else "eager fails"
    if phase == "ours" and row.get("outcome"):
        return "timeout" if row["outcome"].startswith("timeout") else "crash"
    if ours.get("error"):
        return "error"
    if ours.get("correct") is False:
        return "wrong"
    if ours.get("fallbacks") or ours.get("warnings"):
        return "fallback"
    if isinstance(tc.get("graphs"), int) and ours.get("graphs", 0) > tc["graphs"]:
        return "more graphs"
    return "pass"


def _graphs(res: dict[str, Any]) -> str:
    if "graphs" not in res:
        return "-"
    text = str(res["graphs"])
    if res.get("breaks"):
        text += f" ({len(res['breaks'])} breaks)"
    if res.get("fallbacks"):
        text += f", {len(res['fallbacks'])} eager"
    if res.get("recompiles"):
        text += f", +{res['recompiles']} recompiles"
    return text


def _correct(res: dict[str, Any]) -> str:
    if res.get("error"):
        return "error"
    if "correct" not in res:
        return "-"
    err = res.get("err", 0.0)
    err_text = "inf" if err is None or math.isinf(err) else f"{err:.0e}"
    if res["correct"] and "float64_err_vs_cpu" in res:  # see models.py float64_recheck
        return (
            f"ok in float64 (vs eager's CPU float64 {res['float64_err_vs_cpu']:.0e}); "
            f"float32 ill-conditioned ({err_text})"
        )
    if res["correct"] and "float64_err" in res:
        return f"ok in float64 ({res['float64_err']:.0e}); float32 ill-conditioned ({err_text})"
    return ("ok " if res["correct"] else "**WRONG** ") + err_text


def _num(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _speedup(row: dict, name: str) -> float | None:
    eager, res = row.get("eager", {}).get("ms"), row.get(name, {})
    if not eager or not res.get("ms") or res.get("correct") is False or res.get("error"):
        return None
    return eager / res["ms"]


def _ratio(x: float | None, n: int) -> str:
    """A geometric mean and how many models it is over; a dash when none were measured."""
    return "-" if x is None else f"{x:.2f}x ({n})"


def _geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summary_rows(rows: list[dict]) -> list[str]:
    lines = [
        "| suite | mode | models | ours pass | ours one graph | torch.compile one graph "
        "| ours correct | torch.compile correct | geomean speedup ours | geomean speedup "
        "torch.compile | geomean ours vs torch.compile | median cold compile ours s "
        "| median cold compile torch.compile s |",
        "|" + "---|" * 13,
    ]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["suite"], row["mode"])].append(row)
    for (suite, mode), group in sorted(groups.items()):
        ran = [r for r in group if ours_status(r) != "eager fails"]

        def count(pred, ran=ran) -> str:
            return f"{sum(1 for r in ran if pred(r))}/{len(ran)}" if ran else "-"

        # torch.compile's correctness out of the rows where it ran (not --skip-torch-compile)
        tc_ran = [r for r in ran if "correct" in r.get("torch.compile", {}) or
                  "error" in r.get("torch.compile", {})]  # fmt: skip
        ours_sp = [s for r in ran if (s := _speedup(r, "ours"))]
        tc_sp = [s for r in ran if (s := _speedup(r, "torch.compile"))]
        both = [
            _speedup(r, "ours") / _speedup(r, "torch.compile")
            for r in ran
            if _speedup(r, "ours") and _speedup(r, "torch.compile")
        ]
        ours_cold = [r["ours"]["compile_s"] for r in ran if "compile_s" in r.get("ours", {})]
        tc_cold = [
            r["torch.compile"]["compile_s"]
            for r in ran
            if "compile_s" in r.get("torch.compile", {})
        ]
        lines.append(
            f"| {suite} | {mode} | {len(ran)} | {count(lambda r: ours_status(r) == 'pass')} "
            f"| {count(lambda r: r.get('ours', {}).get('graphs') == 1)} "
            f"| {count(lambda r: r.get('torch.compile', {}).get('graphs') == 1)} "
            f"| {count(lambda r: r.get('ours', {}).get('correct') is True)} "
            f"| {count(lambda r: r['torch.compile'].get('correct') is True, tc_ran)} "
            f"| {_ratio(_geomean(ours_sp), len(ours_sp))} "
            f"| {_ratio(_geomean(tc_sp), len(tc_sp))} "
            f"| {_ratio(_geomean(both), len(both))} "
            f"| {_num(_median(ours_cold), '.1f')} | {_num(_median(tc_cold), '.1f')} |"
        )
    return lines


def model_table(rows: list[dict]) -> list[str]:
    lines = [
        "| model | input | ours graphs | torch.compile graphs | ours vs eager "
        "| torch.compile vs eager | eager ms | ours speedup | torch.compile speedup "
        "| ours cold s | torch.compile cold s | peak MB eager / ours / torch.compile | status |",
        "|" + "---|" * 13,
    ]
    for row in sorted(rows, key=lambda r: r["model"]):
        ours, tc, eager = row.get("ours", {}), row.get("torch.compile", {}), row.get("eager", {})
        peaks = " / ".join(_num(r.get("peak_mb"), ".0f") for r in (eager, ours, tc))
        lines.append(
            f"| {row['model']} | {row.get('input', '-')} | {_graphs(ours)} | {_graphs(tc)} "
            f"| {_correct(ours)} | {_correct(tc)} | {_num(eager.get('ms'), '.1f')} "
            f"| {_num(_speedup(row, 'ours'), '.2f')} | {_num(_speedup(row, 'torch.compile'), '.2f')} "
            f"| {_num(ours.get('compile_s'), '.1f')} | {_num(tc.get('compile_s'), '.1f')} "
            f"| {peaks} | {ours_status(row)} |"
        )
    return lines


def failure_notes(rows: list[dict]) -> list[str]:
    """Why each row that does not pass failed, every break of ours and of torch.compile, and
    notes (a model run at its default size)."""
    lines = []
    for row in sorted(rows, key=lambda r: (r["suite"], r["mode"], r["model"])):
        status = ours_status(row)
        ours, tc = row.get("ours", {}), row.get("torch.compile", {})
        details = [f"note: {row['note']}"] if row.get("note") else []
        if row.get("error"):
            details.append(row["error"])
        if ours.get("error"):
            details.append(f"ours: {ours['error']}")
        if ours.get("correct") is False:
            details.append(f"ours wrong: {ours.get('worst')} err {ours.get('err')}")
        details += [f"ours eager fallback: {f}" for f in ours.get("fallbacks", [])[:3]]
        details += [f"ours warning: {w}" for w in ours.get("warnings", [])[:3]]
        details += [f"ours break: {b}" for b in ours.get("breaks", [])[:5]]
        details += [f"torch.compile break: {b}" for b in tc.get("breaks", [])[:5]]
        if tc.get("error"):
            details.append(f"torch.compile: {tc['error']}")
        if tc.get("correct") is False:
            details.append(f"torch.compile wrong: {tc.get('worst')} err {tc.get('err')}")
        if status == "pass" and not details:
            continue
        lines.append(f"- {row['suite']} {row['model']} ({row['mode']}): **{status}**")
        lines += [f"  - {d}" for d in details]
    return lines


def render_markdown(rows: list[dict], command: str) -> str:
    commits = sorted({r.get("commit", "?") for r in rows})
    dates = sorted({r.get("date", "?") for r in rows})
    hosts = sorted({r.get("host", "?") for r in rows})
    devices = sorted({f"{r.get('device')} {r.get('dtype')} batch {r.get('batch')}" for r in rows})
    out = [
        f"`{command}`",
        "",
        f"Dates {', '.join(dates)}; commits {', '.join(commits)}; {'; '.join(hosts)}; "
        f"{'; '.join(devices)}.",
        "",
        "### Summary",
        "",
        *summary_rows(rows),
    ]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["suite"], row["mode"])].append(row)
    for (suite, mode), group in sorted(groups.items()):
        out += ["", f"### {suite}, {mode}", "", *model_table(group)]
    notes = failure_notes(rows)
    if notes:
        out += ["", "### Failures, graph breaks and notes", "", *notes]
    return "\n".join(out) + "\n"
