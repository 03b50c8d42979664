"""The README and docs/ stay true: every `make <target>` they name exists, every relative link and
anchor resolves, every recipe has its row in the README's table and a README of the shared outline.
The checks are functions, each also run on planted mistakes, so that a check that cannot fail fails here."""
import re
from pathlib import Path

import pytest

from common import catalog
from common.analysis import figures, stats
from common.render import readme

from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
OUTLINE = ("What changes", "Why it helps", "When it does not help", "Its sweep", "What * measured")
# a pattern target's stem -> what may follow it ("<...>" and "*" are placeholders)
PATTERN_VALUES = {
    "recipe": catalog.available, "sweep": catalog.swept, "diff": catalog.available, "report": catalog.stepped,
    "ncu": catalog.stepped, "nsys": catalog.stepped, "diagnose": lambda: ["churn", "resnet18"],
}


def _prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def make_targets() -> tuple[set[str], set[str]]:
    """(the Makefile's targets, its pattern targets' stems: recipe- for recipe-%)."""
    names = re.findall(r"^([A-Za-z0-9%_.-]+):", (REPO / "Makefile").read_text(), flags=re.M)
    return {n for n in names if "%" not in n}, {n.split("%")[0] for n in names if n.endswith("%")}


def unknown_targets(text: str) -> list[str]:
    """Every `make X` in inline code or in a code block whose X the Makefile does not have."""
    plain, patterns = make_targets()
    said = re.findall(r"`make ([^`\s:]+)", text) + re.findall(r"^\s*make ([^\s#]+)", text, flags=re.M)
    bad = []
    for target in said:
        if target in plain or "=" in target:
            continue
        stem = next((p for p in patterns if target.startswith(p)), None)
        rest = target[len(stem):] if stem else None
        allowed = PATTERN_VALUES.get(stem.rstrip("-"), lambda: []) if stem else None
        if stem is None or not (re.fullmatch(r"<[^>]+>|\*", rest) or rest in allowed()):
            bad.append(target)
    return bad


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", _prose(path.read_text()), flags=re.M)}


def broken_links(path: Path, text: str | None = None) -> list[str]:
    """Every relative link (outside code) whose file, or whose anchor in it, does not exist."""
    text = path.read_text() if text is None else text
    prose = re.sub(r"`[^`\n]*`", "", _prose(text))
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        if not where.exists():
            bad.append(target)
        elif anchor and where.is_file() and anchor not in anchors(where):
            bad.append(target)
    return bad


def outline_gaps(text: str) -> list[str]:
    """The shared outline's headings that a recipe README lacks, or has out of order."""
    headings = re.findall(r"^## (.+)$", _prose(text), flags=re.M)
    missing, at = [], 0
    for want in OUTLINE:
        pattern = re.compile("^" + re.escape(want).replace(r"\*", ".*") + "$")
        found = next((i for i, h in enumerate(headings) if pattern.match(h) and i >= at), None)
        if found is None:
            missing.append(want)
        else:
            at = found
    return missing


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_make_target_a_page_names_exists(page):
    assert unknown_targets(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page):
    assert broken_links(page) == []


def test_the_readme_is_short_with_the_recipe_table_first_and_a_row_per_recipe():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 210
    table = next(i for i, line in enumerate(lines) if line.startswith("| recipe |"))
    assert table < 80
    rows = [line for line in lines if line.startswith("| [`")]
    for recipe in catalog.available():
        assert any(row.startswith(f"| [`{recipe}`](recipes/{recipe}/README.md) |") for row in rows), recipe
    assert all(f"(docs/{p.name})" in "\n".join(lines) for p in PAGES[1:])  # every page linked


@pytest.mark.parametrize("recipe", catalog.available())
def test_every_recipe_has_a_readme_of_the_shared_outline(recipe):
    path = REPO / "recipes" / recipe / "README.md"
    assert path.exists() and outline_gaps(path.read_text()) == []


