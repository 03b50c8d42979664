"""The cookbook's measured figures as other pages quote them (the doctor's findings): each recipe's
speedup per pair and each sweep's regime, read back from the reports themselves.

A recipe report and a sweep report end with one line, `<!-- cookbook-facts {...} -->`, that holds
the figures the page shows (written by render.report and render.sweep from the same results), so
that a committed report can be quoted without its results folder. The first H100 run's reports
(reports/archive/, an older version without that line) are read from their speedup lines and
labelled as such.
"""
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from common import env
from common.analysis import goals, stats
from common.analysis.results_compare import Speedup

MARK = "cookbook-facts"
ARCHIVE = "archive/h100-2026-11-22"
# the archived pairs that measured something else than today's pair (reports/archive/.../ARCHIVE.md):
# their figures are not quoted as the technique's
ARCHIVE_OTHER_PAIR = {"amp": "ResNet-18 in NCHW", "compile": "fp32 with default-mode compilation",
                      "checkpointing": "without the stem", "fused_ops": "three techniques at once"}
_LINE = re.compile(r"<!-- " + MARK + r" (\{.*\}) -->")


def comment(facts: dict) -> str:
    return f"<!-- {MARK} {json.dumps(facts, sort_keys=True)} -->"


def stamp_facts(e) -> dict:
    """A Stamp's device and provenance, as the facts line keeps them."""
    if e is None:
        return {"device": None, "device_type": None, "date": None, "commit": None}
    return {"device": env.device_name(e), "device_type": e.device_type, "date": (e.date or "")[:10],
            "commit": e.git_commit}


def recipe_facts(comparison) -> dict:
    """What a recipe report's facts line holds: per pair the speedup, its interval and verdict."""
    pairs, stamp = {}, None
    for pair, entry in comparison.workloads.items():
        v = entry.slow or entry.fast
        stamp = stamp or (v.env if v else None)
        s = entry.speedup
        if s is not None:
            pairs[pair] = {"ratio": s.ratio, "low": s.low, "high": s.high, "verdict": s.verdict,
                           "processes": s.processes, "floor": s.floor, "batch_size": v.config.batch_size if v else None,
                           "goal": goals.judge(goals.for_run(comparison.recipe, pair, entry)[1], entry),
                           **({"measure": entry.measure} if entry.measure != "step" else {})}
    return {"kind": "recipe", "recipe": comparison.recipe, "smoke": comparison.smoke, "pairs": pairs,
            **stamp_facts(stamp)}


def sweep_facts(r) -> dict:
    v = next((x for p in r.points for x in (p.slow, p.fast) if x is not None), None)
    return {"kind": "sweep", "recipe": r.recipe, "pair": r.pair, "knob": r.knob, "regime": r.crossover,
            "smoke": r.mode == "smoke", **stamp_facts(v.env if v else None)}


@dataclass
class Figure:
    """One recipe's figures, from the newest report that has them."""
    recipe: str
    source: str  # the report it comes from, relative to reports/
    device: str | None
    device_type: str | None
    date: str | None
    commit: str | None
    smoke: bool = False
    older_version: bool = False  # the first H100 run's archived report
    pairs: dict = field(default_factory=dict)  # pair -> {"ratio", "low", "high", "verdict", "batch_size"}
    regimes: dict = field(default_factory=dict)  # pair -> (knob, regime words)

    def label(self) -> str:
        """Where the figure comes from, as a finding quotes it: device, date, and what kind of run."""
        what = ("CPU run, not a GPU figure" if self.device_type == "cpu"
                else "the first H100 run of an older version: pooled steps, no interval" if self.older_version
                else "this version")
        return f"{self.device or '?'}, {self.date or '?'}; {what}" + ("; smoke sizes" if self.smoke else "")

    def says(self) -> str:
        """'resnet18: 1.74x faster (95% interval 1.62-1.85, 5 processes each); churn: no significant ...'
        in stats.describe's words; an archived figure (no interval) as its ratio alone."""
        parts = []
        for pair, p in self.pairs.items():
            if p.get("verdict") and p.get("low") is not None:
                s = Speedup(ratio=p["ratio"], low=p["low"], high=p["high"], method="", verdict=p["verdict"],
                            processes=p.get("processes") or [], floor=p.get("floor", stats.FLOOR))
                goal = p.get("goal") if p.get("goal") in ("met", "missed", "undecided") else None
                what = f"{p['measure']}: " if p.get("measure") else ""  # a cold start's time to first step
                parts.append(f"{pair}: {what}{stats.describe(s)}" + (f", goal {goal}" if goal else ""))
            else:
                parts.append(f"{pair}: {p['ratio']:.2f}x" + (f" ({p['verdict']})" if p.get("verdict") else ""))
        return "; ".join(parts)


def facts_of(text: str) -> dict | None:
    found = _LINE.search(text)
    if not found:
        return None
    try:
        return json.loads(found.group(1))
    except json.JSONDecodeError:
        return None


_ARCHIVED = re.compile(r"\*\*Speedup \(median step time\): ([0-9.]+)x\*\*")


def _archived(path: Path, recipe: str) -> Figure | None:
    """An archived report of the first H100 run: '## <pair>' sections, each with its speedup line."""
    pairs, pair = {}, None
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("## "):
            pair = line[3:].strip()
        found = _ARCHIVED.search(line)
        if found and pair and pair not in pairs:
            pairs[pair] = {"ratio": float(found.group(1)), "low": None, "high": None, "verdict": None}
    if not pairs:
        return None
    return Figure(recipe=recipe, source=f"{ARCHIVE}/{path.name}", device="NVIDIA H100 80GB HBM3",
                  device_type="cuda", date="2026-11-22", commit="785a701", older_version=True, pairs=pairs)


def _stamped(recipe: str, source: str, facts: dict, **figures) -> Figure:
    """A Figure with the device, date and commit of the report's facts line."""
    return Figure(recipe=recipe, source=source, device=facts.get("device"), device_type=facts.get("device_type"),
                  date=facts.get("date"), commit=facts.get("commit"), **figures)


def read(reports_dir: Path, recipes) -> dict[str, Figure]:
    """recipe -> its figures: this version's report (reports/<recipe>.md) where it has a facts line,
    else the archived first H100 run's; with each sweep's regime (reports/sweep_<recipe>.md)."""
    reports_dir = Path(reports_dir)
    found = {}
    for recipe in recipes:
        path = reports_dir / f"{recipe}.md"
        facts = facts_of(path.read_text(errors="replace")) if path.is_file() else None
        if facts and facts.get("pairs"):
            found[recipe] = _stamped(recipe, path.name, facts, smoke=bool(facts.get("smoke")), pairs=facts["pairs"])
        elif (reports_dir / ARCHIVE / f"{recipe}.md").is_file() and recipe not in ARCHIVE_OTHER_PAIR:
            archived = _archived(reports_dir / ARCHIVE / f"{recipe}.md", recipe)
            if archived:
                found[recipe] = archived
        sweep = reports_dir / f"sweep_{recipe}.md"
        facts = facts_of(sweep.read_text(errors="replace")) if sweep.is_file() else None
        if facts and facts.get("regime"):
            figure = found.setdefault(recipe, _stamped(recipe, sweep.name, facts))
            figure.regimes[facts["pair"]] = (facts["knob"], facts["regime"], facts.get("device_type"))
    return found
