"""The slow-vs-fast runner behind `make recipe-<name>`.

    python -m common.runners.compare amp [--smoke] [--rounds N] [--device auto|cuda|cpu] [--data synthetic]

Every variant runs in its own process, pinned to the same cores; slow and fast alternate round
after round (who goes first alternates too) so that drift hits both; round 1 also profiles. The
process is the unit: after MIN_ROUNDS rounds the speedup's 95% interval over processes is checked
after every round, and rounds are added until it decides (it excludes 1, or lies within the +-3%
floor) or MAX_ROUNDS is reached; the report says which. Then: parity of the loss trajectories, a
terminal summary, and the report (reports/<recipe>.md, plot, side-by-side diffs).

With --aa the slow script plays both roles (an A/A): the same rounds, statistics and parity check
on two copies of one program, which must pass parity and must not be called faster or slower. Its
interval is this machine's noise floor ("A/A: 1.00x, 0.98-1.02"); it writes no report, only its
results under reports/results/<recipe>/aa/, and exits 1 if the pipeline fails the check.

Every input (the runner's flags, each --data path, the flags after -- as the scripts read them, the
reports folder) is checked before the first run starts and before anything is written.
"""
import argparse
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from common import catalog, env
from common.analysis import coldstart, stats, timeline
from common.analysis.aggregate import RESEEDED_RTOL, aggregate, parity, parity_failure
from common.analysis.device import DeviceProfile
from common.analysis.results import write_result
from common.analysis.results_compare import Comparison, ComparisonRounds, MemoryBudget, WorkloadComparison
from common.analysis.results_run import RunResult
from common.cli import (
    OneLineParser,
    check_script_flags,
    non_negative_float,
    positive_float,
    positive_int,
    split_passthrough,
)
from common.errors import CookbookError, exit_with
from common.files import file_lock
from common.runners import budget, launch, nodes, pipeline
from common.spec import Budget
from common.workload_specs import workload_names

MIN_ROUNDS, MAX_ROUNDS = 3, 10


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.compare", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", help="recipe folder name under recipes/")
    launch.add_flags(p, rounds_help=f"exactly N alternating rounds (default: from {MIN_ROUNDS} up to {MAX_ROUNDS}, "
                                    "until the interval decides; 1 with --smoke)")
    p.add_argument("--max-rounds", type=positive_int, help=f"the cap (default {MAX_ROUNDS})")
    p.add_argument("--nproc-per-node", type=positive_int, metavar="N",
                   help="ranks per pair run, for a recipe launched by torchrun (ddp): default the GPUs present "
                        "if 2 or more, else 2 CPU ranks on gloo")
    p.add_argument("--workloads", help="comma-separated subset of the recipe's workloads (default: every pair)")
    nodes.add_flags(p)
    p.add_argument("--memory-budget-gb", type=non_negative_float, default=budget.DEFAULT_GB, metavar="GB",
                   help=f"for recipes with a memory-budget search (checkpointing): the budget (default "
                        f"{budget.DEFAULT_GB:g}, the seed's T4); 0 skips the search")
    p.add_argument("--no-report", action="store_true",
                   help="write the results and comparison.json only, each profiled trace unread; the report and the "
                        "traces are read later, on any machine (make tour's pairs: make finalize)")
    p.add_argument("--aa", action="store_true",
                   help="A/A: the slow script in both roles, to measure this machine's noise floor and check the "
                        "pipeline (no report is written; results under reports/results/<recipe>/aa/)")
    p.add_argument("--parity-rtol", type=positive_float, metavar="FRACTION",
                   help="override the recipe's trajectory tolerance (windowed mean loss difference as a fraction "
                        "of the initial loss, e.g. 0.01)")
    p.epilog = "Flags after -- go to every script, e.g. -- --steps 50 --batch-size 64"
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    return args


@dataclass
class Rounds:
    """How many processes per variant, and how that number is chosen."""
    least: int
    most: int
    fixed: bool

    @property
    def looks(self) -> int:
        """How many times the runner may look at the interval: once after each round from `least` on."""
        return 1 if self.fixed else self.most - self.least + 1

    def describe(self) -> str:
        if self.fixed:
            return f"{self.least} round(s), fixed"
        return f"{self.least} rounds, then one more until the 95% interval decides, at most {self.most}"


