"""`make doctor FLAGS='--try'`: each fix the diagnosis found applicable (or each one named) applied to
the user's own script from outside and measured there, the way a recipe is measured.

Every run is the doctor's child (common.measure.observer) on the unmodified script, in a fresh
process, with or without `--fix NAME`. The unchanged script and every fix run once per round, in
alternating order (launch.rounds), from MIN_ROUNDS rounds until every fix's speedup interval
decides (stats.speedup, with the sequential looks of a recipe) or the budget ends: it bounds the wall
time, so no round starts that would not fit and a run still going when it ends is stopped (the round
is cut, and the report says so; an interval and the script's own noise need two rounds). Round 1 is
profiled: from it each fix is proven to have taken effect (analysis.fixes.took_effect), or reported
as not applied and run no more; a crash is a row with its last line. Parity: the losses of round 1's
fixed run against the unchanged one, by the fix's recipe's rule, widened to twice the difference of
two unchanged runs where the script is not deterministic. Then the fixes that won run together.
"""
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import catalog
from common.analysis import coldstart, stats
from common.analysis import fixes as catalog_fixes
from common.analysis.aggregate import aggregate, early_tolerance, parity, parity_failure
from common.analysis.doctor import busy_first, host_reads
from common.analysis.fixes import Fix
from common.analysis.results import read_result
from common.analysis.results_doctor import Observation, Trial, Trials
from common.runners import launch

MIN_ROUNDS, MAX_ROUNDS = 3, 10
PLANNED_ROUNDS = MIN_ROUNDS + 2  # what the default budget plans for: the least that decide, and two more looks
# a try's run against the doctor's own: its fix, the profiled round, the runner's reading (tests/plain/loader_bound.py
# on a 2-core CPU VM: 8.8 s a run against the doctor's 6.4 s, 2026-11-27)
RUN_COST = 1.4
TRY_TIME = 3.0  # seconds of timed steps at most in each run (the doctor's --time, capped)
CAP_S = 600  # --try's default budget at most: a sitting's share (a slow-starting script would plan an hour)
UNCHANGED, TOGETHER = "unchanged", "together"
# what cannot be applied from outside: a host sync the script asks for in a loop, found in its code


def wanted(text: str | None, test_fixes: bool = False) -> list[str] | None:
    """--try's value as fix names: None for "the applicable ones", every fix for "all"; an unknown name
    is a CookbookError that lists the valid ones."""
    from common.cli import pick

    names = list(catalog_fixes.known(test_fixes))
    if not text:
        return None
    if text.strip() == "all":
        return [n for n in names if n in catalog_fixes.FIXES]
    return pick("--try", text, names, "fix")


@dataclass
class TrialPlan:
    """One --try: what runs, with what flags, where, within what budget."""
    script: Path
    script_args: list[str]
    flags: list[str]  # the doctor's flags for the child, less --profile-steps
    profile_steps: int
    out_dir: Path
    cpus: list
    budget_s: float
    started: float = field(default_factory=time.perf_counter)
    cwd: Path | None = None  # the folder the script runs in (the runner's --cwd, else the script's own)
    observed: dict = field(default_factory=dict)  # (arm, round) -> Observation, of the stage under way
    stage: str = "each"  # "each" fix against the unchanged script, then the winners "together"

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)


def run_arm(plan: TrialPlan, arm: tuple[str, ...], round_no: int) -> launch.Outcome:
    """The script once, with the fixes of `arm` (none: unchanged): round 1 profiled."""
    name = "+".join(arm) or UNCHANGED
    out = plan.out_dir / plan.stage / f"{name}_r{round_no}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    profile = max(plan.profile_steps, 2) if round_no == 1 else 0  # round 1's trace proves the fix took effect
    flags = [*plan.flags, "--profile-steps", str(profile), "--trace-dir", str(plan.out_dir / "traces" / name),
             *[x for fix in arm for x in ("--fix", fix)], "--cwd", str(plan.cwd or plan.script.parent),
             "--", str(plan.script), *plan.script_args]
    if plan.left() <= 1:  # the budget bounds the wall time: no run starts once it has ended
        return launch.Outcome("cut", None, 0.0, out.with_suffix(".log"), 0, ["the budget had ended"])
    outcome = launch.child(["-m", "common.measure.observer"], flags, out, cpus=plan.cpus, read=None,
                           timeout=plan.left())
    if outcome.kind != "ok":
        return outcome
    obs = read_result(out, Observation, "make doctor SCRIPT=... FLAGS='--try'")
    if obs.result is None:  # too few steps: as good as a failure for a timing
        return launch.Outcome("failed", None, outcome.seconds, outcome.log, 0,
                              [f"the script ended after {obs.steps_seen} steps, too few to time"])
    plan.observed[arm, round_no] = obs
    return launch.Outcome("ok", obs.result, outcome.seconds, outcome.log, 0, [])


