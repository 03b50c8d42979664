"""The slow-vs-fast runner behind `make recipe-<name>`.

    python -m common.compare amp [--smoke] [--rounds N] [--device auto|cuda|cpu] [--data synthetic]

Every variant runs in its own process; slow and fast alternate for several rounds (who goes first
alternates too) so that drift hits both; round 1 also profiles. Then: a parity check of the loss
trajectories, a terminal summary, and the report (reports/<recipe>.md, plot, side-by-side diffs).
"""
import argparse
import contextlib
import fcntl
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

import torch

from common import env, mechanism, memory, recipes, stats
from common.cli import OneLineParser, positive_int, split_passthrough
from common.errors import CookbookError, exit_with
from common.harness import EXIT_OOM
from common.presets import WORKLOADS
from common.results import read_result, write_result

LOG_TAIL = 15


def parse_args(argv):
    p = OneLineParser(prog="python -m common.compare", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", help="recipe folder name under recipes/")
    p.add_argument("--rounds", type=positive_int, help="alternating rounds (default 3 on CUDA, 2 on CPU, 1 with --smoke)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--workloads", help=f"comma-separated subset of {','.join(WORKLOADS)} (default: every pair)")
    p.add_argument("--data", action="append", default=[], metavar="synthetic|WORKLOAD=PATH",
                   help="data for the scripts: 'synthetic' for all, or churn=FILE.csv / resnet18=CIFAR_ROOT (repeatable)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: a quick CPU check of the whole pipeline")
    p.add_argument("--parity-rtol", type=float, metavar="FRACTION",
                   help="override the recipe's trajectory tolerance (windowed mean loss difference as a fraction "
                        "of the initial loss, e.g. 0.01)")
    p.add_argument("--reports-dir", default=str(env.REPO_ROOT / "reports"), help="where the report goes (default reports/)")
    p.epilog = "Flags after -- go to every script, e.g. -- --steps 50 --batch-size 64"
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    return args


def data_flags(values, workloads):
    flags = {w: [] for w in workloads}
    for value in values:
        if value == "synthetic":
            for w in workloads:
                flags[w] = ["--data", "synthetic"]
            continue
        workload, sep, path = value.partition("=")
        if not sep or workload not in WORKLOADS:
            raise CookbookError(f"--data {value!r}: use 'synthetic' or WORKLOAD=PATH with WORKLOAD one of {', '.join(WORKLOADS)}")
        if workload in flags:
            flags[workload] = ["--data", path]
    return flags


@dataclass
class Plan:
    """Everything one comparison runs: validated from the command line before anything starts."""
    recipe: str
    title: str
    parity_rule: dict  # the recipe's rule; PARITY["workloads"][w] may override keys per workload
    evidence: tuple  # the metric names this recipe's technique must move (common.mechanism)
    cuda: bool
    rounds: int
    workloads: list
    script_flags: dict  # workload -> flags for its scripts (data, --smoke, pass-through)
    reports_dir: Path
    results_dir: Path  # this invocation's own folder under reports/results/<recipe>/
    traces_dir: Path
    smoke: bool
    device: str
    command: str
    parity_rtol: float | None = None  # --parity-rtol: one tolerance for every workload

    def rule_for(self, workload: str) -> dict:
        rule = {k: v for k, v in self.parity_rule.items() if k != "workloads"}
        rule.update(self.parity_rule.get("workloads", {}).get(workload, {}))
        return {**rule, **({"rtol": self.parity_rtol} if self.parity_rtol is not None else {})}

    @property
    def recipe_results(self) -> Path:
        return self.results_dir.parent


def make_plan(argv) -> Plan:
    args = parse_args(argv)
    recipe = recipes.check(args.recipe)
    settings = recipes.settings(recipe)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise CookbookError("--device cuda: CUDA is not available here; use --device cpu or --device auto")
    cuda = args.device != "cpu" and torch.cuda.is_available()
    workloads = recipes.workloads(recipe)
    if args.workloads:
        wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in workloads]
        if unknown:
            raise CookbookError(f"--workloads: no {recipe} pair for {', '.join(unknown)}; choose from {', '.join(workloads)}")
        workloads = wanted
    data = data_flags(args.data, workloads)
    common_flags = ["--device", args.device] + (["--smoke"] if args.smoke else [])
    reports_dir = Path(args.reports_dir)
    # one folder per invocation: two runs at once never read or overwrite each other's results
    plan = Plan(recipe=recipe, title=settings.TITLE, cuda=cuda, evidence=tuple(getattr(settings, "EVIDENCE", ())),
                parity_rule=settings.PARITY, parity_rtol=args.parity_rtol,
                rounds=args.rounds or (1 if args.smoke else 3 if cuda else 2), workloads=workloads,
                script_flags={w: common_flags + data[w] + args.script_args for w in workloads},
                reports_dir=reports_dir, results_dir=reports_dir / "results" / recipe / env.run_id(),
                traces_dir=reports_dir / "traces" / recipe, smoke=args.smoke, device=args.device,
                command="python -m common.compare " + " ".join(argv))
    for folder in (plan.results_dir, plan.traces_dir):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CookbookError(f"--reports-dir {reports_dir}: cannot write ({e.strerror}); choose a writable folder") from None
    return plan