@dataclass
class ComparePlan:
    """Everything one comparison runs: validated from the command line before anything starts."""
    recipe: str
    title: str
    evidence: tuple  # the metric names this recipe's technique must move (common.analysis.metrics)
    cuda: bool
    rounds: Rounds
    workloads: list
    script_flags: dict  # workload -> flags for its scripts (data, --smoke, pass-through)
    cpus: list
    reports_dir: Path
    results_dir: Path  # this invocation's own folder under reports/results/<recipe>/
    traces_dir: Path
    smoke: bool
    command: str
    parity_rtol: float | None = None  # --parity-rtol: one tolerance for every workload
    nproc: int | None = None  # ranks per run, for a recipe torchrun launches (settings.DISTRIBUTED)
    machines: nodes.Nodes | None = None  # the machines of a run across several (common/runners/nodes.py)
    budget_gb: float = budget.DEFAULT_GB
    budget_spec: Budget | None = None  # the recipe's budget search, if it searches batch sizes under a budget
    aa: bool = False  # --aa: the slow script in both roles
    no_report: bool = False  # --no-report: results and comparison.json only (rendered by make finalize)
    profile: DeviceProfile | None = None  # what the children's device can do
    not_applicable: str | None = None  # why the technique does not exist on it: nothing is timed
    measure: str = "step"  # what the headline speedup is of: "step", or "first step" (the spec's measure)
    fresh: bool = False  # every child a fresh interpreter (the spec's fresh: a cold start counts the imports)
    primed: tuple = ()  # pairs whose fast twin runs once, unmeasured, before round 1 (the spec's prime: a cache)

    def rule_for(self, workload: str) -> dict:
        rule = catalog.parity_rule(self.recipe, workload)
        return {**rule, **({"rtol": self.parity_rtol} if self.parity_rtol is not None else {})}

    @property
    def recipe_results(self) -> Path:
        return self.results_dir.parent

    @property
    def probes_budget(self) -> bool:
        """Whether the memory-budget search will launch probes (CUDA, not smoke, a budget, its pair)."""
        return bool(self.budget_spec and self.budget_spec.pair in self.workloads and self.budget_gb
                    and self.cuda and not self.smoke)


