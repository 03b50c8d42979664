"""The goals set for a recipe's pairs on an H100 (GOALS in recipes/<recipe>/__init__.py), judged
from a comparison as a performance engineer would: met only when the speedup's whole 95% interval
clears the goal, missed only when the whole interval falls short, else undecided. A CPU run judges
nothing: the goals are GPU goals.

    GOALS = {"resnet18": {"min_speedup": 1.4, "lower_memory": True}}
    keys: min_speedup (x), max_slowdown (x: the fast twin may be this much slower),
          lower_memory (bool), max_memory_share (fast peak / slow peak)
"""
from common import catalog
from common.analysis.results import WorkloadComparison


def goal_of(recipe: str, pair: str) -> dict:
    return dict(getattr(catalog.settings(recipe), "GOALS", {}).get(pair, {}))


def describe(goal: dict) -> str:
    """The goal in words: '>= 1.4x with lower peak memory'."""
    speed = (f">= {goal['min_speedup']:g}x" if "min_speedup" in goal
             else f"at most {goal['max_slowdown']:g}x slower" if "max_slowdown" in goal else "")
    memory = [text for key, text in (("lower_memory", "lower peak memory"),
                                     ("max_memory_share", f"peak memory <= {goal.get('max_memory_share', 0):.0%} "
                                                          "of the slow twin's")) if goal.get(key)]
    return " with ".join(p for p in (speed, " and ".join(memory)) if p)


def judge(goal: dict, entry: WorkloadComparison | None) -> str:
    """'met', 'missed', 'undecided', or why it is not judged."""
    if not goal:
        return ""
    if entry is None or entry.speedup is None:
        return "not measured (no speedup)"
    if entry.slow.env.device_type != "cuda":
        return "not judged (a CPU run)"
    s = entry.speedup
    low, high = (s.low, s.high) if s.low is not None else (s.ratio, s.ratio)
    verdicts = []
    floor = goal.get("min_speedup") or (1 / goal["max_slowdown"] if "max_slowdown" in goal else None)
    if floor is not None:
        verdicts.append("met" if low >= floor else "missed" if high < floor else "undecided")
    share = entry.fast.memory.peak_mb / entry.slow.memory.peak_mb if entry.slow.memory.peak_mb else None
    if goal.get("lower_memory") and share is not None:
        verdicts.append("met" if share < 1 else "missed")
    if "max_memory_share" in goal and share is not None:
        verdicts.append("met" if share <= goal["max_memory_share"] else "missed")
    if "missed" in verdicts:
        return "missed"
    return "undecided" if "undecided" in verdicts else "met"


def line(recipe: str, pair: str, entry: WorkloadComparison | None) -> str | None:
    """The report's goal line, or None where the recipe sets no goal for this pair."""
    goal = goal_of(recipe, pair)
    if not goal:
        return None
    return f"Goal on an H100: {describe(goal)}: **{judge(goal, entry)}**"
