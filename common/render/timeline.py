"""Where each measured process's seconds went (common.measure.timeline), as a markdown table:
python -m common.render.timeline RESULT.json ... (a run's results, in any order)."""
import sys
from pathlib import Path

from common.analysis.results import read_result
from common.analysis.results_run import RunResult
from common.analysis.timeline import PHASES, durations


def overhead_s(result: RunResult) -> float | None:
    """Seconds of the process beyond its warm-up and timed steps: what a sitting pays per process (a
    pipelined process's time before its gate ran while the process before it ran: not counted)."""
    marks, t = result.timeline or {}, result.timing
    end = marks.get("exit", marks.get("result"))
    if end is None or t is None:
        return None
    return end - marks.get("gate", 0.0) - (t.warmup_s or 0.0) - (t.timed_wall_s or 0.0)


def markdown(results: list[tuple[str, RunResult]]) -> str:
    """One row per process: each phase's own seconds, the whole, and the overhead beyond warm-up and timed steps."""
    shown = [p for p in PHASES if any(p in (r.timeline or {}) for _, r in results)]
    lines = ["| process | " + " | ".join(shown) + " | whole | beyond warm-up and timed |",
             "|---|" + "---:|" * (len(shown) + 2)]
    for name, r in results:
        own = durations(r.timeline or {})
        marks = r.timeline or {}
        whole = marks.get("exit", marks.get("result"))
        extra = overhead_s(r)
        cells = [f"{own[p]:.2f}" if p in own else "" for p in shown]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {whole:.1f} | {extra:.1f} |" if whole is not None
                     else f"| {name} | " + " | ".join(cells) + " | | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python -m common.render.timeline RESULT.json ...", file=sys.stderr)
        return 2
    results = [(p.stem, read_result(p, RunResult)) for p in sorted(paths)]
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