def make_plan(argv) -> ComparePlan:
    """Every input checked, nothing started or written: a bad one is a CookbookError (one line, exit 2)."""
    args = parse_args(argv)
    recipe = catalog.check(args.recipe)
    spec = catalog.spec(recipe)
    cuda = launch.use_cuda(args.device)
    profile = launch.device_profile(cuda)
    workloads = catalog.workloads(recipe)
    if args.workloads is not None:
        wanted = list(dict.fromkeys(w.strip() for w in args.workloads.split(",") if w.strip()))
        unknown = [w for w in wanted if w not in workloads]
        if unknown or not wanted:
            raise CookbookError(f"--workloads {args.workloads!r}: "
                                + (f"no {recipe} pair for {', '.join(unknown)}" if unknown else "names no pair")
                                + f"; choose from {', '.join(workloads)}")
        workloads = wanted
    if args.rounds and args.max_rounds and args.rounds > args.max_rounds:
        raise CookbookError(f"--rounds {args.rounds} is more than --max-rounds {args.max_rounds}: --rounds fixes "
                            "the number of rounds, --max-rounds caps the adaptive one; give one of them")
    max_rounds = args.max_rounds or MAX_ROUNDS
    if args.rounds or args.smoke:
        rounds = Rounds(args.rounds or 1, args.rounds or 1, fixed=True)
    else:
        rounds = Rounds(min(MIN_ROUNDS, max_rounds), max_rounds, fixed=False)
    nproc = None
    distributed = spec.distributed
    multi = nodes.from_args(args, slurm=distributed)  # across machines: flags, or SLURM's for a torchrun recipe
    if distributed:
        gpus = launch.cuda_device_count() if cuda else 0
        # a rank per GPU; one machine with fewer than two runs two ranks, where one alone would share nothing
        nproc = args.nproc_per_node or (gpus if gpus >= 2 or (multi and gpus) else 2)
        if cuda and gpus < nproc:  # NCCL: one GPU per rank; the ranks fall back to gloo (distributed.init)
            print(f"{recipe}: NCCL needs one GPU per rank and this machine has {gpus}: the pairs run as {nproc} CPU "
                  "ranks on gloo (every time is a CPU time; the report says so)", flush=True)
    elif args.nproc_per_node:
        raise CookbookError(f"--nproc-per-node: only a recipe launched by torchrun takes it (ddp), not {recipe}")
    if multi and not nproc:
        raise CookbookError(f"--nnodes: only a recipe launched by torchrun runs across machines (ddp...), not {recipe}")
    if multi:  # every node runs the same launches: a number of rounds they all know beforehand
        if args.max_rounds:
            raise CookbookError("--max-rounds: across machines the rounds are fixed (--rounds N, default "
                                f"{MIN_ROUNDS}): the nodes cannot agree on an adaptive number")
        rounds = Rounds(args.rounds or (1 if args.smoke else MIN_ROUNDS), args.rounds or (1 if args.smoke else
                                                                                           MIN_ROUNDS), fixed=True)
    data = launch.data_flags(args.data, workload_names())  # per workload; a pair takes its workload's
    launch.check_data(args.data, workload_names())
    cpus = launch.cpu_set(args.cpus)
    overrides = spec.defaults
    if args.script_args:  # as each pair's scripts will read them
        for w in workloads:
            check_script_flags(args.script_args, catalog.workload_of(w), overrides, w,
                               prog=f"python -m recipes.{recipe}.{w}_slow", reserved=("out", "trace_dir"))
    reports_dir = Path(args.reports_dir)
    # checked; created once the run starts. An A/A's results stay apart from the recipe's
    results_dir = launch.output_folder(reports_dir, recipe, *(["aa"] if args.aa else []))
    common_flags = ["--device", args.device] + (["--smoke"] if args.smoke else [])
    script_args = args.script_args + (["--profile-steps", "0"] if args.aa else [])  # an A/A needs no evidence
    if spec.memory_snapshot and not args.aa:  # the allocator's history (CUDA) beside each trace
        script_args = script_args + ["--memory-snapshot"]
    return ComparePlan(recipe=recipe, title=spec.title, cuda=cuda, evidence=tuple(spec.evidence),
                parity_rtol=args.parity_rtol, rounds=rounds, workloads=workloads,
                script_flags={w: common_flags + data[catalog.workload_of(w)] + script_args for w in workloads},
                cpus=cpus, reports_dir=reports_dir, results_dir=results_dir,
                traces_dir=reports_dir / "traces" / recipe, smoke=args.smoke,
                command="python -m common.runners.compare " + " ".join(argv),
                budget_spec=None if args.aa else spec.budget, budget_gb=args.memory_budget_gb,
                nproc=nproc, machines=multi, aa=args.aa, profile=profile, no_report=args.no_report,
                not_applicable=catalog.not_applicable(recipe, profile), measure=catalog.measure(recipe),
                fresh=spec.fresh,
                primed=() if args.aa else tuple(spec.prime))


def run_variant(plan: ComparePlan, workload, variant, round_no, read=RunResult) -> launch.Outcome:
    """One process of a twin; round 0 is a pair's priming run (PRIME), unmeasured and unprofiled."""
    return start_variant(plan, workload, variant, round_no, read).outcome()


