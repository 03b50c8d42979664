"""One kind of error the user sees as a single line: what is wrong and what to do."""
import sys


class CookbookError(Exception):
    """A problem with the user's input or machine, reported as one line and exit status 2."""


def exit_with(err: CookbookError, prog: str = "cookbook") -> None:
    print(f"{prog}: error: {err}", file=sys.stderr)
    sys.exit(2)


EXIT_OOM = 3  # a harness script that ran out of memory exits with this: a result, not a crash
EXIT_COOKBOOK_FAULT = 4  # the doctor's own code failed inside a user's script: the cookbook's bug, not theirs
