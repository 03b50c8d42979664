"""The slow and fast script of a pair, side by side.

    python -m common.render.diffs amp        # two columns in the terminal (make diff-amp); » ends a cut line

The report also links an HTML side-by-side view of each pair, made here with difflib.HtmlDiff.
"""
import difflib
import shutil
import sys

from common import catalog
from common.errors import CookbookError, exit_with

RED, GREEN, YELLOW, RESET = "\033[31m", "\033[32m", "\033[33m", "\033[0m"


def pair_lines(recipe: str, workload: str):
    return (catalog.script(recipe, workload, "slow").read_text().splitlines(),
            catalog.script(recipe, workload, "fast").read_text().splitlines())


def changed_lines(recipe: str, workload: str) -> int:
    slow, fast = pair_lines(recipe, workload)
    return sum(1 for line in difflib.ndiff(slow, fast) if line[:2] in ("- ", "+ "))


def unified(recipe: str, workload: str) -> str:
    slow, fast = pair_lines(recipe, workload)
    return "\n".join(difflib.unified_diff(slow, fast, f"{workload}_slow.py", f"{workload}_fast.py", lineterm="", n=2))


def html(recipe: str, workload: str) -> str:
    slow, fast = pair_lines(recipe, workload)
    return difflib.HtmlDiff(wrapcolumn=100).make_file(
        slow, fast, f"recipes/{recipe}/{workload}_slow.py", f"recipes/{recipe}/{workload}_fast.py")


def side_by_side(recipe: str, workload: str, width: int, color: bool) -> str:
    slow, fast = pair_lines(recipe, workload)
    col = max(20, (width - 3) // 2)
    paint = (lambda text, c: f"{c}{text}{RESET}") if color else (lambda text, c: text)
    cut = lambda s: (s[:col - 1] + "»" if len(s) > col else s).ljust(col)  # noqa: E731  a cut line is marked
    out = [paint(cut(f"recipes/{recipe}/{workload}_slow.py") + " | " + f"recipes/{recipe}/{workload}_fast.py", YELLOW)]
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, slow, fast, autojunk=False).get_opcodes():
        left, right = slow[i1:i2], fast[j1:j2]
        for k in range(max(len(left), len(right))):
            a = left[k] if k < len(left) else ""
            b = right[k] if k < len(right) else ""
            if tag == "equal":
                out.append(f"{cut(a)}   {cut(b).rstrip()}")
            else:
                mark = {"replace": "|", "delete": "<", "insert": ">"}[tag]
                out.append(f"{paint(cut(a), RED)} {mark} {paint(cut(b).rstrip(), GREEN)}")
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if len(argv) != 1:
            raise CookbookError("usage: python -m common.render.diffs RECIPE")
        recipe = catalog.check(argv[0])
        width = shutil.get_terminal_size((160, 40)).columns
        for workload in catalog.workloads(recipe):
            print(side_by_side(recipe, workload, width, sys.stdout.isatty()))
            print(f"-- {changed_lines(recipe, workload)} changed lines\n")
    except CookbookError as e:
        exit_with(e, "common.render.diffs")


if __name__ == "__main__":
    main()
