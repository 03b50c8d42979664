"""Under a memory budget, how large a batch trains: the question checkpointing answers.

A probe runs a twin for a few steps at one batch size with its GPU memory capped at the budget
(`--memory-budget-gb`, torch.cuda.set_per_process_memory_fraction) in its own process: it trains, or
it runs out of memory (the harness's exit status 3). The search doubles the batch from a start
until a probe runs out of memory, then bisects between the last batch that trained and the first
that did not, down to a step of 1/16 of the batch. `make recipe-checkpointing` runs it for both
twins and the report says "fits batch N without, M with". It needs CUDA: on a CPU the report says so.
"""
from pathlib import Path

from common.analysis.results_compare import BudgetSearch
from common.runners import launch

DEFAULT_GB = 16.0  # the seed's GPU: a T4 has 16 GB
MAX_BATCH = 16384


def _done(fits: int, fails: int) -> bool:
    return fails - fits <= max(1, fits // 16)


def most_probes(start: int) -> int:
    """The most probes search() can run from `start` (doubling up to MAX_BATCH, then the longest
    bisection), for a progress line that never promises fewer runs than may follow."""
    seen = {}

    def bisect(fits, fails):  # the longest bisection between these two
        if _done(fits, fails):
            return 0
        if (fits, fails) not in seen:
            mid = (fits + fails) // 2
            seen[fits, fails] = 1 + max(bisect(mid, fails), bisect(fits, mid))
        return seen[fits, fails]

    worst, fits, batch, probes = 0, None, start, 0
    while batch <= MAX_BATCH:
        probes += 1  # out of memory at this batch: the bisection follows, if something trained
        worst = max(worst, probes + (bisect(fits, batch) if fits is not None else 0))
        fits, batch = batch, batch * 2
    return max(worst, probes)  # or every doubling trained


def search(module: str, flags: list[str], out_dir: Path, cpus, start: int, progress=print,
           announce=None) -> BudgetSearch:
    """The largest batch at which `python -m module <flags> --batch-size B` trains. announce(batch),
    when given, is called before each probe (a progress counter), and progress(text) after it."""
    found = BudgetSearch()
    Path(out_dir).mkdir(parents=True, exist_ok=True)

    def trains(batch: int) -> bool | None:
        out = Path(out_dir) / f"probe_b{batch}.json"
        if announce is not None:
            announce(batch)
        outcome = launch.child(["-m", module], flags + ["--batch-size", str(batch)], out, cpus=cpus)
        found.probes.append((batch, outcome.kind))
        word = "trains" if outcome.kind == "ok" else outcome.kind
        progress(word if announce is not None else f"    batch {batch}: {word}")
        return {"ok": True, "oom": False}.get(outcome.kind)

    batch = start
    while batch <= MAX_BATCH:
        ok = trains(batch)
        if ok is None:  # a crash, not a memory limit: stop and say so
            return found
        if not ok:
            found.fails = batch
            break
        found.fits, batch = batch, batch * 2
    if found.fits is None or found.fails is None:
        return found
    while not _done(found.fits, found.fails):
        mid = (found.fits + found.fails) // 2
        ok = trains(mid)
        if ok is None:
            return found
        if ok:
            found.fits = mid
        else:
            found.fails = mid
    return found


def probe_flags(budget_gb: float) -> list[str]:
    """A probe: a few steps, nothing profiled or counted beyond the step itself."""
    return ["--steps", "2", "--warmup", "1", "--profile-steps", "0", "--probe-steps", "0", "--min-time", "0",
            "--memory-budget-gb", f"{budget_gb:g}"]
