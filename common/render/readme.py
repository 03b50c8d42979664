"""The README's recipe table, its last column from the committed reports: `make readme`.

    python -m common.render.readme            # rewrite README.md's column "this version on a GPU"
    python -m common.render.readme --check    # exit 1, saying which rows differ, where it is stale

A cell holds what the recipe's report (reports/<recipe>.md, through its facts line) says of each
pair, in stats.describe's words, with the goal met, missed or undecided and a link to the report.
Only a full-size GPU run of this version fills it: a CPU or smoke report leaves "not measured yet"
(a data-parallel recipe: "needs 2+ GPUs"), with where it did run: the archived H100 run of an older
version, or only CPUs with the GPUs' choices simulated. tests/unit/test_docs.py runs the check.
"""
import re
import sys
from pathlib import Path

from common import catalog
from common.analysis import figures
from common.env import REPO_ROOT
from common.errors import CookbookError, exit_with
from common.files import atomic_write_text

README = REPO_ROOT / "README.md"
ROW = re.compile(r"^\| \[`(?P<recipe>[a-z0-9_]+)`\]\(recipes/(?P=recipe)/README\.md\) \|")


NOT_YET = "not measured yet"
SIMULATED = "CPU runs only, the GPUs' choices simulated"  # the suite's T4, A100, H100 profiles (docs/measurement.md)


def cell(recipe: str, figure: figures.Figure | None) -> str:
    """What the README says a recipe measured on a GPU, and where it has only been simulated."""
    if figure is not None and figure.older_version:
        return f"{NOT_YET}; [an older version on an H100](reports/{figure.source}) ({figure.date})"
    other = figures.ARCHIVE_OTHER_PAIR.get(recipe)
    if figure is None and other and (REPO_ROOT / "reports" / figures.ARCHIVE / f"{recipe}.md").is_file():
        return (f"{NOT_YET}; [an older version's other pair ({other}) on an H100]"
                f"(reports/{figures.ARCHIVE}/{recipe}.md) (2026-11-22)")
    if figure is None or not figure.pairs or figure.device_type != "cuda" or figure.smoke:
        distributed = catalog.spec(recipe).distributed
        return f"{'needs 2+ GPUs' if distributed else NOT_YET}: {SIMULATED}"
    return f"[{figure.says()}](reports/{figure.source}) ({figure.device}, {figure.date})"


def rewrite(text: str, found: dict[str, figures.Figure]) -> str:
    """The README with each recipe row's last cell replaced by cell()."""
    out = []
    for line in text.splitlines(keepends=True):
        row = ROW.match(line)
        if row and row["recipe"] in catalog.available():
            head, _, _ = line.rstrip("\n").rstrip().rstrip("|").rstrip().rpartition(" | ")
            line = f"{head} | {cell(row['recipe'], found.get(row['recipe']))} |\n"
        out.append(line)
    return "".join(out)


def refreshed(readme: Path = README, reports_dir: Path = REPO_ROOT / "reports") -> tuple[str, list[str]]:
    """The README as its reports say it, and the recipes whose cell that changes."""
    text = readme.read_text()
    fresh = rewrite(text, figures.read(reports_dir, catalog.available()))
    return fresh, [ROW.match(a)["recipe"] for a, b in zip(text.splitlines(), fresh.splitlines()) if a != b]


def measured_table(readme: Path = README) -> str:
    """The README's recipe table as committed (its header and every recipe's row): what each technique
    measured on a GPU, for a reader who has run nothing yet (the notebook's first section)."""
    lines = readme.read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if ROW.match(line)]
    if not rows:
        raise CookbookError(f"{readme}: no recipe table")
    return "\n".join(lines[rows[0] - 2:rows[-1] + 1])


def stale(readme: Path = README, reports_dir: Path = REPO_ROOT / "reports") -> list[str]:
    """The recipes whose README cell differs from what their reports say."""
    return refreshed(readme, reports_dir)[1]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv not in ([], ["--check"]):
            raise CookbookError("usage: python -m common.render.readme [--check]")
        fresh, changed = refreshed()
        if argv == ["--check"]:
            if changed:
                print(f"README.md's GPU column is stale for: {', '.join(changed)} (make readme rewrites it)")
                return 1
            return 0
        if changed:
            atomic_write_text(README, fresh)
        print(f"README.md: {len(changed)} row(s) rewritten" + (f" ({', '.join(changed)})" if changed else ""))
        return 0
    except CookbookError as e:
        exit_with(e, "common.render.readme")


if __name__ == "__main__":
    sys.exit(main())