def start_variant(plan: ComparePlan, workload, variant, round_no, read=RunResult, slot=None) -> launch.Started:
    """run_variant(), started; slot: its place in a pipeline (common.runners.pipeline)."""
    out = plan.results_dir / f"{workload}_{variant}_{f'r{round_no}' if round_no else 'prime'}.json"
    flags = ["--trace-dir", str(plan.traces_dir / f"{workload}_{variant}")] + plan.script_flags[workload]
    if round_no != 1:
        flags += ["--profile-steps", "0", "--probe-steps", "0"]  # the evidence and the parity come from round 1
    elif plan.no_report and not plan.nproc:  # its trace read with the report, afterwards (make finalize)
        flags += ["--trace-later"]
    module = ["-m", f"recipes.{plan.recipe}.{workload}_{'slow' if plan.aa else variant}"]
    if plan.machines:  # one launch across the machines, joined at node 0's endpoint; global rank 0 writes
        module = ["-m", "torch.distributed.run",
                  *plan.machines.torchrun(plan.nproc, f"{plan.recipe}-{workload}-{variant}-r{round_no}"), *module]
    elif plan.nproc:  # one round is one torchrun launch of N ranks; rank 0 writes the result of them all
        module = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(plan.nproc), *module]
    return launch.start_child(module, flags, out, cpus=plan.cpus, rerun=f"make recipe-{plan.recipe}", read=read,
                              extra_env={env.RUN_ENV: f"{variant}:{round_no}"}, slot=slot)


def pipelined(plan: ComparePlan, workload) -> pipeline.Pipeline | None:
    """The rounds' children pipelined where that costs their measurement nothing (common.runners.pipeline):
    not a cold start's fresh interpreters, not torchrun's ranks, not without a core to spare."""
    if plan.fresh or plan.nproc or plan.machines or pipeline.wanted(plan.cpus, plan.cuda):
        return None
    return pipeline.Pipeline(lambda v, n, slot: start_variant(plan, workload, v, n, slot=slot), plan.cpus)


def run_workload(plan: ComparePlan, workload, counter: launch.Counter) -> tuple[dict, list, str]:
    """Rounds of slow and fast until the interval decides (or the cap); the runs, failures, reason."""
    def stop(round_no, done: launch.Rounds) -> str | None:
        """Sequential stopping: after `least` rounds, one look at the interval per round."""
        if plan.machines:  # the other nodes run the fixed schedule: stopping early here would strand them
            return None
        if done.failures or any(r.status == "oom" for runs in done.runs.values() for r in runs):
            return f"stopped after round {round_no}: a run failed or ran out of memory"
        if plan.rounds.fixed or round_no < plan.rounds.least:
            return None
        s = stats.speedup(coldstart.measured(done.runs["slow"], plan.measure),
                          coldstart.measured(done.runs["fast"], plan.measure), looks=plan.rounds.looks)
        print(f"    after {round_no} rounds: {stats.describe(s, 'fast')}", flush=True)
        if stats.decided(s):
            return f"{round_no} rounds: the 95% interval decided ({s.verdict})"
        if round_no == plan.rounds.most:
            return (f"{round_no} rounds, the cap: the interval still includes 1 "
                    f"and is wider than +-{s.floor:.0%}, so no difference is claimed")
        return None

    if workload in plan.primed:
        prime(plan, workload, counter)
    done = launch.rounds(catalog.VARIANTS, lambda v, n: run_variant(plan, workload, v, n), plan.rounds.most, counter,
                         workload, lambda v, n: f"{workload} {v} round {n}", stop, pipelined(plan, workload))
    failures = [outcome.failure(f"{workload} {v}", n) for v, n, outcome in done.failures]
    if gaps := timeline.handoffs([(r.started, r.timeline or {}) for runs in done.runs.values() for r in runs]):
        print(f"    {workload}: between processes the device waited {max(gaps):.2f} s at most "
              f"(median {sorted(gaps)[len(gaps) // 2]:.2f} s) from one's device work to the next's", flush=True)
    return done.runs, failures, done.stopped or plan.rounds.describe()


def prime(plan: ComparePlan, workload, counter: launch.Counter) -> None:
    """The pair's fast twin once before round 1, its result kept apart (<pair>_fast_prime.json): what it
    leaves behind (a compile cache) is what every measured fast process starts from."""
    print(counter(("prime", workload), f"{workload} fast, priming (unmeasured)"), end=" ", flush=True)
    try:
        outcome = run_variant(plan, workload, "fast", 0)
    finally:
        counter.settle(("prime", workload))
    print(outcome.describe(), flush=True)
    if outcome.result is None:  # the rounds' own fast runs fail the same way and say it in the report
        print(f"    {workload}: the priming run failed (log {outcome.log}); the rounds go on", flush=True)


