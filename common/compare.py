"""The slow-vs-fast runner behind `make recipe-<name>`.

    python -m common.compare amp [--smoke] [--rounds N] [--device auto|cuda|cpu] [--data synthetic]

Every variant runs in its own process; slow and fast alternate for several rounds (who goes first
alternates too) so that drift hits both; round 1 also profiles. Then: a parity check of the loss
trajectories, a terminal summary, and the report (reports/<recipe>.md, plot, side-by-side diffs).
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from common import env, recipes, stats
from common.cli import OneLineParser, positive_int
from common.errors import CookbookError, exit_with
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
                   help="override the recipe's parity tolerance (relative loss difference, e.g. 0.01)")
    p.add_argument("--reports-dir", default=str(env.REPO_ROOT / "reports"), help="where the report goes (default reports/)")
    p.epilog = "Flags after -- go to every script, e.g. -- --steps 50 --batch-size 64"
    own = argv.index("--") if "--" in argv else len(argv)
    script_args = argv[own + 1:]
    args = p.parse_args(argv[:own])
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


def run_variant(recipe, workload, variant, round_no, args, paths, extra):
    """One variant in its own process; output goes to a log next to its result."""
    out = paths["results"] / f"{workload}_{variant}_r{round_no}.json"
    log = out.with_suffix(".log")
    cmd = [sys.executable, "-m", f"recipes.{recipe}.{workload}_{variant}", "--device", args.device,
           "--out", str(out), "--trace-dir", str(paths["traces"] / f"{workload}_{variant}")]
    if round_no > 1:
        cmd += ["--profile-steps", "0"]  # the evidence comes from round 1
    if args.smoke:
        cmd.append("--smoke")
    cmd += extra
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=env.REPO_ROOT, stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-LOG_TAIL:]
        return None, {"workload": workload, "variant": variant, "round": round_no,
                      "returncode": proc.returncode, "log": str(log), "tail": tail}, elapsed
    return read_result(out), None, elapsed


def parity(slow, fast, rtol):
    """Step-by-step relative difference of the loss trajectories (same seed, same batches)."""
    a, b = slow["losses"], fast["losses"]
    if not a or len(a) != len(b):
        return {"ok": False, "max_rel": None, "rtol": rtol, "why": f"loss trajectories of {len(a)} and {len(b)} steps"}
    rel = [abs(y - x) / max(abs(x), 1e-6) for x, y in zip(a, b)]
    worst = max(range(len(rel)), key=rel.__getitem__)
    finite = all(map(lambda v: v == v and abs(v) != float("inf"), b))
    return {"ok": finite and rel[worst] <= rtol, "max_rel": rel[worst], "mean_rel": sum(rel) / len(rel),
            "at_step": worst, "steps": len(rel), "rtol": rtol, "finite": finite}


def aggregate(runs):
    """Pool the timed steps of every round of one variant."""
    first = runs[0]
    pooled = [ms for r in runs for ms in r["timing"]["step_ms"]]
    return {
        "stats": stats.summarize(pooled, first["config"]["batch_size"]),
        "round_medians_ms": [r["timing"]["median_ms"] for r in runs],
        "warmup_s": [r["timing"]["warmup_s"] for r in runs],
        "memory": max((r["memory"] for r in runs), key=lambda m: m.get("max_allocated_mb", m.get("peak_rss_mb", 0))),
        "evidence": first["evidence"],
        "config": first["config"],
        "data_source": first["data_source"],
        "notices": first["notices"],
        "env": first["env"],
    }


def compare(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    recipe = recipes.check(args.recipe)
    settings = recipes.settings(recipe)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise CookbookError("--device cuda: CUDA is not available here; use --device cpu or --device auto")
    cuda = args.device != "cpu" and torch.cuda.is_available()
    rounds = args.rounds or (1 if args.smoke else 3 if cuda else 2)
    workloads = recipes.workloads(recipe)
    if args.workloads:
        wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in workloads]
        if unknown:
            raise CookbookError(f"--workloads: no {recipe} pair for {', '.join(unknown)}; choose from {', '.join(workloads)}")
        workloads = wanted
    extra = args.script_args
    dflags = data_flags(args.data, workloads)
    reports_dir = Path(args.reports_dir)
    paths = {"results": reports_dir / "results" / recipe, "traces": reports_dir / "traces" / recipe}
    for p in paths.values():
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CookbookError(f"--reports-dir {reports_dir}: cannot write ({e.strerror}); choose a writable folder") from None

    total = len(workloads) * rounds * 2
    print(f"{recipe}: {len(workloads)} workload(s) x {rounds} round(s) x slow/fast = {total} runs, "
          f"{'CUDA' if cuda else 'CPU'}{' (smoke)' if args.smoke else ''}; logs in {paths['results']}", flush=True)
    done, failures, by_variant = 0, [], {}
    for workload in workloads:
        for round_no in range(1, rounds + 1):
            order = recipes.VARIANTS if round_no % 2 else recipes.VARIANTS[::-1]  # alternate who goes first
            for variant in order:
                done += 1
                print(f"[{done}/{total}] {workload} {variant} round {round_no} ...", end=" ", flush=True)
                result, failure, elapsed = run_variant(recipe, workload, variant, round_no, args, paths,
                                                       dflags[workload] + extra)
                if failure:
                    failures.append(failure)
                    print(f"FAILED (exit {failure['returncode']}) after {elapsed:.1f} s", flush=True)
                    continue
                by_variant.setdefault((workload, variant), []).append(result)
                print(f"{elapsed:.1f} s, median {result['timing']['median_ms']:.3f} ms", flush=True)

    rtol = settings.PARITY["rtol"] if args.parity_rtol is None else args.parity_rtol
    comparison = {"recipe": recipe, "title": settings.TITLE, "parity_rule": {**settings.PARITY, "rtol": rtol},
                  "rounds": rounds, "smoke": args.smoke, "device": "cuda" if cuda else "cpu",
                  "command": "python -m common.compare " + " ".join(argv),
                  "workloads": {}, "failures": failures}
    for workload in workloads:
        entry = {v: aggregate(by_variant[(workload, v)]) for v in recipes.VARIANTS if (workload, v) in by_variant}
        if len(entry) == 2:
            slow, fast = entry["slow"], entry["fast"]
            entry["speedup"] = slow["stats"]["median_ms"] / fast["stats"]["median_ms"]
            entry["parity"] = parity(by_variant[(workload, "slow")][0], by_variant[(workload, "fast")][0], rtol)
        comparison["workloads"][workload] = entry
    write_result(paths["results"] / "comparison.json", comparison)

    from common import report  # matplotlib is only needed here

    print(report.terminal_table(comparison))
    if any("speedup" in e for e in comparison["workloads"].values()):
        written = report.render(comparison, reports_dir)
        print("report: " + ", ".join(str(p) for p in written), flush=True)
    else:
        print(f"no pair finished: {reports_dir / (recipe + '.md')} is left as it was", flush=True)
    status = 0
    for workload, entry in comparison["workloads"].items():
        par = entry.get("parity")
        if par and not par["ok"]:
            status = 1
            if par.get("max_rel") is None:
                print(f"parity FAILED for {recipe}/{workload}: {par['why']}", file=sys.stderr)
            else:
                print(f"parity FAILED for {recipe}/{workload}: the loss differs by {par['max_rel']:.1%} at step "
                      f"{par['at_step']} (tolerance {par['rtol'] * 100:.4g}%)", file=sys.stderr)
    for f in failures:
        status = 1
        print(f"{f['workload']} {f['variant']} round {f['round']} failed (exit {f['returncode']}); last lines of {f['log']}:",
              file=sys.stderr)
        print("\n".join("    " + line for line in f["tail"]), file=sys.stderr)
    return status


def main():
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
