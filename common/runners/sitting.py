"""A sitting's plan: which pairs of the tour fit the GPU time it has, what waits for the next sitting, and
how many sittings the whole tour needs on this GPU class, from costs measured here, never guessed.

Pairs are taken in the order a reader needs them (READER_ORDER: the noise floor, then the design card's
techniques, the rest, the costliest last); a pair is scheduled where its predicted seconds fit what is
left, else it waits for the next sitting; one that no sitting of this length could hold is said so, not
cut every time. A prediction comes, in order, from this bundle's own pairs (this sitting's GPU, this
commit), the ledger's figures for this GPU, then a stated default scaled by this device's measured
ceilings against the reference GPU the defaults were measured on.
"""
import json
import math
from dataclasses import dataclass, field
from statistics import median

from common.spec import GPU_CLASSES

# the noise floor, the design card's six, the other single-GPU techniques, then compilation in every process
# and the served pair: what a reader of the README's GPU column asks for first
READER_ORDER = ("aa", "amp", "dataloader", "sync_removal", "fused_ops", "compile", "checkpointing", "channels_last",
                "cuda_graphs", "precision", "grad_accumulation", "folded_ops", "set_to_none", "attention",
                "selective_checkpointing", "flex_attention", "float8", "cold_start",
                "serving")

# The GPU classes a sitting sizes for. A workload whose step is slow on a class caps its timed steps there
# (its spec's gpu_class_steps): the recipes' own batch and image sizes stay (each pair's regime), only the
# number of steps is capped. --steps is a floor under --min-time's 2 s of steps, so a fast step still times
# 2 s. Matched by what the name holds; a GPU none of them names takes the class of its compute capability.
CLASSES = GPU_CLASSES


# NVIDIA's datasheet peaks (dense fp32 TFLOP/s, memory GB/s) for a plan made where the GPU's ceilings are not
# measured (the tour's --classes table, a --dry-run elsewhere); a sitting on the GPU measures its own first
DATASHEET = {
    "T4": {"fp32_tflops": 8.1, "bandwidth_gbs": 320.0},
    "L4": {"fp32_tflops": 30.3, "bandwidth_gbs": 300.0},
    "A100": {"fp32_tflops": 19.5, "bandwidth_gbs": 1555.0},
    "H100": {"fp32_tflops": 67.0, "bandwidth_gbs": 3350.0},
}


def gpu_class(name: str, capability: list[int] | None) -> str:
    """The class of a GPU: the one its name names, else by compute capability (sm_90+ H100, sm_80 A100,
    sm_89 L4, older T4): the sizes a sitting can afford on it."""
    for cls in sorted(CLASSES, key=len, reverse=True):
        if cls in (name or ""):
            return cls
    major, minor = (capability or [0, 0])[:2]
    if major >= 9:
        return "H100"
    if (major, minor) == (8, 9):
        return "L4"
    return "A100" if major == 8 else "T4"


def steps_share(cls: str | None, workload: str) -> float:
    """The share of a process's steps (warm-up and timed, the presets' on a GPU) that this class's caps keep."""
    from common.workload_specs import workload_spec

    preset = workload_spec(workload).sizes["cuda"]
    caps = workload_spec(workload).gpu_class_steps.get(cls or "", {})
    full = preset.get("steps", 0) + preset.get("warmup", 0)
    kept = caps.get("steps", preset.get("steps", 0)) + caps.get("warmup", preset.get("warmup", 0))
    return min(1.0, kept / full) if full else 1.0


def step_flags(cls: str, workload: str) -> list[str]:
    """The script flags that cap a process's steps on this class (none where its presets fit)."""
    from common.workload_specs import workload_spec

    caps = workload_spec(workload).gpu_class_steps.get(cls, {})
    return [f for key, value in caps.items() for f in (f"--{key}", str(value))]


@dataclass
class Cost:
    seconds: float
    source: str  # "this bundle", "the ledger", "default"


@dataclass
class Schedule:
    now: list = field(default_factory=list)  # (leg, Cost) this sitting
    later: list = field(default_factory=list)  # (leg, Cost) the next sittings
    never: list = field(default_factory=list)  # (leg, Cost) longer than any sitting of this budget
    sittings: int = 0  # sittings the whole tour needs at this budget, this one included
    budget_s: float = 0.0
    setup_s: float = 0.0  # what a sitting spends before its first pair (probes, data, fork server, preflight)


def order(legs: list) -> list:
    """The legs in the order a reader needs them (READER_ORDER; a recipe it does not name after them)."""
    rank = {name: i for i, name in enumerate(READER_ORDER)}
    return sorted(legs, key=lambda leg: (rank.get(leg.name, len(rank)), leg.name))


