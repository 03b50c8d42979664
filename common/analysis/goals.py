"""The goals set for the recipes' pairs (in each recipe's spec), one table per GPU class, judged from a
comparison as a performance engineer would: met only when the speedup's whole 95% interval clears the goal, missed
only when the whole interval falls short, else undecided. A report states the goal of the GPU class
it ran on, or that none is set there; a CPU run judges nothing: the goals are GPU goals.

    keys: min_speedup (x), max_slowdown (x: the fast twin may be this much slower),
          lower_memory (bool), max_memory_share (fast peak / slow peak)
"""
import re

from common import catalog
from common.analysis.results_compare import WorkloadComparison
from common.spec import GOAL_CLASSES


def tables() -> dict[str, dict[tuple[str, str], dict]]:
    """Each GPU class's goals by (recipe, pair), as the recipes' specs set them (common.spec: goals)."""
    return {cls: {(recipe, pair): goal for recipe in catalog.available()
                  for pair, goal in catalog.spec(recipe).goals.get(cls, {}).items()} for cls in GOAL_CLASSES}


TABLES = tables()
SOURCES = {"H100": "this version's goals, against the first H100 run's reference points",
           "T4": "the ResNet-18 lab's expected results, on Colab or Kaggle"}
NAMES = {"H100": "an H100", "T4": "a T4"}


def gpu_class(gpu_name: str | None) -> str | None:
    """The goal table a GPU's runs are judged by ("NVIDIA H100 80GB HBM3" -> "H100"), or None."""
    words = set(re.findall(r"[A-Za-z0-9]+", gpu_name or ""))  # "NVIDIA T400" is not a T4
    return next((c for c in TABLES if c in words), None)


def goal_of(recipe: str, pair: str, gpu: str = "H100") -> dict:
    return dict(TABLES.get(gpu, {}).get((recipe, pair), {}))


def goals_of(recipe: str, pair: str) -> dict[str, dict]:
    """Every class's goal for the pair: {"H100": {...}, "T4": {...}}."""
    return {c: dict(t[(recipe, pair)]) for c, t in TABLES.items() if (recipe, pair) in t}


def describe(goal: dict) -> str:
    """The goal in words: '>= 1.4x with lower peak memory'."""
    speed = (f">= {goal['min_speedup']:g}x" if "min_speedup" in goal
             else f"at most {goal['max_slowdown']:g}x slower" if "max_slowdown" in goal else "")
    memory = [text for key, text in (("lower_memory", "lower peak memory"),
                                     ("max_memory_share", f"peak memory <= {goal.get('max_memory_share', 0):.0%} "
                                                          "of the slow twin's")) if goal.get(key)]
    return " with ".join(p for p in (speed, " and ".join(memory)) if p)


NO_INTERVAL = "undecided (no interval)"


def judge(goal: dict, entry: WorkloadComparison | None) -> str:
    """'met', 'missed', 'undecided', or why it is not judged."""
    if not goal:
        return ""
    if entry is None or entry.speedup is None:
        return "not measured (no speedup)"
    if entry.slow.env.device_type != "cuda":
        return "not judged (a CPU run)"
    s = entry.speedup
    verdicts = []
    floor = goal.get("min_speedup") or (1 / goal["max_slowdown"] if "max_slowdown" in goal else None)
    if floor is not None and (s.low is None or s.high is None):  # one process a twin: a point estimate decides nothing
        verdicts.append(NO_INTERVAL)
    elif floor is not None:
        verdicts.append("met" if s.low >= floor else "missed" if s.high < floor else "undecided")
    share = entry.fast.memory.peak_mb / entry.slow.memory.peak_mb if entry.slow.memory.peak_mb else None
    if goal.get("lower_memory") and share is not None:
        verdicts.append("met" if share < 1 else "missed")
    if "max_memory_share" in goal and share is not None:
        verdicts.append("met" if share <= goal["max_memory_share"] else "missed")
    if "missed" in verdicts:
        return "missed"
    return next((v for v in ("undecided", NO_INTERVAL) if v in verdicts), "met")


def for_run(recipe: str, pair: str, entry: WorkloadComparison | None) -> tuple[str | None, dict]:
    """(the class the run is judged as, its goal): the GPU's own class; a CPU run's is None."""
    v = entry and (entry.slow or entry.fast)
    if v is None or v.env.device_type != "cuda":
        return None, {}
    cls = gpu_class(v.env.gpu_name)
    return cls, goal_of(recipe, pair, cls) if cls else {}


def goal_line(recipe: str, pair: str, entry: WorkloadComparison | None) -> str | None:
    """The report's goal line, or None where no class sets a goal for this pair."""
    every = goals_of(recipe, pair)
    if not every:
        return None
    v = entry and (entry.slow or entry.fast)
    if v is None or v.env.device_type != "cuda":
        said = "; ".join(f"on {NAMES[c]}: {describe(g)}" for c, g in every.items())
        return f"Goals ({said}): **not judged (a CPU run)**"
    cls, goal = for_run(recipe, pair, entry)
    if not goal:
        return (f"No goal set for {v.env.gpu_name} (goals exist on "
                f"{', '.join(NAMES[c] for c in every)})")
    return f"Goal on {NAMES[cls]} ({SOURCES[cls]}): {describe(goal)}: **{judge(goal, entry)}**"