def run_variant(plan: Plan, workload, variant, round_no):
    """One variant in its own process; its output goes to a log next to its result."""
    out = plan.results_dir / f"{workload}_{variant}_r{round_no}.json"
    log = out.with_suffix(".log")
    cmd = [sys.executable, "-m", f"recipes.{plan.recipe}.{workload}_{variant}", "--out", str(out),
           "--trace-dir", str(plan.traces_dir / f"{workload}_{variant}")] + plan.script_flags[workload]
    if round_no > 1:
        cmd += ["--profile-steps", "0"]  # the evidence comes from round 1
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=env.REPO_ROOT, stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    elapsed = time.perf_counter() - t0
    if proc.returncode == EXIT_OOM and out.exists():
        return read_result(out), None, elapsed  # out of memory: a result with status "oom"
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-LOG_TAIL:]
        return None, {"workload": workload, "variant": variant, "round": round_no,
                      "returncode": proc.returncode, "log": str(log), "tail": tail}, elapsed
    return read_result(out), None, elapsed


def parity(slow, fast, rule):
    """Do the twins train the same? Both see the same weights and batches, so:
    - early: the first steps agree step by step (a wrong cast or a missing loss scale shows at once);
    - trajectory: means over windows of steps stay close, measured against the initial loss so that
      losses near zero do not blow the ratio up (a run that diverges or stops learning shows here);
    - every loss of the fast twin is finite."""
    a, b = slow["losses"], fast["losses"]
    if not a or len(a) != len(b):
        return {"ok": False, "max_rel": None, "rtol": rule["rtol"], "why": f"loss trajectories of {len(a)} and {len(b)} steps"}
    k = min(rule["early_steps"], len(a))  # 0: the twins' data differ step by step, compare windows only
    early = [abs(y - x) / max(abs(x), 1e-6) for x, y in zip(a[:k], b[:k])] or [0.0]
    w = min(rule["window"], len(a))
    scale = max(abs(fmean(a[:w])), 1e-6)
    starts = list(range(0, len(a) - w + 1, w))[:rule.get("max_windows")]  # max_windows: only the first ones
    windows = [abs(fmean(b[i:i + w]) - fmean(a[i:i + w])) / scale for i in starts]
    worst = max(range(len(windows)), key=windows.__getitem__)
    finite = all(math.isfinite(v) for v in b)
    return {"ok": finite and max(early) <= rule["early_rtol"] and windows[worst] <= rule["rtol"],
            "early_max_rel": max(early), "early_steps": k, "early_rtol": rule["early_rtol"],
            "max_rel": windows[worst], "at_step": worst * w, "window": w, "rtol": rule["rtol"],
            "steps": len(a), "finite": finite}