def scale(ceilings: dict | None, reference: dict | None, steps: float = 1.0) -> float:
    """How much longer this device's processes should take than the reference GPU's, from their measured
    ceilings: the share of a process that runs on the device (the reference's `device_share`: its steps,
    from the warm-up to the FLOP count) slowed by the geometric mean of the fp32 matmul and memory
    bandwidth ratios and cut to the `steps` share a class's caps keep, never below the reference (imports,
    data and the trace's export do not speed up with the GPU); 1 where either is unknown."""
    ratios = []
    for key in ("fp32_tflops", "bandwidth_gbs"):
        mine, theirs = (ceilings or {}).get(key), (reference or {}).get(key)
        if mine and theirs:
            ratios.append(theirs / mine)
    if not ratios:
        return 1.0
    slower = max(1.0, math.prod(ratios) ** (1 / len(ratios)))
    share = float((reference or {}).get("device_share", 1.0))
    return max(1.0, 1.0 + share * (slower * steps - 1.0))


def per_process(leg, ledger: dict, key: str, bundle_costs: dict, ceilings: dict | None, cls: str | None = None) -> Cost:
    """Seconds per process (a served pair: per leg) for this leg on this device, and where the figure came from."""
    smoke = "smoke" in key
    known = ledger.get("devices", {}).get(key, {})
    if leg.name in bundle_costs:
        return Cost(float(bundle_costs[leg.name]), "this bundle")
    if leg.name in known:
        # the ledger's figure, scaled by how this sitting's pairs compared with it where both measured one
        both = [bundle_costs[n] / known[n] for n in bundle_costs if n in known and known[n] and not smoke]
        return Cost(float(known[leg.name]) * (median(both) if both else 1.0), "the ledger")
    default = ledger.get("default", {})
    kind = "smoke" if smoke else "process"
    if leg.served:
        seconds = default.get(f"serving {kind}", default.get("serving", 240.0))
    else:
        seconds = default.get(f"{leg.name} {kind}", default.get(f"{leg.workload} {kind}", 20.0))
    steps = steps_share(cls, leg.workload)
    return Cost(float(seconds) * (1.0 if smoke else scale(ceilings, ledger.get("reference"), steps)), "default")


def predicted(leg, ledger: dict, key: str, rounds: int, bundle_costs: dict | None = None,
              ceilings: dict | None = None, primed: bool = False, cls: str | None = None) -> Cost:
    """The leg's seconds: its processes (a primed pair's one more) at per_process(), plus the runner's start."""
    cost = per_process(leg, ledger, key, bundle_costs or {}, ceilings, cls)
    overhead = float(ledger.get("default", {}).get("leg_overhead", 3.0))
    if leg.served:
        return Cost(cost.seconds, cost.source)
    return Cost(overhead + (2 * rounds + primed) * cost.seconds, cost.source)


def schedule(legs: list, cost_of, budget_s: float, setup_s: float) -> Schedule:
    """The legs in reader order, each scheduled in the first sitting whose time left holds its cost
    (this sitting: the budget less its setup; later ones: the same); `cost_of(leg)` -> Cost."""
    out = Schedule(budget_s=budget_s, setup_s=setup_s)
    room = max(0.0, budget_s - setup_s)
    sittings: list[float] = []  # seconds left in each sitting planned so far; [0] is this one
    for leg in order(legs):
        cost = cost_of(leg)
        if cost.seconds > room:
            out.never.append((leg, cost))
            continue
        if not sittings:
            sittings.append(room)
        at = next((i for i, left in enumerate(sittings) if cost.seconds <= left), None)
        if at is None:
            sittings.append(room)
            at = len(sittings) - 1
        sittings[at] -= cost.seconds
        (out.now if at == 0 else out.later).append((leg, cost))
    out.sittings = len(sittings)
    return out


def schedule_lines(p: Schedule, gpu: str) -> list[str]:
    """The plan in lines, as the tour says it first and --dry-run says it alone."""
    took = sum(c.seconds for _, c in p.now)
    lines = [f"this sitting: {len(p.now)} pair(s), ~{took:.0f} s of the {p.budget_s:.0f} s budget after "
             f"~{p.setup_s:.0f} s of setup: " + (", ".join(f"{leg.recipe}/{leg.pair}" for leg, _ in p.now) or "none")]
    if p.later:
        waiting = ", ".join(f"{leg.recipe}/{leg.pair} (~{c.seconds:.0f} s)" for leg, c in p.later)
        lines.append(f"next sitting: {waiting}")
    for leg, c in p.never:
        lines.append(f"no sitting of {p.budget_s:.0f} s holds {leg.recipe}/{leg.pair} (~{c.seconds:.0f} s): "
                     f"ARGS='--budget {math.ceil(c.seconds + p.setup_s)}' or make recipe-{leg.recipe} alone")
    lines.append(f"the whole tour needs {p.sittings} sitting(s) of {p.budget_s:.0f} s on {gpu}"
                 + (f" (and longer ones for {len(p.never)} pair(s))" if p.never else ""))
    return lines


def read_ceilings(path, gpu: str) -> dict | None:
    """This GPU's measured ceilings from the ceiling cache (common.measure.ceiling), any torch version."""
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    found = [v for k, v in cache.items() if k.split(" | ")[0] == gpu]
    return found[-1] if found else None
