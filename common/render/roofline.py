"""The roofline and the trace diff, as a report shows them (analysis.roofline computes them).

    python -m common.render.roofline A.pt.trace.json[.gz] B.pt.trace.json[.gz] [--out FILE.md] [--top N]

(`make trace-diff A=... B=...`): two traces a user has (a script before and after a change, two doctor
runs, a recipe's twins), their ops and kernels matched by name and sorted by the change in their time
per step: what the change removed, added, made faster or slower. On the terminal, and as markdown.
"""
import argparse
import sys
from pathlib import Path

from common.analysis import roofline, traces
from common.analysis.results_run import Evidence, Roofline
from common.cli import OneLineParser, positive_int
from common.errors import CookbookError, exit_with
from common.render import page

TOP = 8  # ops in a roofline table
DIFF_TOP = 10  # rows of a trace diff


def _num(x: float) -> str:
    return f"{x:.3g}" if x else "-"


def step_line(name: str, r: Roofline, step_ms: float | None) -> str:
    """'at the roofline this step would take X ms; it takes Y', with what lies outside the model."""
    where = "the GPU's busy time" if r.device == "cuda" else "the ops' time"
    unmodelled = sum(r.unmodelled_ms.values())
    largest = next(iter(r.unmodelled_ms), None)
    roof = (f"at the roofline its modelled ops would take **{r.roof_ms:.3f} ms**; they take {r.modelled_ms:.3f}"
            if r.roof_ms else f"its modelled ops take {r.modelled_ms:.3f} ms (no measured ceiling here)")
    outside = (f"; outside every op (idle, Python, launches) {max(0.0, step_ms - r.busy_ms):.3f} ms of the "
               f"{step_ms:.3f} ms profiled step" if step_ms else "")
    return (f"- {name}: {roof}, of {r.busy_ms:.3f} ms of {where} per step; not modelled {unmodelled:.3f} ms"
            + (f" (the largest: `{largest}`, {r.unmodelled_ms[largest]:.3f} ms)" if largest else "") + outside)


