"""A measured process's phases (common.measure.timeline records them): their order, and each one's own
seconds from the marks."""

# the phases in the order a run passes them (harness.Run marks each as it ends)
PHASES = ("imports", "setup", "data", "model", "first step", "warm-up", "probe", "settle", "timed", "profile",
          "export", "analysis", "flop count", "result", "exit")


def durations(marks: dict[str, float]) -> dict[str, float]:
    """Each phase's own seconds: its mark less the mark before it, in the order the marks were made."""
    out, last = {}, 0.0
    for name, at in marks.items():
        out[name] = round(at - last, 4)
        last = at
    return out