def summarize_workload(runs_by_variant, rule, reason="", looks=1, measure="step") -> WorkloadComparison:
    """Aggregate each variant; where both ran, the speedup over processes of `measure` (each process's ms per step,
    or the time to first step), the parity check, and where a twin compiled its cold start."""
    entry = WorkloadComparison(rounds_reason=reason, measure=measure)
    for v, runs in runs_by_variant.items():
        setattr(entry, v, aggregate(runs))
    if entry.slow and entry.fast and entry.slow.status == entry.fast.status == "ok":
        slow, fast = runs_by_variant["slow"], runs_by_variant["fast"]
        steps = stats.speedup(entry.slow.process_ms, entry.fast.process_ms, looks=looks)
        entry.speedup = steps if measure == "step" else stats.speedup(
            coldstart.measured(slow, measure), coldstart.measured(fast, measure), looks=looks)
        entry.steps = None if measure == "step" else steps
        entry.parity = parity(slow[0], fast[0], rule)
        states = [r.extra.get("compile_cache") for r in fast if r.extra.get("compile_cache")]
        cache = ({**states[0], "loaded": all(s["loaded"] for s in states),
                  "loaded_in": sum(1 for s in states if s["loaded"]), "processes": len(states)} if states else None)
        entry.cold = coldstart.cold_start(slow, fast, looks, fresh=not any(r.forked for r in slow + fast),
                                          cache=cache)
    return entry


def make_counter(plan: ComparePlan) -> launch.Counter:
    """The runs planned and the most that may follow: each pair's rounds (from the least to the cap),
    then, where it runs, the memory-budget search's probes (one each at least)."""
    per_round = len(catalog.VARIANTS)
    stages = {w: (per_round * plan.rounds.least, per_round * plan.rounds.most) for w in plan.workloads}
    stages.update({("prime", w): (1, 1) for w in plan.workloads if w in plan.primed})
    if plan.probes_budget:
        most = budget.most_probes(plan.budget_spec.start)
        stages.update({("budget", v): (min(1, most), most) for v in catalog.VARIANTS})
    return launch.Counter(stages)


def run_all(plan: ComparePlan) -> Comparison:
    launch.ensure_ceiling(plan.cuda)
    counter = make_counter(plan)
    _, least, most = counter.totals()
    print(f"{plan.recipe}: {len(plan.workloads)} workload(s) x "
          f"{'slow/slow (A/A: the slow script in both roles)' if plan.aa else 'slow/fast'}, {plan.rounds.describe()}"
          f"{', then the memory-budget search' if plan.probes_budget else ''}: {least}"
          f"{'' if least == most else f' to {most}'} runs, {'CUDA' if plan.cuda else 'CPU'}"
          f"{' (smoke)' if plan.smoke else ''}, cores {env.cpu_ranges(plan.cpus)}; logs in {plan.results_dir}",
          flush=True)
    comparison = Comparison(recipe=plan.recipe, title=plan.title, evidence_keys=list(plan.evidence), smoke=plan.smoke,
                            device="cuda" if plan.cuda else "cpu", command=plan.command, aa=plan.aa,
                            results_dir=str(plan.results_dir), workloads={}, failures=[],
                            rounds=ComparisonRounds(least=plan.rounds.least, most=plan.rounds.most,
                                                    fixed=plan.rounds.fixed, looks=plan.rounds.looks,
                                                    level=stats.sequential_level(plan.rounds.looks),
                                                    floor=stats.FLOOR, method=stats.METHOD, cpus=plan.cpus))
    for workload in plan.workloads:
        by_variant, failures, reason = run_workload(plan, workload, counter)
        comparison.failures += failures
        comparison.workloads[workload] = summarize_workload(by_variant, plan.rule_for(workload), reason,
                                                            plan.rounds.looks, plan.measure)
    if plan.budget_spec and plan.budget_spec.pair in plan.workloads and plan.budget_gb:
        comparison.budget = search_budget(plan, counter)
    return comparison


