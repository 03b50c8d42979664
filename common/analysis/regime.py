"""Where a technique pays: the crossover of a sweep, read from the speedup's verdict at every point."""
from common.analysis.results_sweep import Point


def crossover(points: list[Point], knob: str) -> str:
    """Where the technique starts to pay: the smallest value from which every larger one is
    'faster' (with its interval excluding 1). Points where a twin ran out of memory are named."""
    oom = [p.value for p in points if any(v is not None and v.status == "oom" for v in (p.slow, p.fast))]
    text = _crossover(points, knob)
    return text + (f"; out of memory at {knob} {', '.join(map(str, sorted(oom)))}" if oom else "")


def _crossover(points: list[Point], knob: str) -> str:
    points = sorted(points, key=lambda p: p.value)
    measured = [p for p in points if p.speedup is not None]
    if not measured:
        return "no point of the sweep finished"
    faster = [p.speedup.verdict == "faster" for p in measured]
    if all(faster):
        return f"pays off over the whole range measured ({knob} {measured[0].value} to {measured[-1].value})"
    if not any(faster):
        slower = [p.value for p in measured if p.speedup.verdict == "slower"]
        return (f"does not pay off anywhere in the range measured ({knob} {measured[0].value} to {measured[-1].value})"
                + (f"; slower at {', '.join(map(str, slower))}" if slower else ""))
    last_not = max(i for i, f in enumerate(faster) if not f)
    if last_not == len(measured) - 1:
        at = [p.value for p, f in zip(measured, faster) if f]
        return f"pays off at {knob} {', '.join(map(str, at))} only, not at the largest measured"
    return f"pays off from {knob} {measured[last_not + 1].value} up (not at {measured[last_not].value})"
