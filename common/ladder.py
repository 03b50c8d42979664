"""`make ladder`: every rung of each workload's ladder, then reports/ladder_<workload>.md.

    python -m common.ladder [churn|resnet18 ...] [--smoke] [--rounds N] [--device ...] [--data synthetic]

Each rung runs in its own process; a round climbs the ladder and the next one climbs down, so drift
hits every rung alike. Speedups are throughput ratios (samples/s), since the last ResNet-18 rung
changes the batch size: cumulative against rung 0, incremental against the rung below. Parity:
every rung against rung 0, within the tolerance of the techniques it has added.
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

import ladder
from common import env, memory, plotting
from common.cli import OneLineParser, positive_int, split_passthrough
from common.compare import aggregate, parity, parity_failure
from common.errors import CookbookError, exit_with
from common.harness import EXIT_OOM
from common.results import atomic_write_bytes, atomic_write_text, read_result, write_result

# the issue's targets on an H100-class GPU, checked in the report (never on CPU)
TARGETS = {
    "churn": "serving p99 latency at batch 512 at most 0.100 ms including the copy back, and at least 20x the naive throughput",
    "resnet18": "the last rung at least 10x the naive training throughput, and at least 10,000 images/s at 224 px",
}


def parse_args(argv):
    p = OneLineParser(prog="python -m common.ladder", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", help=f"which ladders (default: {' '.join(ladder.RUNGS)})")
    p.add_argument("--rounds", type=positive_int, help="rounds over the ladder (default 2 on CUDA, 1 on CPU)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--data", metavar="synthetic|PATH", help="data for every rung (default: the real source, else synthetic)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: a quick CPU check")
    p.add_argument("--reports-dir", default=str(env.REPO_ROOT / "reports"))
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    unknown = [w for w in args.workloads if w not in ladder.RUNGS]
    if unknown:
        raise CookbookError(f"no ladder for {', '.join(unknown)}; choose from {', '.join(ladder.RUNGS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise CookbookError("--device cuda: CUDA is not available here; use --device cpu or --device auto")
    return args


def rule_for(rung: dict) -> dict:
    return {"what": "training loss", **rung["parity"]}


def run_rung(workload, index, rung, round_no, out_dir, traces, mode, flags):
    spec = ladder.RUNGS[workload]
    out = out_dir / f"rung{index}_r{round_no}.json"
    cmd = [sys.executable, "-m", spec["script"], "--rung", str(index), "--out", str(out),
           "--trace-dir", str(traces / f"rung{index}")] + flags + rung.get("flags", {}).get(mode, [])
    if round_no > 1:
        cmd += ["--profile-steps", "0"]
    with open(out.with_suffix(".log"), "w") as log:
        proc = subprocess.run(cmd, cwd=env.REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode in (0, EXIT_OOM) and out.exists():
        return read_result(out), None
    tail = out.with_suffix(".log").read_text(errors="replace").strip().splitlines()[-12:]
    return None, {"rung": index, "round": round_no, "returncode": proc.returncode, "tail": tail}


def climb(workload, args, cuda, results_dir, reports_dir):
    spec = ladder.RUNGS[workload]
    rungs = spec["rungs"]
    mode = "smoke" if args.smoke else "cuda" if cuda else "cpu"
    rounds = args.rounds or (1 if args.smoke or not cuda else 2)
    flags = ["--device", args.device] + (["--smoke"] if args.smoke else []) + (["--data", args.data] if args.data else [])
    flags += args.script_args
    out_dir = results_dir / workload
    out_dir.mkdir(parents=True, exist_ok=True)
    traces = reports_dir / "traces" / "ladder" / workload
    runs, failures = {}, []
    total, done = rounds * len(rungs), 0
    for round_no in range(1, rounds + 1):
        order = range(len(rungs)) if round_no % 2 else reversed(range(len(rungs)))
        for i in order:
            done += 1
            print(f"[{done}/{total}] {workload} rung {i} ({rungs[i]['name']}) round {round_no} ...", end=" ", flush=True)
            t0 = time.perf_counter()
            result, failure = run_rung(workload, i, rungs[i], round_no, out_dir, traces, mode, flags)
            if failure:
                failures.append(failure)
                print(f"FAILED (exit {failure['returncode']})", flush=True)
            elif result["status"] == "oom":
                runs.setdefault(i, []).append(result)
                print(f"out of memory at batch {result['oom']['batch_size']}", flush=True)
            else:
                runs.setdefault(i, []).append(result)
                print(f"{time.perf_counter() - t0:.1f} s, median {result['timing']['median_ms']:.3f} ms", flush=True)
    return summarize(workload, runs, failures, rounds, mode)


def summarize(workload, runs, failures, rounds, mode):
    rungs = ladder.RUNGS[workload]["rungs"]
    table = []
    base = aggregate(runs[0]) if 0 in runs else None
    below = None
    for i, rung in enumerate(rungs):
        row = {"rung": i, "name": rung["name"], "adds": rung["adds"]}
        if i not in runs:
            row["status"] = "failed"
        else:
            agg = aggregate(runs[i])
            row["status"] = agg["status"]
            if agg["status"] == "ok":
                s = agg["stats"]
                row.update(stats=s, memory=agg["memory"], evidence=agg["evidence"], host=agg["host"],
                           batch_size=agg["config"]["batch_size"], env=agg["env"], data_source=agg["data_source"])
                if base and base["status"] == "ok":
                    row["cumulative"] = s["throughput_per_s"] / base["stats"]["throughput_per_s"]
                    rule = rule_for(rung)
                    row["parity"] = parity(runs[0][0], runs[i][0], rule) if i else None
                    if row["parity"] is not None and rule.get("max_windows"):
                        row["parity"]["windows_compared"] = False
                if below is not None:
                    row["incremental"] = s["throughput_per_s"] / below["throughput_per_s"]
                below = s
            else:
                row["oom"] = agg["oom"]
        table.append(row)
    return {"workload": workload, "what": ladder.RUNGS[workload]["what"], "rounds": rounds, "mode": mode,
            "rungs": table, "failures": failures}


def _targets(summary) -> list[str]:
    rows = [r for r in summary["rungs"] if r["status"] == "ok"]
    if not rows or summary["mode"] != "cuda":
        return [f"- Target (H100-class GPU): {TARGETS[summary['workload']]}. Not checked: this is not a GPU run."]
    last = rows[-1]
    out = [f"- Target (H100-class GPU): {TARGETS[summary['workload']]}."]
    if summary["workload"] == "churn":
        p99 = last["stats"]["p99_ms"]
        out.append(f"  - p99 latency of the last rung: {p99:.3f} ms: {'met' if p99 <= 0.1 else f'missed by {p99 / 0.1:.1f}x'}")
    else:
        ips = last["stats"]["throughput_per_s"]
        out.append(f"  - last rung: {ips:,.0f} images/s: {'met' if ips >= 10_000 else f'missed by {10_000 / ips:.1f}x'}")
    need = 20 if summary["workload"] == "churn" else 10
    cum = last.get("cumulative")
    if cum is not None:
        out.append(f"  - cumulative speedup {cum:.1f}x: {'met' if cum >= need else f'missed ({need}x wanted)'}")
    return out


def _plot(summary) -> bytes:
    plt = plotting.pyplot()

    rows = [r for r in summary["rungs"] if r["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.6))
    labels = [f"{r['rung']}. {r['name']}" for r in rows][::-1]
    values = [r["stats"]["throughput_per_s"] for r in rows][::-1]
    ax.barh(labels, values, color="#2a7ab9")
    for y, r in enumerate(rows[::-1]):
        if r.get("cumulative"):
            ax.text(values[y], y, f" {r['cumulative']:.1f}x", va="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("samples per second (log scale); label: cumulative speedup over rung 0")
    env_ = rows[0]["env"] if rows else None
    fig.suptitle(f"ladder {summary['workload']}: {env.describe_device(env_) if env_ else ''}", fontsize=9)
    fig.tight_layout()
    return plotting.png(fig)


def render(summary, command, reports_dir: Path) -> list[Path]:
    w = summary["workload"]
    rows = [r for r in summary["rungs"] if r["status"] == "ok"]
    e = rows[0]["env"] if rows else None
    src = (rows[0].get("data_source") or {}) if rows else {}
    lines = [f"# Ladder: {w}", "", f"{summary['what']}. Generated by `{command}`"
             + (f" on **{env.describe_device(e)}**, {e['date']} (commit {e['git_commit']}), torch {e['torch']}" if e else "")
             + f"; {summary['rounds']} round(s), climbing up then down; data: {src.get('kind', '?')}. "
               "Every number below comes from that run.", "",
             f"![throughput per rung](ladder_{w}.png)", ""]
    lines += _targets(summary) + [""]
    lines += ["| rung | adds | batch | median ms | p99 ms | samples/s | cumulative | incremental | peak MB | syncs/step | kernels/step | parity |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)  # noqa: E731
    for r in summary["rungs"]:
        if r["status"] != "ok":
            why = f"out of memory at batch {r['oom']['batch_size']}" if r["status"] == "oom" else "failed"
            lines.append(f"| {r['rung']} | **{r['name']}**: {r['adds']} | | {why} ||||||||")
            continue
        s, ev = r["stats"], r["evidence"] or {}
        par = r.get("parity")
        if par is None:
            ptxt = "reference"
        elif par["ok"]:
            ptxt = "ok" + ("" if par.get("windows_compared", True) else " (first window only)")
        else:
            ptxt = "FAILED: " + parity_failure(par)
        lines.append(f"| {r['rung']} | **{r['name']}**: {r['adds']} | {r['batch_size']} | {s['median_ms']:.3f} | "
                     f"{s['p99_ms']:.3f} | {s['throughput_per_s']:,.0f} | {fmt(r.get('cumulative'), '.2f')}x | "
                     f"{fmt(r.get('incremental'), '.2f')}{'x' if r.get('incremental') else ''} | "
                     f"{memory.headline_mb(r['memory']):.0f} | {fmt(ev.get('syncs_per_step'), '.1f')} | "
                     f"{fmt(ev.get('kernels_per_step'), '.0f')} | {ptxt} |")
    lines += ["", "Speedups are throughput ratios (samples/s at the median step). Parity compares each rung's "
                  "first steps and windowed means with rung 0's, within the tolerance of the techniques it adds "
                  "(see `ladder/__init__.py`)."]
    if e and e["device_type"] != "cuda":
        lines.append("This is a CPU run: it checks that every rung works and keeps parity; it is not a GPU result.")
    for f in summary["failures"]:
        lines += ["", f"Rung {f['rung']} round {f['round']} failed (exit {f['returncode']}):", "", "```", *f["tail"], "```"]
    lines.append("")
    md, png = Path(reports_dir) / f"ladder_{w}.md", Path(reports_dir) / f"ladder_{w}.png"
    if rows:
        atomic_write_bytes(png, _plot(summary))
    atomic_write_text(md, "\n".join(lines))
    return [md, png]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    cuda = args.device != "cpu" and torch.cuda.is_available()
    reports_dir = Path(args.reports_dir)
    results_dir = reports_dir / "results" / "ladder" / env.run_id()
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CookbookError(f"--reports-dir {reports_dir}: cannot write ({e.strerror})") from None
    status = 0
    for w in args.workloads or list(ladder.RUNGS):
        summary = climb(w, args, cuda, results_dir, reports_dir)
        write_result(results_dir / f"{w}.json", summary)
        write_result(reports_dir / "results" / "ladder" / f"{w}.json", summary)  # the latest, for the index
        command = "make ladder" if not argv else "python -m common.ladder " + " ".join(argv)
        written = render(summary, command, reports_dir)
        print(f"report: {', '.join(map(str, written))}", flush=True)
        for r in summary["rungs"]:
            par = r.get("parity")
            if r["status"] == "failed" or (par and not par["ok"]):
                status = 1
                why = parity_failure(par) if par else "the run failed"
                print(f"ladder {w} rung {r['rung']} ({r['name']}): {why}", file=sys.stderr)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CookbookError as e:
        exit_with(e, "common.ladder")