def search_budget(plan: ComparePlan, counter: launch.Counter | None = None) -> MemoryBudget:
    """The largest batch each twin trains under the memory budget (CUDA only)."""
    pair, gb = plan.budget_spec.pair, plan.budget_gb
    found = MemoryBudget(pair=pair, budget_gb=gb)
    if not plan.cuda:
        found.note = "the memory budget needs CUDA: not searched on this CPU"
        return found
    if plan.smoke:
        found.note = "not searched in smoke mode"
        return found
    searches = []
    flags = [f for f in plan.script_flags[pair] if f != "--smoke"] + budget.probe_flags(gb)
    for variant in catalog.VARIANTS:
        print(f"largest batch under a {gb:g} GB budget, {pair} {variant}:", flush=True)
        stage = ("budget", variant)

        def announce(batch, variant=variant, stage=stage):
            print(counter(stage, f"budget {pair} {variant} batch {batch}"), end=" ", flush=True)

        try:
            s = budget.search(f"recipes.{plan.recipe}.{pair}_{variant}", flags, plan.results_dir / "budget" / variant,
                              plan.cpus, plan.budget_spec.start, progress=lambda t: print(t, flush=True),
                              announce=announce if counter is not None else None)
        finally:
            if counter is not None:
                counter.settle(stage)
        searches.append(s)
    found.slow, found.fast = searches  # catalog.VARIANTS: slow, then fast
    return found


AA_VERDICT = {"faster": "called FASTER than itself", "slower": "called SLOWER than itself",
              "no meaningful difference": f"no meaningful difference (within +-{stats.FLOOR:.0%})",
              "undecided": stats.WORDS["undecided"]}


def aa_verdicts(plan: ComparePlan, comparison: Comparison) -> list[str]:
    """An A/A's line per pair ("A/A: 1.00x, 0.98-1.02 ..."), printed; the reasons it fails the check."""
    reasons = []
    for workload, entry in comparison.workloads.items():
        s = entry.speedup
        if s is None:
            continue
        n = s.processes[0] if s.processes[0] == s.processes[1] else "/".join(map(str, s.processes))
        interval = (f", {s.low:.2f}-{s.high:.2f} (95% interval, {n} processes each)" if s.low is not None
                    else f" (no interval: {n} process each)")
        parity_word = "parity ok" if entry.parity and entry.parity.ok else "parity FAILED"
        print(f"A/A: {s.ratio:.2f}x{interval}: {AA_VERDICT[s.verdict]}; {parity_word} "
              f"({plan.recipe}/{workload}'s slow script against itself)", flush=True)
        par = entry.parity
        if par and par.masks_shared_until is not None and par.max_rel is not None:
            print(f"A/A: dropout reseeded after the first {par.masks_shared_until} steps and the probe: the windows "
                  f"{par.max_rel:.2%} apart at worst (steps {par.at_step}-{par.at_step + par.window - 1}), the spread "
                  f"a precision change's windows are judged against on this device (tolerance "
                  f"{RESEEDED_RTOL:.0%}: docs/measurement.md)", flush=True)
        if s.verdict in ("faster", "slower"):
            reasons.append(f"A/A FAILED for {plan.recipe}/{workload}: one program was called {s.verdict} than "
                           f"itself ({stats.describe(s, 'A')})")
            print(reasons[-1], file=sys.stderr)
    return reasons


def finish(plan: ComparePlan, comparison: Comparison) -> int:
    """Write comparison.json and the report, print the summary; the exit status."""
    write_result(plan.results_dir / "comparison.json", comparison)
    from common.render import report  # matplotlib is only needed here

    print(report.terminal_table(comparison))
    reasons = []
    if plan.aa:  # no report over the recipe's: the latest A/A beside its runs
        write_result(plan.recipe_results / "comparison.json", comparison)
        reasons += aa_verdicts(plan, comparison)
    elif plan.no_report:  # rendered later, on any machine (make finalize)
        write_result(plan.recipe_results / "comparison.json", comparison)
    elif any(e.slow or e.fast for e in comparison.workloads.values()):
        with file_lock(plan.recipe_results / ".render.lock"):  # the md, plot and diffs come from one run
            written = report.render(comparison, plan.reports_dir)
            write_result(plan.recipe_results / "comparison.json", comparison)  # the latest, for make report-<recipe>
        from common.render import index

        with file_lock(plan.reports_dir / "results" / ".index.lock"):  # one writer of reports/README.md
            written += index.render(plan.reports_dir)
        print("report: " + ", ".join(str(p) for p in written), flush=True)
    else:
        print(f"no variant finished: {plan.reports_dir / (plan.recipe + '.md')} is left as it was", flush=True)
    for workload, entry in comparison.workloads.items():
        if entry.parity and not entry.parity.ok:
            reasons.append(f"parity FAILED for {plan.recipe}/{workload}: {parity_failure(entry.parity)}")
            print(reasons[-1], file=sys.stderr)
    for f in comparison.failures:
        reasons.append(f"{f.what} round {f.round} failed (exit {f.returncode}; log {f.log})")
        print(f"{f.what} round {f.round} failed (exit {f.returncode}); last lines of {f.log}:", file=sys.stderr)
        print("\n".join("    " + line for line in f.tail), file=sys.stderr)
    if comparison.failures or len(reasons) > 1:  # the last line says why, whatever came before it
        print(f"{plan.recipe}: exit status 1: " + "; ".join(reasons), file=sys.stderr)
    return 1 if reasons else 0


