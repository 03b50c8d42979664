"""What `make sweep-<recipe>` writes: the pair at each value of its knob."""
from __future__ import annotations

from dataclasses import dataclass, field

from common.analysis.results import Record, optional
from common.analysis.results_compare import Speedup, VariantAggregate


@dataclass
class Point(Record):
    """One point of a sweep: the pair at one value of the knob."""
    value: int
    slow: VariantAggregate | None = None
    fast: VariantAggregate | None = None
    speedup: Speedup | None = None
    parity_ok: bool | None = None
    failed: list[str] = field(default_factory=list)
    parity_failure: str = ""  # aggregate.parity_failure's words where parity failed


@dataclass
class SweepResult(Record):
    """`make sweep-<recipe>`: the pair across the knob that decides whether its technique pays."""
    recipe: str
    title: str
    pair: str
    knob: str
    flag: str
    mode: str
    rounds: int
    command: str
    points: list[Point]
    crossover: str = ""
    not_applicable: str | None = optional()  # the device lacks what the technique needs: no point was timed