def test_the_checks_fail_on_planted_mistakes(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# There\n\n## A section\n")
    text = ("See [this](there.md#a-section), [that](there.md#no-such-section), [gone](missing.md) and "
            "[the web](https://pytorch.org). Run `make recipe-amp`, `make recipe-<name>`, `make sweep-folded_ops`, "
            "`make nonsense` and `make doctor SCRIPT=x.py`.\n\n```bash\nmake frobnicate\n```\n")
    page.write_text(text)
    assert broken_links(page) == ["there.md#no-such-section", "missing.md"]
    assert unknown_targets(text) == ["sweep-folded_ops", "nonsense", "frobnicate"]  # folded_ops has no sweep
    assert outline_gaps("## What changes\n## When it does not help\n## Why it helps\n") == [
        "When it does not help", "Its sweep", "What * measured"]


def test_the_readme_gpu_column_is_what_the_committed_reports_say():
    assert readme.stale() == [], "run make readme"


def test_the_gpu_column_comes_from_a_full_gpu_report_only(tmp_path):
    entry = {"ratio": 1.5, "low": 1.4, "high": 1.6, "verdict": "faster", "processes": [5, 5], "floor": stats.FLOOR,
             "goal": "met"}
    facts = {"kind": "recipe", "recipe": "amp", "smoke": False, "pairs": {"resnet18": entry},
             "device": "NVIDIA H100 80GB HBM3", "device_type": "cuda", "date": "2026-11-25", "commit": "abc1234"}
    row = "| [`amp`](recipes/amp/README.md) | bf16 | ResNet-18 >= 1.4x | not measured yet |\n"
    for kind, smoke, want in (("cuda", False, "[resnet18: 1.50x faster (95% interval 1.40-1.60, 5 processes each), "
                                             "goal met](reports/amp.md) (NVIDIA H100 80GB HBM3, 2026-11-25)"),
                              ("cpu", False, f"not measured yet: {readme.SIMULATED}"),
                              ("cuda", True, f"not measured yet: {readme.SIMULATED}")):
        (tmp_path / "amp.md").write_text("# AMP\n" + figures.comment({**facts, "device_type": kind, "smoke": smoke}))
        found = figures.read(tmp_path, ["amp"])
        assert readme.rewrite(row, found) == f"| [`amp`](recipes/amp/README.md) | bf16 | ResNet-18 >= 1.4x | {want} |\n"
    page = tmp_path / "README.md"
    page.write_text(row)
    (tmp_path / "amp.md").write_text(figures.comment(facts))
    assert readme.stale(page, tmp_path) == ["amp"]  # a hand-written or out-of-date cell is found


def _example_rows(text: str) -> list[list[str]]:
    """The rows of the --try tables in a page's example output, each cell stripped, links as their names."""
    rows = []
    for block in re.findall(r"```markdown\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            if line.startswith("| `") or line.startswith("| [`"):
                line = re.sub(r"\[(`[^`]+`)\]\([^)]*\)", r"\1", line)
                rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def test_the_doctors_example_output_says_what_the_code_says():
    """The examples in the README and docs/doctor.md are copied from a real run: each row's fix is applied
    as the code applies it now, and its verdict is the code's word, the same word opening its speedup cell."""
    from common.analysis import fixes

    doc = _example_rows((REPO / "docs" / "doctor.md").read_text())
    said = _example_rows((REPO / "README.md").read_text())
    assert doc and said and all(row in doc for row in said)  # the README quotes the docs' example
    words = {"faster", "slower", "no meaningful difference", "no significant difference", "too noisy to decide",
             "no interval", "not applied", "not applicable", "not tried", "crashed"}
    for fix, how, speed, _memory, _parity, verdict in doc:
        assert how == fixes.FIXES[fix.strip("`")].how, fix
        assert verdict in words and (speed == "-" or verdict.lower() in speed.lower()), (fix, verdict, speed)


def test_the_tours_page_says_what_a_sitting_measures_on_each_gpu_class_from_the_plan():
    """docs/tour.md's table and its example plan lines are the plan's own output (make tour ARGS='--classes')."""
    from common.runners import sitting, tour

    text = (REPO / "docs" / "tour.md").read_text()
    block = text.split("<!-- classes -->\n", 1)[1].split("\n<!-- /classes -->", 1)[0]
    assert block == tour.class_plans(480), "re-render: python -m common.runners.tour --classes"
    h200 = next(s for cls, _, s in tour.class_schedules(480) if cls == "H200")
    for line in sitting.schedule_lines(h200, "NVIDIA H200 (H200 class)"):
        head = line.split(": ", 1)[0] if line.startswith(("this sitting", "next sitting")) else line
        assert f"plan  {head}" in text, line