def not_applicable(plan: ComparePlan) -> int:
    """The technique does not exist on this device: said in the report and on the terminal, not timed."""
    comparison = Comparison(recipe=plan.recipe, title=plan.title, evidence_keys=list(plan.evidence), smoke=plan.smoke,
                            device="cuda" if plan.cuda else "cpu", command=plan.command, aa=plan.aa,
                            results_dir=str(plan.results_dir), workloads={}, failures=[],
                            not_applicable=plan.not_applicable, profile=plan.profile)
    print(f"{plan.recipe}: {plan.not_applicable}; nothing timed", flush=True)
    write_result(plan.results_dir / "comparison.json", comparison)
    if not plan.aa:
        from common.render import report

        with file_lock(plan.recipe_results / ".render.lock"):
            written = report.render(comparison, plan.reports_dir)
            write_result(plan.recipe_results / "comparison.json", comparison)
        print("report: " + ", ".join(str(p) for p in written), flush=True)
    return 0


KEPT_IN = "reports/local/results"  # this invocation's results folder's parent, once its plan is made


def compare(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and catalog.served(argv[0]):  # its twins are servers: measured under load, not step by step
        from common.runners import serve

        return serve.serve_recipe(argv)
    plan = make_plan(argv)
    global KEPT_IN
    KEPT_IN = env.shown_path(plan.results_dir.parent)  # where Ctrl-C says the finished runs are
    if plan.machines:  # every node there before anything is written, or one line that names the endpoint
        print(f"{plan.recipe}: {plan.machines.describe()}; waiting up to {plan.machines.join_timeout_s} s for "
              "every node", flush=True)
        nodes.join_check(plan.machines, plan.nproc, "cuda" if plan.cuda else "cpu")
    launch.make_folder(plan.results_dir, plan.reports_dir)  # every input has passed: now the first write
    if plan.not_applicable and not (plan.machines and plan.machines.node_rank):
        return not_applicable(plan)
    with launch.warm_server(plan.cuda, catalog.compiles(plan.recipe), wanted=not plan.fresh):
        if plan.machines and plan.machines.node_rank:  # node 0 writes the report; this node runs its share
            return nodes.follow(lambda w, v, r: run_variant(plan, w, v, r, read=None), plan.workloads,
                                plan.rounds.most, launch.alternating)
        with file_lock(plan.recipe_results / ".running.lock", blocking=False) as alone:
            if not alone:
                print(f"warning: another {plan.recipe} comparison is running: the two disturb each other's "
                      "timings (their files stay apart)", file=sys.stderr, flush=True)
            comparison = run_all(plan)
    return finish(plan, comparison)


def _terminate(signum, frame):
    raise KeyboardInterrupt  # a kill ends like Ctrl-C: the child is stopped, nothing half-written


def main():
    signal.signal(signal.SIGTERM, _terminate)
    try:
        sys.exit(compare())
    except CookbookError as e:
        exit_with(e, "common.runners.compare")
    except KeyboardInterrupt:
        print(f"\ninterrupted: the previous report is left as it was; finished runs are kept in {KEPT_IN}/",
              file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
