"""The seed's four-phase diagnosis as a command: `make diagnose-churn`, `make diagnose-resnet18`.

    python -m common.diagnose churn|resnet18 [--smoke] [--device auto|cuda|cpu] [--data PATH|synthetic]
    python -m common.diagnose --script path/to/my_script.py      # any harness script

It runs the workload's naive baseline (baselines/) once with per-phase timing and memory recording,
then reads the measurements in the seed's order:
  1. baseline: step time statistics, throughput, memory, and the conditions (GPU clocks, power, ...)
  2. bottleneck type: GPU utilisation, time waiting for data vs computing, host syncs, GPU idle
  3. component: data, copy, forward, backward, optimizer timed with CUDA events (perf_counter on CPU)
  4. operations: the profiler's top ops and the time per kind of op (linear, relu, dropout, ...)
and writes reports/baseline_<workload>.md with a verdict that quotes the numbers that led to it and
the recipes that address it.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import env, memory, plotting
from common.cli import OneLineParser, split_passthrough
from common.errors import CookbookError, exit_with
from common.presets import WORKLOADS
from common.results import atomic_write_bytes, atomic_write_text, read_result

BASELINES = {"churn": "baselines.churn_mlp", "resnet18": "baselines.resnet18_cifar10"}
DATA_SHARE = 0.30  # waiting for input this much of a step makes data loading a bottleneck
SYNC_MIN = 1.0  # host syncs per step inside the loop worth a finding
IDLE_SHARE = 0.30  # a GPU idle this much of the profiled steps is starved by the host
BUSY_UTIL = 80.0  # NVML utilisation (%) above which the GPU is the bottleneck
COMPUTE_SHARE = 0.70  # without NVML: this much of a step in forward/backward/optimizer is compute-bound
RECIPES = {
    "data loading": ["dataloader"],
    "host syncs": ["sync_removal"],
    "launch overhead": ["compile", "fused_ops"],
    "GPU compute": ["amp", "compile"],
    "memory": ["checkpointing", "amp"],
}


def _share(part, whole):
    return part / whole if whole else 0.0


def analyse(result: dict) -> dict:
    """The four phases and the verdict, from one result of a harness script run with --phase-timing."""
    t, ev = result["timing"], result.get("evidence") or {}
    cuda = result["device"] == "cuda"
    gpu = result.get("gpu_monitor") or {}
    step = t["mean_ms"]
    phases = {name: s["mean_ms"] for name, s in (t.get("phase_ms") or {}).items()}
    compute = sum(phases.get(p, 0.0) for p in ("forward", "backward", "optimizer"))
    data_ms = phases.get("data", 0.0) + phases.get("copy", 0.0)
    data_share = _share(data_ms, step) if phases else t.get("data_wait_share") or 0.0
    findings = []
    if data_share >= DATA_SHARE:
        findings.append({"kind": "data loading", "weight": data_share,
                         "says": f"CPU-bound on data loading: {data_share:.0%} of step time waiting for the next batch "
                                 f"({data_ms:.2f} of {step:.2f} ms per step)"})
    syncs = ev.get("syncs_per_step") or 0.0
    if syncs >= SYNC_MIN:
        what = "host syncs" if cuda else ".item() calls (on a GPU, each is a host sync)"
        idle = ev.get("gpu_idle_share")
        findings.append({"kind": "host syncs", "weight": max(idle or 0.0, 0.2),
                         "says": f"{syncs:.1f} {what} per step inside the training loop"
                                 + (f"; the GPU sits idle {idle:.0%} of the profiled steps" if idle is not None else "")})
    idle = ev.get("gpu_idle_share")
    if cuda and idle is not None and idle >= IDLE_SHARE and not any(f["kind"] == "data loading" for f in findings):
        kernels = ev.get("kernels_per_step") or 0
        findings.append({"kind": "launch overhead", "weight": idle,
                         "says": f"the GPU is idle {idle:.0%} of the profiled steps while the host launches "
                                 f"{kernels:.0f} kernels per step: host-bound (launch overhead)"})
    util = gpu.get("gpu_util_mean") if gpu.get("available") else None
    if util is not None and util >= BUSY_UTIL and (idle is None or idle < IDLE_SHARE) and data_share < DATA_SHARE:
        findings.append({"kind": "GPU compute", "weight": util / 100,
                         "says": f"GPU-bound: {util:.0f}% NVML utilisation, {compute:.2f} of {step:.2f} ms in "
                                 "forward, backward and optimizer"})
    compute_share = _share(compute, step)
    if util is None and compute_share >= COMPUTE_SHARE:  # no NVML (a CPU run): the phase times decide
        where = "the CPU" if not cuda else "the device (NVML unavailable to confirm)"
        findings.append({"kind": "GPU compute", "weight": compute_share,
                         "says": f"compute-bound on {where}: {compute_share:.0%} of step time in forward, backward and "
                                 f"optimizer ({compute:.2f} of {step:.2f} ms)"})
    findings.sort(key=lambda f: f["weight"], reverse=True)
    if not findings:
        findings.append({"kind": "none dominant", "weight": 0.0,
                         "says": f"no single bottleneck: data {data_share:.0%} of the step, {syncs:.1f} syncs per step"
                                 + (f", GPU idle {idle:.0%}" if idle is not None else "")})
    for f in findings:
        f["recipes"] = RECIPES.get(f["kind"], [])
    components = [{"phase": p, "mean_ms": ms, "share": _share(ms, step),
                   "peak_mb": (t.get("phase_peak_mb") or {}).get(p)} for p, ms in phases.items()]
    views = ev.get("views") or {}
    return {
        "baseline": {"median_ms": t["median_ms"], "p95_ms": t["p95_ms"], "cv": t["cv"], "throughput": t["throughput_per_s"],
                     "peak_mb": memory.headline_mb(result["memory"]), "batch_size": result["config"]["batch_size"]},
        "type": {"gpu_util": util, "data_share": data_share, "compute_ms": compute, "step_ms": step,
                 "syncs_per_step": syncs, "gpu_idle_share": idle},
        "components": components,
        "operations": {"top": (views.get("device_time") or {}).get("rows", [])[:10],
                       "by_kind": (views.get("by_kind") or {}).get("rows", []), "key": (views.get("device_time") or {}).get("key")},
        "findings": findings,
        "verdict": findings[0]["says"],
    }


def _plot(name, result, analysis) -> bytes:
    
    plt = plotting.pyplot()

    sweep = ((result.get("extra") or {}).get("inference") or {}).get("rows")
    panels = 3 if sweep else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4))
    comps = analysis["components"]
    axes[0].bar([c["phase"] for c in comps], [c["mean_ms"] for c in comps], color="#2a7ab9")
    axes[0].set_title(f"where a step goes (mean ms)\nstep {analysis['type']['step_ms']:.2f} ms")
    kinds = analysis["operations"]["by_kind"][:8]
    key = analysis["operations"]["key"] or "self_cpu_us"
    axes[1].barh([k["name"] for k in kinds][::-1], [k[key] / 1000 for k in kinds][::-1], color="#8c8c8c")
    axes[1].set_title(f"time per kind of op (ms per step, {'device' if 'device' in key else 'CPU'})")
    if sweep:
        rows = [r for r in sweep if "mean_ms" in r]
        ax = axes[2]
        ax.plot([r["batch_size"] for r in rows], [r["mean_ms"] for r in rows], "o-", color="#c0504d", label="latency")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("inference batch size")
        ax.set_ylabel("mean latency, ms", color="#c0504d")
        ax2 = ax.twinx()
        ax2.plot([r["batch_size"] for r in rows], [r["throughput_per_s"] for r in rows], "s--", color="#2a7ab9")
        ax2.set_ylabel("samples/s", color="#2a7ab9")
        ax.set_title("inference: latency and throughput")
    fig.suptitle(f"{name}: {env.describe_device(result['env'])}", fontsize=9)
    fig.tight_layout()
    return plotting.png(fig)


def render(name: str, result: dict, analysis: dict, command: str, reports_dir: Path) -> list[Path]:
    a, e = analysis, result["env"]
    cpu = result["device"] != "cuda"
    fmt = lambda v, spec, none="n/a": none if v is None else format(v, spec)  # noqa: E731
    src = result.get("data_source") or {}
    lines = [f"# Diagnosis: {name}", "",
             f"Generated by `{command}` on **{env.describe_device(e)}**, {e['date']} (commit {e['git_commit']}); "
             f"torch {e['torch']}. Data: {src.get('kind', '?')}{' - ' + src['note'] if src.get('note') else ''}. "
             "Every number below comes from that run.", "",
             "## Verdict", "", f"**{a['verdict']}.**", ""]
    for f in a["findings"]:
        recipes = ", ".join(f"[`{r}`](../recipes/{r}/README.md)" for r in f["recipes"]) or "none"
        lines.append(f"- {f['kind']}: {f['says']}. Recipes: {recipes}.")
    b = a["baseline"]
    gpu = result.get("gpu_monitor") or {}
    lines += ["", "![where the time goes](" + f"baseline_{result['workload']}.png)", "",
              "## Phase 1: baseline", "",
              f"- Batch {b['batch_size']}, {result['timing']['n']} timed steps: median {b['median_ms']:.3f} ms, "
              f"p95 {b['p95_ms']:.3f} ms, CV {b['cv']:.1%}; {b['throughput']:.1f} samples/s; peak memory "
              f"{b['peak_mb']:.0f} MB ({'CPU process RSS' if cpu else 'allocated'}).",
              "- Conditions: " + (f"GPU util {gpu['gpu_util_mean']:.0f}% mean, SM clock {gpu['sm_clock_mhz'][0]}-"
                                  f"{gpu['sm_clock_mhz'][1]} MHz, memory clock {gpu['mem_clock_mhz'][0]}-{gpu['mem_clock_mhz'][1]} "
                                  f"MHz, P-states {gpu['pstates']}, max {gpu['temp_c_max']} C, {gpu['power_w_mean']:.0f} W of "
                                  f"{gpu['power_limit_w']:.0f} W, throttle reasons: {', '.join(gpu['throttle_reasons']) or 'none'}"
                                  if gpu.get("available") else "NVML unavailable (no GPU or no pynvml): no utilisation, "
                                  "clocks or power; the rest of the diagnosis runs.")]
    lines += [f"- Warning: {w}" for w in result.get("warnings", [])]
    extra = result.get("extra") or {}
    if extra.get("epochs") is not None:
        lines.append(f"- Trained {extra['epochs']:.1f} epochs; test accuracy {extra.get('test_accuracy', 0):.1%}.")
    if extra.get("epoch_s_estimate") is not None:
        lines.append(f"- Training accuracy over the run {extra['train_accuracy']:.1%}; one epoch ({extra['steps_per_epoch']} "
                     f"steps) at this pace: {extra['epoch_s_estimate']:.0f} s (median step x steps).")
    sweep = extra.get("inference")
    if sweep:
        lines += ["", f"Inference sweep over the test set (latency includes the copy back to the host; "
                      f"{sweep['passes']} passes after a warm-up pass); sweet spot: **batch {sweep['sweet_spot']}** "
                      f"({sweep['sweet_rule']}).", "",
                  "| batch | mean ms | std ms | p95 ms | samples/s | GPU util | memory MB | temp C | power W (limit) | SM / mem clock MHz | P-state | throttle |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
        for r in sweep["rows"]:
            if "mean_ms" not in r:
                lines.append(f"| {r['batch_size']} | skipped: {r['skipped']} |||||||||||")
                continue
            g = r["gpu"]
            gcols = (f"{g['gpu_util_mean']:.0f}% | {g['mem_used_mb_max']:.0f} | {g['temp_c_max']} | {g['power_w_mean']:.0f} "
                     f"({g['power_limit_w']:.0f}) | {g['sm_clock_mhz'][1]} / {g['mem_clock_mhz'][1]} | {g['pstates']} | "
                     f"{', '.join(g['throttle_reasons']) or 'none'}") if g.get("available") else "n/a | n/a | n/a | n/a | n/a | n/a | n/a"
            lines.append(f"| {r['batch_size']} | {r['mean_ms']:.3f} | {r['std_ms']:.3f} | {r['p95_ms']:.3f} | "
                         f"{r['throughput_per_s']:.0f} | {gcols} |")
    ty = a["type"]
    lines += ["", "## Phase 2: bottleneck type", "",
              f"- GPU utilisation (NVML, timed steps): {fmt(ty['gpu_util'], '.0f')}{'%' if ty['gpu_util'] is not None else ''}",
              f"- Waiting for data (data + copy phases): {ty['data_share']:.1%} of the step; computing (forward + "
              f"backward + optimizer): {ty['compute_ms']:.3f} of {ty['step_ms']:.3f} ms",
              f"- {'.item() calls (CPU proxy for syncs)' if cpu else 'Host syncs'} per step: {ty['syncs_per_step']:.1f}",
              f"- GPU idle share over the profiled steps: {fmt(ty['gpu_idle_share'], '.0%')}",
              "", "## Phase 3: component", "",
              f"Each phase of every timed step between {'CUDA events' if not cpu else 'perf_counter calls'} "
              "(`--phase-timing`); shares of the mean step; peak memory inside each phase (CUDA).", "",
              "| phase | mean ms | share of step | peak MB |", "|---|---:|---:|---:|"]
    for c in a["components"]:
        lines.append(f"| {c['phase']} | {c['mean_ms']:.3f} | {c['share']:.1%} | {fmt(c['peak_mb'], '.0f')} |")
    key = a["operations"]["key"] or "self_cpu_us"
    unit = "self device time" if "device" in key else "self CPU time"
    lines += ["", "## Phase 4: operations", "", f"Per profiled step, by {unit}.", "",
              "| kind of op | ms per step | calls |", "|---|---:|---:|"]
    for k in a["operations"]["by_kind"]:
        lines.append(f"| {k['name']} | {k[key] / 1000:.3f} | {k['calls']:.0f} |")
    views = (result.get("evidence") or {}).get("views") or {}
    titles = {"device_time": f"top ops by {unit}", "self_memory": "top ops by self memory",
              "cpu_time": "top ops by CPU time (incl. children)", "calls": "top ops by calls"}
    for view, title in titles.items():
        if view not in views:
            continue
        vkey = views[view]["key"]
        lines += ["", f"The seed's view: {title}.", "", "| op | value per step |", "|---|---:|"]
        for r in views[view]["rows"][:8]:
            v = r[vkey] or 0.0
            shown = (f"{v / 1000:.3f} ms" if vkey.endswith("_us") else f"{v / 2**20:.2f} MB" if vkey == "self_mem_bytes"
                     else f"{v:.0f}")
            lines.append(f"| `{r['name'][:60]}` | {shown} |")
    ev = result.get("evidence") or {}
    mem = ev.get("memory") or {}
    lines += ["", "## Memory and traces", ""]
    if ev.get("trace"):
        lines.append(f"- Timeline trace: `{env.shown_path(ev['trace'])}` (`make tensorboard`, or drop it on https://ui.perfetto.dev)")
    if mem.get("timeline"):
        lines.append(f"- The profiler's memory timeline: `{env.shown_path(mem['timeline'])}` (open in a browser)")
    if mem.get("snapshot"):
        lines.append(f"- CUDA memory snapshot: `{env.shown_path(mem['snapshot'])}`; to view it: {mem['view_snapshot']}")
    lines += [f"- {n}" for n in mem.get("notes", [])]
    lines.append("")
    reports_dir = Path(reports_dir)
    md, png = reports_dir / f"baseline_{result['workload']}.md", reports_dir / f"baseline_{result['workload']}.png"
    atomic_write_bytes(png, _plot(name, result, analysis))
    atomic_write_text(md, "\n".join(lines))
    return [md, png]


def parse_args(argv):
    p = OneLineParser(prog="python -m common.diagnose", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", nargs="?", choices=WORKLOADS, help="diagnose this workload's baseline")
    p.add_argument("--script", help="diagnose another harness script instead (a path)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--data", metavar="PATH|synthetic")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: a quick CPU check")
    p.add_argument("--reports-dir", default=str(env.REPO_ROOT / "reports"))
    own, script_args = split_passthrough(argv)
    args = p.parse_args(own)
    args.script_args = script_args
    if (args.workload is None) == (args.script is None):
        p.error("give a workload (churn or resnet18) or --script PATH, not both")
    if args.script and not Path(args.script).is_file():
        raise CookbookError(f"--script {args.script}: no such file")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    reports = Path(args.reports_dir)
    name = args.workload or Path(args.script).stem
    out_dir = reports / "results" / "diagnose" / f"{name}-{env.run_id()}"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CookbookError(f"--reports-dir {reports}: cannot write ({e.strerror})") from None
    target = ["-m", BASELINES[args.workload]] if args.workload else [str(Path(args.script).resolve())]
    cmd = [sys.executable, *target, "--phase-timing", "--memory-dir", str(out_dir / "memory"),
           "--out", str(out_dir / "result.json"), "--trace-dir", str(reports / "traces" / "diagnose" / name),
           "--device", args.device] + (["--smoke"] if args.smoke else []) + (["--data", args.data] if args.data else [])
    cmd += args.script_args
    print(f"diagnose {name}: running {' '.join(target)} with per-phase timing (log: {out_dir / 'log.txt'})", flush=True)
    t0 = time.perf_counter()
    with open(out_dir / "log.txt", "w") as log:
        proc = subprocess.Popen(cmd, cwd=env.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1",
                                     "PYTHONPATH": os.pathsep.join([str(env.REPO_ROOT), os.environ.get("PYTHONPATH", "")])})
        for line in proc.stdout:  # progress as it happens, and a copy in the log
            log.write(line)
            if not line.startswith(("USDT", "[W", "ERROR:")):
                print("  " + line.rstrip(), flush=True)
        proc.wait()
    if proc.returncode != 0:
        print(f"diagnose {name}: the run failed (exit {proc.returncode}) after {time.perf_counter() - t0:.0f} s; "
              f"see {out_dir / 'log.txt'}", file=sys.stderr)
        return 1
    result = read_result(out_dir / "result.json")
    analysis = analyse(result)
    command = f"make diagnose-{args.workload}" if args.workload and not argv[1:] else "python -m common.diagnose " + " ".join(argv)
    written = render(name, result, analysis, command, reports)
    atomic_write_text(out_dir / "analysis.json", json.dumps(analysis, indent=1))
    print(f"verdict: {analysis['verdict']}")
    for f in analysis["findings"]:
        print(f"  - {f['kind']}: {f['says']} -> recipes: {', '.join(f['recipes']) or 'none'}")
    print("report: " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CookbookError as e:
        exit_with(e, "common.diagnose")
