"""A measured process's phases (common.measure.timeline records them): their order, and each one's own
seconds from the marks."""

# the phases in the order a run passes them (harness.Run marks each as it ends)
# ("ready" and "gate": a pipelined process's preparation and its wait for the one before, common.measure.gate)
PHASES = ("imports", "setup", "ready", "gate", "data", "model", "first step", "warm-up", "probe", "settle", "timed",
          "profile", "export", "analysis", "flop count", "result", "exit")


def durations(marks: dict[str, float]) -> dict[str, float]:
    """Each phase's own seconds: its mark less the mark before it, in the order the marks were made."""
    out, last = {}, 0.0
    for name, at in marks.items():
        out[name] = round(at - last, 4)
        last = at
    return out


def device_span(marks: dict[str, float]) -> tuple[float, float] | None:
    """When a process's device work began and ended, in seconds from its start: from its gate (a
    pipelined process, common.measure.gate) or else its setup, to its last counted step (the flop
    count, else its timed steps). None where its timeline says neither."""
    begin = marks.get("gate", marks.get("setup"))
    end = marks.get("flop count", marks.get("timed"))
    return (begin, end) if begin is not None and end is not None else None


def handoffs(runs: list[tuple[float, dict[str, float]]]) -> list[float]:
    """The seconds between one process's device work and the next's, in the order they started (each
    run: its start on time.time()'s clock, its marks); negative where they overlapped."""
    spans = sorted((started + span[0], started + span[1]) for started, marks in runs
                   if started and (span := device_span(marks)))
    return [round(nxt[0] - prev[1], 4) for prev, nxt in zip(spans, spans[1:])]