def measure(plan: TrialPlan, arms: list[tuple[str, ...]], rules: dict, counter: launch.Counter,
            stage: str) -> launch.Rounds:
    """Rounds of the unchanged script and every arm, until each arm's interval decides or the budget
    ends. An arm that crashed or did not take effect in round 1 runs no more, nor one whose losses
    left the unchanged script's (judged once two unchanged runs give the script's own noise): its
    row fails whatever its speed."""
    looks = MAX_ROUNDS - MIN_ROUNDS + 1
    dropped = set()
    plan.stage = stage

    def items(round_no, done):
        dropped.update(arm for arm, _, _ in done.failures)
        if round_no == 2:  # round 1 says which arms did not take effect
            dropped.update(arm for arm in arms if not _took_effect(plan, arm)[0])
        if round_no == 3:
            noisy = noise(plan, rules[arms[0]])[1:3]
            dropped.update(arm for arm in arms if judge_parity(plan, arm, rules[arm], noisy)[0] is False)
        return [()] + [arm for arm in arms if arm not in dropped]

    def stop(round_no, done):
        live = [arm for arm in arms if arm not in dropped and arm in done.runs]
        if not live or () not in done.runs:
            return f"stopped after round {round_no}: nothing left to time"
        per_run = (time.perf_counter() - plan.started) / max(1, sum(map(len, done.runs.values())))
        decided = round_no >= MIN_ROUNDS and all(stats.decided(_speedup(done, arm, looks)) for arm in live)
        if decided:
            return f"{round_no} rounds: every interval decided"
        if round_no == MAX_ROUNDS:
            return f"{round_no} rounds, the cap"
        if plan.left() < per_run * (len(live) + 1):  # the next round would not fit: none starts
            return f"{round_no} rounds: the {plan.budget_s:.0f} s budget ended"
        return None

    def label(arm, round_no):
        return f"{'+'.join(arm) or UNCHANGED} round {round_no} ({max(0, plan.left()):.0f} s of the budget left)"

    return launch.rounds(items, lambda arm, n: run_arm(plan, arm, n), MAX_ROUNDS, counter, stage, label, stop)


def _speedup(done: launch.Rounds, arm, looks: int):
    """The arm against the unchanged script, over the rounds both ran."""
    base, fixed = done.runs.get((), []), done.runs.get(arm, [])
    n = min(len(base), len(fixed))
    return stats.speedup([r.timing.summary.mean_ms for r in base[:n]],
                         [r.timing.summary.mean_ms for r in fixed[:n]], looks=looks)


def _took_effect(plan: TrialPlan, arm) -> tuple[bool, str]:
    obs = plan.observed.get((arm, 1))
    if obs is None:
        return False, "round 1 did not finish"
    proofs = [catalog_fixes.took_effect(catalog_fixes.known(True)[name], obs) for name in arm]
    return all(ok for ok, _ in proofs), "; ".join(why for _, why in proofs)


ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*")
PROGRESS = re.compile(r"\d+%\||it/s\]|s/it\]|━")  # tqdm's and rich's progress bars


def crash_line(tail: list[str]) -> str | None:
    """The script's own last words: its exception's line, else its last line that is not a progress
    bar (tqdm redraws with carriage returns) nor the doctor's own."""
    lines = [part.strip() for line in tail for part in line.split("\r") if part.strip()]
    lines = [line for line in lines if not line.startswith("doctor: ")]
    errors = [line for line in lines if ERROR_LINE.match(line)]
    plain = [line for line in lines if not PROGRESS.search(line)]
    return (errors or plain or [None])[-1]


