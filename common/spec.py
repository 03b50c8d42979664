"""What a recipe is, in one typed place: `recipes/<recipe>/__init__.py` exports `RECIPE = RecipeSpec(...)`
and every runner reads it through `catalog.spec(recipe)`, which checks it once (a wrong field is one
line naming the recipe and the field).

The pair scripts hold the technique itself; the spec holds what the runners need to know about it:
its title, its pairs' parity rules, the evidence its report leads with, its sizes, its regime sweep,
what the device must have, and how its processes run."""
from dataclasses import dataclass, field, fields

from common.errors import CookbookError

MEASURES = ("step", "first step")  # what a headline speedup is of
MODES = ("cuda", "cpu", "smoke")
GPU_CLASSES = ("T4", "L4", "A100", "H100", "H200")  # the classes a sitting sizes for (runners.sitting.gpu_class)
GOAL_CLASSES = ("H100", "T4")  # the GPU classes with goals (common.analysis.goals: where each class's come from)
GOAL_KEYS = ("min_speedup", "max_slowdown", "lower_memory", "max_memory_share")
# the costs the diagnosis measures (common.analysis.diagnosis), which recipes cure
COSTS = ("data loading", "host syncs", "launch overhead", "GPU compute", "CPU compute")


@dataclass(frozen=True)
class LossParity:
    """Twins that train: their losses compared step by step (the first early_steps within early_rtol) and
    window by window (means of `window` steps within rtol). common.analysis.aggregate.parity reads it."""
    what: str
    early_steps: int
    early_rtol: float
    window: int
    rtol: float
    at_batch: int | None = None  # early_rtol holds at this batch and widens as 1/sqrt(batch) below it
    probe_rtol: float | None = None  # the learning probe's tolerance, where it differs from early_rtol
    max_windows: int | None = None
    # facts the twins' scripts record in run.extra that must agree, for a defect the losses show too late
    # (a GPT whose attention sees the future: common.workloads.gpt.causal)
    same: tuple[str, ...] | None = None
    # of those facts, the value each twin must have (a GPT that sees the future is wrong in both twins alike)
    expect: dict | None = None

    def rule(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class AnswerParity:
    """Twins that serve: each request's answer within atol of the other twin's."""
    what: str
    atol: float

    def rule(self) -> dict:
        return {"what": self.what, "atol": self.atol}


@dataclass(frozen=True)
class Sweep:
    """`make sweep-<recipe>`: one knob of one pair, over values per mode, where the regime changes."""
    pair: str
    flag: str
    knob: str
    values: dict  # mode ("cuda", "cpu", "smoke") -> the values


@dataclass(frozen=True)
class Budget:
    """A memory budget search for one pair (`--memory-budget-gb`), from a starting batch."""
    pair: str
    start: int


@dataclass(frozen=True)
class Serving:
    """A served recipe's load: per mode, its rates, each rate's seconds, rounds and parity requests."""
    sla_ms: float
    rates: dict
    duration_s: dict
    rounds: dict
    parity_requests: dict


@dataclass(frozen=True)
class DoctorFix:
    """What the recipe teaches, applied by the doctor's `--try` to a user's script from outside
    (common.measure.fixes applies it; common.analysis.fixes says when it applies and proves it)."""
    name: str  # as --try names it
    pair: str  # the recipe's pair whose diff shows the change
    how: str  # how the doctor applies it from outside
    lines: tuple  # the lines to add to the user's own loop (`model`, `optimizer`, `x`, `y`, `device` stand for theirs)
    place: int  # its row among the doctor's fixes, 1 first
    gpu_only: bool = False
    needs: tuple = ()  # what the device must have (common.analysis.device), else not applicable there


@dataclass(frozen=True)
class RecipeSpec:
    title: str
    parity: LossParity | AnswerParity
    evidence: tuple = ()  # the report's evidence keys, first the one its headline leads with
    main: str | None = None  # the headline pair (make tour); a recipe of one pair needs none
    defaults: dict = field(default_factory=dict)  # pair -> mode -> the sizes it runs at there
    parity_by_pair: dict = field(default_factory=dict)  # pair -> its own rule, where it differs
    sweep: Sweep | None = None
    needs: tuple = ()  # what the device must have (common.analysis.device), else not applicable
    measure: str = "step"  # what its headline speedup is of: "step" or "first step"
    distributed: bool = False  # each run a torchrun launch of N ranks
    fresh: bool = False  # every process a fresh interpreter (never forked from the warm server)
    prime: tuple = ()  # pairs whose fast twin runs once, unmeasured, before round 1
    memory_snapshot: bool = False  # each twin's allocator history over its profiled steps (CUDA)
    budget: Budget | None = None
    serving: Serving | None = None  # its twins are servers, measured under load
    goals: dict = field(default_factory=dict)  # GPU class -> pair -> goal (GOAL_KEYS), judged from the interval
    cures: dict = field(default_factory=dict)  # a cost it cures (COSTS) -> its place among their recipes, 1 first
    host_fix: int | None = None  # its place among the fixes a host-bound step's report names, 1 first
    doctor_fixes: tuple = ()  # DoctorFix: what the doctor's --try applies of it to a user's script
    frozen: tuple = ()  # pairs whose planted frozen twin (its steps update nothing) the suite shows failing parity

    def parity_rule(self, pair: str) -> dict:
        rule = self.parity_by_pair.get(pair, self.parity)
        return rule.rule()


def check(name: str, spec, pairs: list[str]) -> "RecipeSpec":
    """The spec of recipes/<name>, checked against its pairs on disk; a CookbookError naming the field."""
    where = f"recipes/{name}/__init__.py"
    if not isinstance(spec, RecipeSpec):
        raise CookbookError(f"{where}: RECIPE is not a common.spec.RecipeSpec")

    def bad(what: str, why: str):
        raise CookbookError(f"{where}: RECIPE.{what} {why}")

    if not spec.title:
        bad("title", "is empty")
    if not isinstance(spec.parity, (LossParity, AnswerParity)):
        bad("parity", "is neither LossParity nor AnswerParity")
    for pair, rule in {None: spec.parity, **spec.parity_by_pair}.items():
        where_rule = "parity" if pair is None else f"parity_by_pair[{pair!r}]"
        if isinstance(rule, LossParity) and set(rule.expect or ()) - set(rule.same or ()):
            bad(f"{where_rule}.expect", f"names {sorted(set(rule.expect) - set(rule.same or ()))}, not in its same")
    if spec.main is not None and spec.main not in pairs:
        bad("main", f"{spec.main!r} is none of its pairs ({', '.join(pairs)})")
    if spec.main is None and len(pairs) > 1:
        bad("main", f"is missing: it has {len(pairs)} pairs ({', '.join(pairs)})")
    if spec.measure not in MEASURES:
        bad("measure", f"{spec.measure!r} is none of {', '.join(MEASURES)}")
    named = {"defaults": list(spec.defaults), "parity_by_pair": list(spec.parity_by_pair), "prime": list(spec.prime),
             "frozen": list(spec.frozen),
             "sweep.pair": [spec.sweep.pair] if spec.sweep else [],
             "budget.pair": [spec.budget.pair] if spec.budget else []}
    for what, names in named.items():
        for pair in names:
            if pair not in pairs:
                bad(what, f"names {pair!r}, none of its pairs ({', '.join(pairs)})")
    for pair, modes in spec.defaults.items():
        if not set(modes) <= set(MODES):
            bad(f"defaults[{pair!r}]", f"has modes {sorted(set(modes) - set(MODES))}, not {', '.join(MODES)}")
    for cls, table in spec.goals.items():
        if cls not in GOAL_CLASSES:
            bad("goals", f"names the GPU class {cls!r}, none of {', '.join(GOAL_CLASSES)}")
        for pair, goal in table.items():
            if pair not in pairs:
                bad(f"goals[{cls!r}]", f"names {pair!r}, none of its pairs ({', '.join(pairs)})")
            if not goal or not set(goal) <= set(GOAL_KEYS):
                bad(f"goals[{cls!r}][{pair!r}]", f"has keys {sorted(set(goal) - set(GOAL_KEYS))}, "
                                                f"not {', '.join(GOAL_KEYS)}")
    for fix in spec.doctor_fixes:
        if not isinstance(fix, DoctorFix) or fix.pair not in pairs:
            bad("doctor_fixes", f"holds {getattr(fix, 'name', fix)!r}: not a DoctorFix on one of its pairs")
    if not set(spec.cures) <= set(COSTS):
        bad("cures", f"names {sorted(set(spec.cures) - set(COSTS))}, none of {', '.join(COSTS)}")
    if spec.sweep and not set(spec.sweep.values) <= set(MODES):
        bad("sweep.values", f"has modes other than {', '.join(MODES)}")
    return spec
