"""The profiled traces a tour's children left unread (`--trace-later`), read into the evidence each run
would have written itself (stages.read_trace), in a child of `make finalize` (the runners hold no torch).

    python -m common.measure.unread COMPARISON.json ...

Each comparison is rewritten in place, atomically; a trace that did not come back stays unread, and
its report says so. Prints one line per comparison: the traces read and those missing."""
import sys
from pathlib import Path

from common.analysis.results import Comparison, read_result, write_result
from common.measure.stages import read_trace


def read_all(comparison: Comparison) -> tuple[int, int]:
    """(traces read, traces missing) over the comparison's variants."""
    read = missing = 0
    for entry in comparison.workloads.values():
        for v in (entry.slow, entry.fast):
            if v is None or v.unread is None:
                continue
            if Path(v.unread.trace).exists():
                v.evidence, v.unread = read_trace(v.unread), None
                read += 1
            else:
                missing += 1
    return read, missing


def main(paths: list[str]) -> int:
    for path in paths:
        comparison = read_result(Path(path), Comparison, "make tour")
        read, missing = read_all(comparison)
        if read:
            write_result(Path(path), comparison)
        print(f"{path}: {read} trace(s) read" + (f", {missing} missing" if missing else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