def noise(plan: TrialPlan, rule: dict) -> tuple[bool | None, float, float, str]:
    """(deterministic, early noise, window noise, in words) from the first two unchanged runs."""
    a, b = plan.observed.get(((), 1)), plan.observed.get(((), 2))
    if a is None or b is None:
        return None, 0.0, 0.0, ("One unchanged run only: the script's own run-to-run noise is unknown, and each "
                                "fix's losses are held to its recipe's rule alone")
    if not (a.result.losses and b.result.losses):  # nothing to compare is not "the same losses"
        return None, 0.0, 0.0, ("No losses seen in the unchanged runs (no backward the doctor could see): the "
                                "script's determinism is unknown, and parity compares nothing")
    p = parity(a.result, b.result, {**rule, "early_steps": 5})
    if not p.early_max_rel and not p.max_rel:
        return True, 0.0, 0.0, "The script is deterministic: two unchanged runs gave the same losses, step by step"
    return False, p.early_max_rel or 0.0, p.max_rel or 0.0, (
        f"The script is NOT deterministic: two unchanged runs' losses differ by up to {pct(p.early_max_rel)} step "
        f"by step and {pct(p.max_rel)} of the initial loss over {p.window}-step windows; each fix's tolerance is "
        "widened to twice that")


def pct(x: float | None) -> str:
    """A share as a percentage with two significant digits: 0.0012%, 1.5%, 12%."""
    return "0%" if not x else f"{x * 100:.2g}%"


def judge_parity(plan: TrialPlan, arm, rule: dict, noisy: tuple[float, float]) -> tuple[bool | None, str]:
    base, fixed = plan.observed.get(((), 1)), plan.observed.get((arm, 1))
    if base is None or fixed is None or not base.result.losses or not fixed.result.losses:
        return None, "no losses to compare (the script passed none to backward)"
    batch = base.result.config.batch_size
    widened = {**rule, "early_rtol": max(early_tolerance(rule, batch), 2 * noisy[0]), "at_batch": 1,
               "rtol": max(rule["rtol"], 2 * noisy[1])}
    p = parity(base.result, fixed.result, widened)
    if not p.ok:
        return False, parity_failure(p)
    return True, (f"{p.steps} steps' losses: the first {p.early_steps} within {pct(p.early_max_rel)} "
                  f"(tolerance {pct(p.early_rtol)}), {p.window}-step means within {pct(p.max_rel)} of the initial "
                  f"loss (tolerance {pct(p.rtol)})")


def row(plan: TrialPlan, done: launch.Rounds, arm, fix: Fix | None, rule: dict, noisy) -> Trial:
    trial = Trial(fix=fix.name if fix else TOGETHER, recipe=fix.recipe if fix else "",
                  how=fix.how if fix else "the winners above, all at once", verdict="", fixes=list(arm),
                  lines=lines_to_add(fix) if fix else [])
    crashed = next((o for a, _, o in done.failures if a == arm), None)
    if crashed is not None:  # the script's own last words, not the doctor's line after them
        last = crash_line(crashed.tail) or f"exit {crashed.returncode}"
        trial.verdict, trial.why = "crashed", f"{last[:300]} (log: {crashed.log})"
        return trial
    if arm not in done.runs:
        trial.verdict, trial.why = "not tried", "the budget ended before it ran"
        return trial
    ok, proof = _took_effect(plan, arm)
    if not ok:
        trial.verdict, trial.why = "not applied", proof
        return trial
    trial.why = proof
    fixed = plan.observed[arm, 1]
    if "workers" in arm and fixed.loaders:
        others = [n for n in arm if n != "workers"]
        trial.label = " + ".join([f"{fixed.loaders[0].num_workers} loader workers", *others])
    s = _speedup(done, arm, MAX_ROUNDS - MIN_ROUNDS + 1)
    trial.speedup = s
    trial.verdict = stats.verdict_words(s)
    n = len(done.runs[arm])
    before, after = aggregate(done.runs[()][:n]), aggregate(done.runs[arm])
    trial.memory_kind, trial.memory_before_mb, trial.memory_after_mb = (after.memory.kind, before.memory.peak_mb,
                                                                        after.memory.peak_mb)
    trial.break_even = break_even(done.runs[()][:n], done.runs[arm], fixed)
    trial.parity_ok, trial.parity = judge_parity(plan, arm, rule, noisy)
    if trial.parity_ok is False:
        trial.verdict = f"{trial.verdict}, but parity FAILED"
    return trial