def parity_failure(par) -> str:
    if par.get("max_rel") is None:
        return par["why"]
    if not par["finite"]:
        return "the fast twin's loss is not finite (NaN or inf)"
    if par["early_max_rel"] > par["early_rtol"]:
        return (f"the first {par['early_steps']} steps' losses differ by up to {par['early_max_rel']:.2%} "
                f"(tolerance {par['early_rtol'] * 100:.4g}%)")
    return (f"the {par['window']}-step mean loss differs by {par['max_rel']:.2%} of the initial loss at steps "
            f"{par['at_step']}-{par['at_step'] + par['window'] - 1} (tolerance {par['rtol'] * 100:.4g}%)")


def aggregate(runs):
    """Pool the timed steps of every round of one variant (or report its out-of-memory)."""
    first = runs[0]
    oom = next((r for r in runs if r["status"] == "oom"), None)
    if oom:
        return {"status": "oom", "oom": oom["oom"], "config": oom["config"], "env": oom["env"],
                "data_source": oom["data_source"], "notices": oom["notices"], "warnings": []}
    pooled = [ms for r in runs for ms in r["timing"]["step_ms"]]
    per_round = lambda key: [r["timing"][key] for r in runs if r["timing"].get(key) is not None]  # noqa: E731
    return {
        "status": "ok",
        "step_ms": pooled,
        "stats": stats.summarize(pooled, first["config"]["batch_size"]),
        "round_medians_ms": [r["timing"]["median_ms"] for r in runs],
        "warmup_s": [r["timing"]["warmup_s"] for r in runs],
        # host-side evidence: the median over rounds (data wait, CPU time, the first step's compile)
        "host": {k: sorted(per_round(k))[len(per_round(k)) // 2] if per_round(k) else None
                 for k in mechanism.HOST_KEYS},
        "memory": max((r["memory"] for r in runs), key=memory.headline_mb),
        "evidence": first["evidence"],
        "flops_per_step": first.get("flops_per_step"),
        "gpu_monitor": first.get("gpu_monitor"),
        "config": first["config"],
        "data_source": first["data_source"],
        "notices": first["notices"],
        "warnings": sorted({w for r in runs for w in r.get("warnings", [])}),
        "env": first["env"],
    }


def summarize_workload(runs_by_variant, rule):
    """Aggregate each variant; where both ran, the speedup, its significance and the parity check."""
    entry = {v: aggregate(runs) for v, runs in runs_by_variant.items()}
    slow, fast = entry.get("slow"), entry.get("fast")
    if slow and fast and slow["status"] == fast["status"] == "ok":
        entry.update(stats.compare_medians(slow.pop("step_ms"), fast.pop("step_ms")))
        entry["parity"] = parity(runs_by_variant["slow"][0], runs_by_variant["fast"][0], rule)
        entry["parity"]["what"] = rule["what"]
    for v in entry.values():
        if isinstance(v, dict):
            v.pop("step_ms", None)
    return entry


@contextlib.contextmanager
def file_lock(path: Path, blocking: bool = True):
    """An advisory lock (flock) on path; yields False when non-blocking and someone else holds it."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_all(plan: Plan):
    """Slow and fast alternate, round after round, and who goes first alternates too."""
    total = len(plan.workloads) * plan.rounds * 2
    print(f"{plan.recipe}: {len(plan.workloads)} workload(s) x {plan.rounds} round(s) x slow/fast = {total} runs, "
          f"{'CUDA' if plan.cuda else 'CPU'}{' (smoke)' if plan.smoke else ''}; logs in {plan.results_dir}", flush=True)
    done, failures, by_variant = 0, [], {}
    for workload in plan.workloads:
        for round_no in range(1, plan.rounds + 1):
            for variant in recipes.VARIANTS if round_no % 2 else recipes.VARIANTS[::-1]:
                done += 1
                print(f"[{done}/{total}] {workload} {variant} round {round_no} ...", end=" ", flush=True)
                result, failure, elapsed = run_variant(plan, workload, variant, round_no)
                if failure:
                    failures.append(failure)
                    print(f"FAILED (exit {failure['returncode']}) after {elapsed:.1f} s", flush=True)
                elif result["status"] == "oom":
                    by_variant.setdefault((workload, variant), []).append(result)
                    print(f"out of memory at batch {result['oom']['batch_size']} after {elapsed:.1f} s", flush=True)
                else:
                    by_variant.setdefault((workload, variant), []).append(result)
                    print(f"{elapsed:.1f} s, median {result['timing']['median_ms']:.3f} ms", flush=True)
    return by_variant, failures


def finish(plan: Plan, by_variant, failures) -> int:
    """Aggregate, write comparison.json and the report, print the summary; the exit status."""
    comparison = {"recipe": plan.recipe, "title": plan.title,
                  "evidence_keys": list(plan.evidence),
                  "rounds": plan.rounds, "smoke": plan.smoke, "device": "cuda" if plan.cuda else "cpu",
                  "command": plan.command, "results_dir": str(plan.results_dir), "workloads": {}, "failures": failures}
    for workload in plan.workloads:
        runs = {v: by_variant[(workload, v)] for v in recipes.VARIANTS if (workload, v) in by_variant}
        comparison["workloads"][workload] = summarize_workload(runs, plan.rule_for(workload))
    write_result(plan.results_dir / "comparison.json", comparison)

    from common import report  # matplotlib is only needed here

    print(report.terminal_table(comparison))
    if any(comparison["workloads"].values()):
        with file_lock(plan.recipe_results / ".render.lock"):  # the md, plot and diffs come from one run
            written = report.render(comparison, plan.reports_dir)
            write_result(plan.recipe_results / "comparison.json", comparison)  # the latest, for make report-<recipe>
        from common import index

        with file_lock(plan.reports_dir / "results" / ".index.lock"):  # one writer of reports/README.md
            written += index.render(plan.reports_dir)
        print("report: " + ", ".join(str(p) for p in written), flush=True)
    else:
        print(f"no variant finished: {plan.reports_dir / (plan.recipe + '.md')} is left as it was", flush=True)
    status = 0
    for workload, entry in comparison["workloads"].items():
        par = entry.get("parity")
        if par and not par["ok"]:
            status = 1
            print(f"parity FAILED for {plan.recipe}/{workload}: {parity_failure(par)}", file=sys.stderr)
    for f in failures:
        status = 1
        print(f"{f['workload']} {f['variant']} round {f['round']} failed (exit {f['returncode']}); "
              f"last lines of {f['log']}:", file=sys.stderr)
        print("\n".join("    " + line for line in f["tail"]), file=sys.stderr)
    return status


def compare(argv=None) -> int:
    plan = make_plan(sys.argv[1:] if argv is None else list(argv))
    with file_lock(plan.recipe_results / ".running.lock", blocking=False) as alone:
        if not alone:
            print(f"warning: another {plan.recipe} comparison is running: the two disturb each other's timings "
                  "(their files stay apart)", file=sys.stderr, flush=True)
        by_variant, failures = run_all(plan)
    return finish(plan, by_variant, failures)


def _terminate(signum, frame):
    raise KeyboardInterrupt  # a kill ends like Ctrl-C: the child is stopped, nothing half-written


def main():
    signal.signal(signal.SIGTERM, _terminate)
    try:
        sys.exit(compare())
    except CookbookError as e:
        exit_with(e, "common.compare")
    except KeyboardInterrupt:
        print("\ninterrupted: the previous report is left as it was; finished runs are kept in reports/results/",
              file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
