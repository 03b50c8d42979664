"""Every slow/fast pair differs only in its optimization: a small diff, every changed line explained."""
import ast
import difflib

import pytest

from common import catalog

PAIRS = [(r, w) for r in catalog.available() for w in catalog.workloads(r)]
MAX_CHANGED = 25


def code_lines(path):
    """Source lines outside the module docstring (the docstrings of a pair name their variant)."""
    source = path.read_text()
    doc = ast.get_docstring(ast.parse(source), clean=False)
    body = ast.parse(source).body
    skip = set(range(body[0].lineno, body[0].end_lineno + 1)) if doc else set()
    return [line for i, line in enumerate(source.splitlines(), 1) if i not in skip]


@pytest.mark.parametrize("recipe, workload", PAIRS)
def test_pair_diff_is_small(recipe, workload):
    slow = catalog.script(recipe, workload, "slow").read_text().splitlines()
    fast = catalog.script(recipe, workload, "fast").read_text().splitlines()
    changed = sum(1 for line in difflib.ndiff(slow, fast) if line[:2] in ("- ", "+ "))
    assert 0 < changed <= MAX_CHANGED


@pytest.mark.parametrize("recipe, workload", PAIRS)
def test_every_new_line_of_the_fast_twin_says_why(recipe, workload):
    slow = code_lines(catalog.script(recipe, workload, "slow"))
    fast = code_lines(catalog.script(recipe, workload, "fast"))
    removed = {line[2:].strip() for line in difflib.ndiff(slow, fast) if line.startswith("- ")}
    above = ""  # the previous non-blank line of the fast twin
    for line in difflib.ndiff(slow, fast):
        if line.startswith(("- ", "? ")):
            continue
        text = line[2:].strip()
        if line.startswith("+ ") and text and text not in removed:  # a re-indented line is not new
            explained = "#" in text or above.startswith("#")  # on the line, or a comment line just above
            assert explained, f"{recipe}/{workload}_fast.py: no comment on {text!r}"
        above = text or above


@pytest.mark.parametrize("recipe, workload", PAIRS)
def test_pair_shares_the_harness_lines(recipe, workload):
    for variant in catalog.VARIANTS:
        source = catalog.script(recipe, workload, variant).read_text()
        if catalog.served(recipe):  # its twins are servers: one shared server (common/server.py)
            assert "server.serve(__file__, load, MAX_BATCH, MAX_WAIT_MS)" in source
            continue
        assert "run = harness.start(__file__, __doc__)" in source and "run.finish()" in source
        assert "run.loop(" in source and ("run.log_loss(" in source or "run.log_output(" in source)


def test_make_recipes_runs_every_recipe_then_the_index():
    import subprocess

    from common.env import REPO_ROOT

    out = subprocess.run(["make", "-n", "recipes", "PYTHON=python3"], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert "common.render.index" in out
    for recipe in catalog.available():
        assert f"recipe-{recipe}" in out or recipe in out.split("for r in")[1].split(";")[0]


def test_a_side_by_side_line_cut_to_its_column_is_marked():
    """Piped (no terminal), each column is about 79 characters: a longer line ends in "»", never silently."""
    from common.render import diffs

    text = diffs.side_by_side("amp", "resnet18", 80, color=False)
    longest = max(len(line) for line in diffs.pair_lines("amp", "resnet18")[1])
    assert longest > 38 and "»" in text
    assert all(len(line) <= 80 for line in text.splitlines())