def break_even(base: list, fixed_runs: list, fixed: Observation):
    """Where the fix compiles: after how many steps its faster steps repay its compilation, against an
    epoch of the script's DataLoader where its dataset has a length (None where nothing compiled)."""
    if not coldstart.compiled(fixed_runs):
        return None
    epoch = next((ld.batches_per_epoch for ld in fixed.loaders if ld.batches_per_epoch), None)
    return coldstart.break_even([coldstart.one_time_s(r.timing) for r in base],
                                [coldstart.one_time_s(r.timing) for r in fixed_runs],
                                coldstart.measured(base, "step"), coldstart.measured(fixed_runs, "step"), epoch)


def lines_to_add(fix: Fix) -> list[str]:
    """What the fix is in the user's own script (its recipe's diff shows it in the cookbook's)."""
    return catalog_fixes.LINES.get(fix.name, [])


def headline(rows: list[Trial], cpu: bool) -> str:
    won = [t for t in rows if t.verdict == "faster"]
    where = " (CPU run)" if cpu else ""
    if not any(t.speedup for t in rows):
        return f"Measured on your script: no fix could be timed (each one's row says why){where}"
    if not won and any(t.speedup and stats.too_noisy(t.speedup) for t in rows):
        return (f"Measured on your script: too noisy to decide: the processes' times disagreed beyond what the "
                f"rounds run could resolve (try {stats.NOISY_ADVICE}){where}")
    if not won:
        return f"Measured on your script: no fix tried was faster{where}"
    best = max(won, key=lambda t: t.speedup.ratio)
    return f"Measured on your script: {best.label or ' + '.join(best.fixes)} {stats.describe(best.speedup)}{where}"


def busiest(done: launch.Rounds | None):
    """The load of the try run that others disturbed most (the headline's ratios come from them)."""
    loads = [r.load for runs in (done.runs.values() if done else []) for r in runs if r.load is not None]
    return max(loads, key=lambda x: x.others_cores, default=None)


def arms_of(obs: Observation, names: list[str] | None, test_fixes: bool = False) -> tuple[list[tuple], dict]:
    """(the fixes to time, one arm each; the rows of those that are not: why not) for the fixes asked
    for (None: every fix, each timed where the diagnosis found it applicable)."""
    known = catalog_fixes.known(test_fixes)
    rows, arms = {}, []
    for name in names if names is not None else list(catalog_fixes.FIXES):  # every fix gets its row
        fix = known[name]
        why = catalog_fixes.applies(fix, obs)
        if why is None:
            arms.append((name,))
            continue
        verdict = ("not applied" if why.startswith("not applied") else "not tried" if why.startswith("a GPU fix")
                   else "not applicable")
        rows[name] = Trial(fix=name, recipe=fix.recipe, how=fix.how, verdict=verdict,
                           why=why.removeprefix("not applied: "), lines=lines_to_add(fix))
    return arms, rows


def run_cost(obs: Observation, process_s: float) -> float:
    """What one try's run costs: the doctor's own run (process_s), its timed stretch capped at TRY_TIME,
    and a share more for what a try adds (RUN_COST)."""
    timed = sum(obs.result.timing.step_ms) / 1000 if obs.result and obs.result.timing else 0.0
    return max(1.0, (process_s - timed + min(timed, TRY_TIME)) * RUN_COST)


def budget(obs: Observation, names: list[str] | None, process_s: float, test_fixes: bool = False) -> tuple[float, str]:
    """--try's default budget, sized from the measured run so that its verdicts can decide: every arm
    and the unchanged script for PLANNED_ROUNDS rounds (MIN_ROUNDS are the least that decide; two more
    for the sequential looks), then the winners together for MIN_ROUNDS, each run at run_cost(); at
    most CAP_S. (seconds, how it was sized)."""
    arms, _ = arms_of(obs, names, test_fixes)
    run_s = run_cost(obs, process_s)
    runs = (len(arms) + 1) * PLANNED_ROUNDS + (2 * MIN_ROUNDS if len(arms) > 1 else 0)
    said = (f"{len(arms)} fix(es) and the unchanged script, {PLANNED_ROUNDS} rounds each"
            + (", then the winners together" if len(arms) > 1 else "") + f", at about {run_s:.1f} s a run "
            "(the doctor's own run, and a share more for what a try adds)")
    if runs * run_s > CAP_S and arms:
        said += (f"; that is {runs * run_s:.0f} s, capped at {CAP_S} s, which holds about "
                 f"{rounds_in(CAP_S, len(arms), run_s)} rounds")
        return float(CAP_S), said
    return (runs * run_s if arms else 0.0), said


