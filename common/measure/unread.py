"""The profiled traces a tour's children left unread (`--trace-later`), read into the evidence each run
would have written itself (stages.read_trace), in a child of `make finalize` (the runners hold no torch).

    python -m common.measure.unread COMPARISON.json ...

Each comparison is rewritten in place, atomically; a trace that did not come back stays unread, and
its report says so. Prints one line per comparison: the traces read and those missing."""
import sys
from pathlib import Path

from common.analysis.results import read_result, write_result
from common.analysis.results_compare import Comparison
from common.measure.stages import read_trace


def read_all(comparison: Comparison) -> tuple[int, int]:
    """(traces read, traces missing or unreadable) over the comparison's variants."""
    read = missing = 0
    for entry in comparison.workloads.values():
        for v in (entry.slow, entry.fast):
            if v is None or v.unread is None:
                continue
            if not Path(v.unread.trace).exists():
                missing += 1
                continue
            try:
                v.evidence, v.unread = read_trace(v.unread), None
                read += 1
            except Exception as e:  # one unreadable trace costs its own evidence, not the others'
                v.warnings.append(f"its profiled trace could not be read ({type(e).__name__}: {str(e)[:160]})")
                v.unread = None
                missing += 1
    return read, missing


def main(paths: list[str]) -> int:
    for path in paths:
        comparison = read_result(Path(path), Comparison, "make tour")
        read, missing = read_all(comparison)
        if read or missing:
            write_result(Path(path), comparison)
        print(f"{path}: {read} trace(s) read" + (f", {missing} missing" if missing else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