def table(r: Roofline, top: int = TOP) -> list[str]:
    """The top ops by time with their place under the roofline."""
    rows = ["| op | dtype | calls | ms | GFLOP | MB | TFLOP/s | GB/s | roofline ms | reached | bound |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for o in r.ops[:top]:
        s = o.ms / 1000
        rows.append(f"| `{o.name}` | {o.dtype} | {o.calls:.0f} | {o.ms:.3f} | {o.flops / 1e9:.3g} | "
                    f"{o.bytes / 1e6:.3g} | {_num(o.flops / s / 1e12 if s else 0)} | "
                    f"{_num(o.bytes / s / 1e9 if s else 0)} | "
                    + (f"{o.roof_ms:.3f} | {o.reached:.0%} | {o.bound} |" if o.roof_ms else "- | - | - |"))
    return rows


def ceilings_line(r: Roofline) -> str:
    c = r.ceilings
    if c is None:
        return "No measured ceiling for this device: FLOPs, bytes and times only."
    tf = ", ".join(f"{k} {v:.3g}" for k, v in (("bf16", c.bf16_tflops), ("TF32", c.tf32_tflops),
                                                 ("fp32", c.fp32_tflops)) if v)
    return (f"Ceilings of this machine, measured ({c.how}, {c.date}): matmuls {tf} TFLOP/s; memory "
            f"{c.bandwidth_gbs or 0:.0f} GB/s. A share above 100% is an op that beat a ceiling measured on large "
            "operands: its data stayed in a cache.")


def section(pairs: list[tuple[str, Evidence | None]], steps: dict | None = None) -> list[str]:
    """The roofline of each named run (a recipe's twins, a rung, the doctor's script)."""
    found = [(n, e) for n, e in pairs if e is not None and e.roofline is not None]
    if not found:
        return []
    out = ["### How far each op is from the limit (roofline)", "",
           "FLOPs from each op's shapes, bytes as the compulsory traffic (inputs read and outputs written once), "
           "time from its kernels (a CPU: its own span); the roofline time is the larger of FLOPs over the compute "
           "ceiling of its dtype and bytes over the memory bandwidth.", "", ceilings_line(found[0][1].roofline), ""]
    for name, ev in found:
        out.append(step_line(name, ev.roofline, (steps or {}).get(name, ev.profiled_step_ms)))
    for name, ev in found:
        out += ["", f"{name}:", "", *table(ev.roofline)]
    return out + [""]


def diff_rows(a: dict[str, float], b: dict[str, float], top: int = DIFF_TOP) -> list[tuple[str, float, float, str]]:
    """(name, ms in A, ms in B, what changed), the largest change first."""
    rows = []
    for name in set(a) | set(b):
        x, y = a.get(name, 0.0), b.get(name, 0.0)
        what = ("removed" if name not in b or y == 0 else "added" if name not in a or x == 0
                else "faster" if y < x else "slower" if y > x else "same")
        rows.append((name, x, y, what))
    rows.sort(key=lambda r: abs(r[2] - r[1]), reverse=True)
    return rows[:top]


def diff_markdown(a: dict[str, float], b: dict[str, float], names=("slow", "fast"), what="op",
                  top: int = DIFF_TOP) -> list[str]:
    rows = [f"| {what} | {names[0]} ms | {names[1]} ms | change ms | |", "|---|---:|---:|---:|---|"]
    for name, x, y, change in diff_rows(a, b, top):
        label = name if len(name) <= 90 else name[:87] + "..."
        rows.append(f"| `{label}` | {x:.3f} | {y:.3f} | {y - x:+.3f} | {change} |")
    return rows


def diff_section(slow: Evidence | None, fast: Evidence | None) -> list[str]:
    """A recipe's trace diff: what the technique removed, added, made faster or slower."""
    if slow is None or fast is None or slow.roofline is None or fast.roofline is None:
        return []
    out = ["### What the technique changed in the trace (slow vs fast, per step)", "",
           "Ops matched by name (the modelled ops as above, the others by their own name), sorted by the change "
           "in their time per step:", "", *diff_markdown(roofline.op_ms(slow.roofline), roofline.op_ms(fast.roofline))]
    if slow.kernel_ms or fast.kernel_ms:
        out += ["", "Kernels matched by name:", "", *diff_markdown(slow.kernel_ms, fast.kernel_ms, what="kernel")]
    return out + [""]


def _read(path: Path) -> tuple[dict[str, float], dict[str, float]]:
    if not path.is_file():
        raise CookbookError(f"{path}: no such trace; give a .pt.trace.json (or .json.gz) the profiler wrote")
    try:
        events, n = traces.profiled(path)
    except (ValueError, KeyError, OSError) as e:
        raise CookbookError(f"{path}: not a profiler trace ({type(e).__name__}: {str(e)[:120]})") from None
    cuda = any(e.get("cat") == "kernel" for e in events)
    return roofline.op_ms(roofline.of_events(events, n, cuda, None)), roofline.kernel_ms(events, n)


def step_ms(path: Path) -> float:
    """A profiled step's wall time in a trace, ms (its ProfilerStep ranges' mean): the total that the
    ops' and kernels' changes add up within."""
    steps = [e.get("dur", 0) for e in traces.read_trace(path)["traceEvents"]
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    return sum(steps) / len(steps) / 1000 if steps else 0.0


def terminal(a: dict[str, float], b: dict[str, float], names, what: str, top: int) -> str:
    width = 70
    lines = [f"{what:<{width}} {names[0]:>10} {names[1]:>10} {'change':>10}"]
    for name, x, y, change in diff_rows(a, b, top):
        label = name if len(name) <= width else name[:width - 3] + "..."
        lines.append(f"{label:<{width}} {x:>10.3f} {y:>10.3f} {y - x:>+10.3f}  {change}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = OneLineParser(prog="make trace-diff A=before.pt.trace.json B=after.pt.trace.json", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", metavar="A", help="the first trace (before)")
    p.add_argument("b", metavar="B", help="the second trace (after)")
    p.add_argument("--out", help="also write the markdown here")
    p.add_argument("--top", type=positive_int, default=DIFF_TOP, help=f"rows per table (default {DIFF_TOP})")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        (op_a, k_a), (op_b, k_b) = _read(Path(args.a)), _read(Path(args.b))
        out = Path(args.out) if args.out else None
        if out is not None and not out.parent.is_dir():
            raise CookbookError(f"--out {out}: no folder {out.parent}")
    except CookbookError as e:
        exit_with(e, "make trace-diff")
    names = ("A", "B")
    steps = step_ms(Path(args.a)), step_ms(Path(args.b))
    print(f"A: {args.a}\nB: {args.b}\nms per profiled step; the largest change first\n")
    print(f"{'a whole profiled step (wall)':<70} {steps[0]:>10.3f} {steps[1]:>10.3f} {steps[1] - steps[0]:>+10.3f}  "
          f"{steps[0] / steps[1]:.2f}x faster\n" if steps[1] else "")
    print(terminal(op_a, op_b, names, "op", args.top))
    if k_a or k_b:
        print("\n" + terminal(k_a, k_b, names, "kernel", args.top))
    if out is not None:
        md = ["# Trace diff", "", f"- A: `{args.a}`", f"- B: `{args.b}`",
              f"- A whole profiled step (wall): A {steps[0]:.3f} ms, B {steps[1]:.3f} ms", "",
              "Milliseconds per profiled step, the largest change first.", "",
              *diff_markdown(op_a, op_b, names, top=args.top)]
        if k_a or k_b:
            md += ["", *diff_markdown(k_a, k_b, names, what="kernel", top=args.top)]
        page.write(out, "\n".join(md) + "\n")
        print(f"\nmarkdown: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