def rounds_in(budget_s: float, arms: int, run_s: float) -> int:
    """Whole rounds of every arm and the unchanged script that budget_s holds."""
    return int(budget_s // ((arms + 1) * run_s))


def too_small(obs: Observation, names: list[str] | None, process_s: float, budget_s: float,
              test_fixes: bool = False) -> str | None:
    """Why budget_s cannot decide a verdict (fewer rounds than MIN_ROUNDS), said before anything runs;
    None where it can."""
    arms, _ = arms_of(obs, names, test_fixes)
    if not arms:
        return None
    held = rounds_in(budget_s, len(arms), run_cost(obs, process_s))
    if held >= MIN_ROUNDS:
        return None
    return (f"a budget of {budget_s:.0f} s holds about {held} round(s) of {len(arms)} fix(es) and the unchanged "
            f"script; {MIN_ROUNDS} are the least that decide, so no verdict can say faster or slower "
            f"(about {MIN_ROUNDS * (len(arms) + 1) * run_cost(obs, process_s):.0f} s would do)")


def run(obs: Observation, names: list[str] | None, plan: TrialPlan, test_fixes: bool = False) -> Trials:
    """Every fix asked for (None: those the diagnosis found applicable) tried on the script."""
    known = catalog_fixes.known(test_fixes)
    asked = names if names is not None else list(catalog_fixes.FIXES)
    arms, rows = arms_of(obs, names, test_fixes)
    rules = {arm: catalog.parity_rule(known[arm[0]].recipe, known[arm[0]].pair) for arm in arms}
    counter = launch.Counter({"each": (len(arms + [()]) * MIN_ROUNDS, len(arms + [()]) * MAX_ROUNDS)})
    print(f"doctor --try: {', '.join(a[0] for a in arms) or 'nothing to try'} against the unchanged script, "
          f"round after round until each interval decides (at most {MAX_ROUNDS}; 2 give an interval, "
          f"{MIN_ROUNDS} are the least that decide), within {plan.budget_s:.0f} s of wall time", flush=True)
    stopped, done = "nothing to try", None
    if arms:
        done = measure(plan, arms, rules, counter, "each")
        stopped = done.stopped or f"{MAX_ROUNDS} rounds"
    deterministic, early_noise, window_noise, noise_words = noise(plan, rules[arms[0]] if arms else {
        "early_steps": 5, "window": 10, "rtol": 1.0})
    for arm in arms:
        rows[arm[0]] = row(plan, done, arm, known[arm[0]], rules[arm], (early_noise, window_noise))
    ordered = [rows[n] for n in asked if n in rows]
    winners = tuple(t.fix for t in ordered if t.verdict == "faster")
    if len(winners) > 1:
        if plan.left() > 0:
            print(f"doctor --try: the winners together ({', '.join(winners)})", flush=True)
            rule = max((rules[(n,)] for n in winners), key=lambda r: r["rtol"])  # the loosest of theirs
            together = measure(plan, [winners], {winners: rule},
                               launch.Counter({"together": (2 * MIN_ROUNDS, 2 * MAX_ROUNDS)}), "together")
            ordered.append(row(plan, together, winners, None, rule, (early_noise, window_noise)))
        else:
            ordered.append(Trial(fix=TOGETHER, recipe="", how="the winners above, all at once", verdict="not tried",
                                 why="the budget ended", fixes=list(winners)))
    rounds = max((len(v) for v in done.runs.values()), default=0) if done else 0
    return Trials(budget_s=plan.budget_s, spent_s=time.perf_counter() - plan.started, rounds=rounds, stopped=stopped,
                  deterministic=deterministic, noise=noise_words, rows=ordered, manual=host_reads(obs),
                  headline=busy_first(obs, headline(ordered, obs.result.device != "cuda"), busiest(done)))
