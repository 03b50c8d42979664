"""The seed's four-phase diagnosis as a command: `make diagnose-churn`, `make diagnose-resnet18`.

    python -m common.runners.diagnose churn|resnet18 [--smoke] [--device auto|cuda|cpu] [--data synthetic|WORKLOAD=PATH]
    python -m common.runners.diagnose --script path/to/my_script.py      # any harness script

It runs the workload's naive baseline (baselines/) once with per-phase timing and memory recording,
then reads the measurements in the seed's order:
  1. baseline: step time statistics, throughput, memory, and the conditions (GPU clocks, power, ...)
  2. bottleneck type: what each suspect costs, as a share of the step, measured
  3. component: data, copy, forward, backward, optimizer timed with CUDA events (perf_counter on CPU)
  4. operations: the profiler's top ops and the time per kind of op (linear, relu, dropout, ...)
and writes reports/baseline_<workload>.md. The findings are ranked by what they cost: the headline
is the largest measured cost, with its number, and the recipes that address it.
"""
import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from common import catalog, env
from common.analysis import metrics
from common.analysis.aggregate import aggregate
from common.analysis.metrics import fmt
from common.analysis.results import Record, RunResult, atomic_write_bytes, atomic_write_text, write_result
from common.cli import OneLineParser, check_script_flags, split_passthrough
from common.errors import CookbookError, exit_with
from common.presets import WORKLOADS
from common.render import plots
from common.runners import launch

BASELINES = {"churn": "baselines.churn_mlp", "resnet18": "baselines.resnet18_cifar10"}
SYNC_MIN = 1.0  # host syncs per step inside the loop worth a finding, whatever they cost
RECIPES = {
    "data loading": ["dataloader"],
    "host syncs": ["sync_removal"],
    "launch overhead": ["cuda_graphs", "compile", "fused_ops"],
    "GPU compute": ["amp", "channels_last", "compile"],
    "CPU compute": ["compile", "fused_ops"],
}


@dataclass
class Finding(Record):
    kind: str
    cost: float  # the share of step time it costs, measured
    says: str
    recipes: list[str] = field(default_factory=list)


@dataclass
class Diagnosis(Record):
    baseline: dict
    type: dict
    components: list[dict]
    operations: dict
    findings: list[Finding]
    verdict: str


def _share(part, whole):
    return min(1.0, part / whole) if whole and part is not None else 0.0


def findings_of(result: RunResult) -> list[Finding]:
    """Each suspect's cost as a share of the step, from what was measured:
    - data loading: the data and copy phases (CUDA events: the GPU waiting for the batch);
    - host syncs: the host's time blocked in sync calls and scalar reads (trace durations);
    - launch overhead: the GPU idle while the host runs ops, outside data and syncs (trace);
    - compute: the GPU busy (trace); on a CPU, the forward, backward and optimizer phases."""
    t, ev = result.timing, result.evidence
    cuda = result.device == "cuda"
    step = t.summary.mean_ms
    phases = {name: s.mean_ms for name, s in (t.phase_ms or {}).items()}
    data_ms = phases.get("data", 0.0) + phases.get("copy", 0.0)
    data_share = _share(data_ms, step) if phases else (t.data_wait_share or 0.0)
    out = [Finding("data loading", data_share, f"data loading costs {data_share:.0%} of the step: {data_ms:.2f} of "
                   f"{step:.2f} ms per step waiting for the next batch" + ("" if cuda else " (CPU-bound)"))]
    if ev is not None:
        profiled = ev.profiled_step_ms or step
        syncs, sync_ms = ev.syncs_per_step, ev.sync_ms_per_step or 0.0
        sync_share = _share(sync_ms, profiled)
        if syncs >= SYNC_MIN or sync_share > 0.01:
            what = "host syncs" if cuda else ".item() calls (on a GPU, each is a host sync)"
            out.append(Finding("host syncs", sync_share, f"{syncs:.1f} {what} per step block the host {sync_ms:.3f} ms "
                               f"per step, {sync_share:.0%} of the step" + ("" if cuda else ": next to nothing on a "
                               "CPU, where nothing runs ahead of the host")))
        if cuda and ev.idle_host_busy_ms_per_step is not None:
            share = _share(ev.idle_host_busy_ms_per_step, profiled)
            out.append(Finding("launch overhead", share, f"launch overhead costs {share:.0%} of the step: the GPU idle "
                               f"{ev.idle_host_busy_ms_per_step:.2f} ms per step while the host runs ops and launches "
                               f"{ev.kernels_per_step:.0f} kernels (host-bound)"))
        if cuda and ev.gpu_busy_ms_per_step is not None:
            share = _share(ev.gpu_busy_ms_per_step, profiled)
            out.append(Finding("GPU compute", share, f"the GPU computes {share:.0%} of the step "
                               f"({ev.gpu_busy_ms_per_step:.2f} of {profiled:.2f} ms per profiled step busy with "
                               "kernels and copies)"))
    if not cuda and phases:
        compute = sum(phases.get(p, 0.0) for p in ("forward", "backward", "optimizer"))
        share = _share(compute, step)
        out.append(Finding("CPU compute", share, f"compute on the CPU costs {share:.0%} of the step ({compute:.2f} of "
                           f"{step:.2f} ms in forward, backward and optimizer)"))
    out.sort(key=lambda f: f.cost, reverse=True)
    for f in out:
        f.recipes = RECIPES.get(f.kind, [])
    return out


def analyse(result: RunResult) -> Diagnosis:
    """The four phases and the verdict, from one result of a harness script run with --phase-timing."""
    t, ev, v = result.timing, result.evidence, aggregate([result])
    step = t.summary.mean_ms
    phases = {name: s.mean_ms for name, s in (t.phase_ms or {}).items()}
    findings = findings_of(result)
    gpu = result.gpu_monitor or {}
    views = ev.views if ev else {}
    return Diagnosis(
        baseline={**{k: metrics.get(m).value(v) for k, m in (("median_ms", "median_ms"), ("p95_ms", "p95_ms"),
                                                                ("throughput", "throughput"), ("peak_mb", "peak_mb"),
                                                                ("tflops", "tflops"), ("mfu", "mfu"))},
                  "cv": t.summary.cv, "batch_size": result.config.batch_size},
        type={"gpu_util": gpu.get("gpu_util_mean") if gpu.get("available") else None,
              "costs": {f.kind: f.cost for f in findings}, "step_ms": step,
              "syncs_per_step": ev.syncs_per_step if ev else None,
              "sync_ms_per_step": ev.sync_ms_per_step if ev else None,
              "gpu_idle_share": ev.gpu_idle_share if ev else None, "host_data_share": t.host_data_share},
        components=[{"phase": p, "mean_ms": ms, "share": _share(ms, step), "peak_mb": (t.phase_peak_mb or {}).get(p)}
                    for p, ms in phases.items()],
        operations={"top": (views.get("device_time") or {}).get("rows", [])[:10],
                    "by_kind": (views.get("by_kind") or {}).get("rows", []),
                    "key": (views.get("device_time") or {}).get("key")},
        findings=findings, verdict=findings[0].says)


def _plot(name, result: RunResult, analysis: Diagnosis) -> bytes:
    return plots.png(_figure(name, result, analysis))


def _figure(name, result: RunResult, analysis: Diagnosis):
    """Where a step goes (phases), the time per kind of op, and the inference sweep where there is one."""
    plt = plots.pyplot()

    sweep = (result.extra.get("inference") or {}).get("rows")
    panels = 3 if sweep else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.2), layout="constrained")
    comps = analysis.components
    axes[0].barh([c["phase"] for c in comps][::-1], [c["mean_ms"] for c in comps][::-1], color="#2a7ab9")
    axes[0].set_title(f"where a step goes (step {analysis.type['step_ms']:.2f} ms)", fontsize=10)
    axes[0].set_xlabel("mean ms per step")
    kinds = analysis.operations["by_kind"][:8]
    key = analysis.operations["key"] or "self_cpu_us"
    axes[1].barh([plots.wrap(k["name"], 22) for k in kinds][::-1], [k[key] / 1000 for k in kinds][::-1],
                 color="#8c8c8c")
    axes[1].set_title("time per kind of op", fontsize=10)
    axes[1].set_xlabel(f"ms per step ({'device' if 'device' in key else 'CPU'} time)")
    if sweep:
        rows = [r for r in sweep if "mean_ms" in r]
        ax = axes[2]
        ax.plot([r["batch_size"] for r in rows], [r["mean_ms"] for r in rows], "o-", color="#c0504d", label="latency")
        plots.knob_axis(ax, [r["batch_size"] for r in rows], "x")
        ax.set_xlabel("inference batch size")
        ax.set_ylabel("mean latency, ms", color="#c0504d")
        ax2 = ax.twinx()
        ax2.plot([r["batch_size"] for r in rows], [r["throughput_per_s"] for r in rows], "s--", color="#2a7ab9")
        plots.count_axis(ax2.yaxis)
        ax2.set_ylabel("samples/s", color="#2a7ab9")
        ax.set_title("inference: latency and throughput", fontsize=10)
    fig.suptitle(plots.wrap(f"{name}: {env.describe_device(result.env)}", 140), fontsize=10)
    return fig


def _conditions(gpu: dict) -> str:
    if not gpu.get("available"):
        return ("NVML unavailable (no GPU or no pynvml): no utilisation, clocks or power; "
                "the rest of the diagnosis runs.")
    return (f"GPU util {gpu['gpu_util_mean']:.0f}% mean, "
            f"SM clock {gpu['sm_clock_mhz'][0]}-{gpu['sm_clock_mhz'][1]} MHz, "
            f"memory clock {gpu['mem_clock_mhz'][0]}-{gpu['mem_clock_mhz'][1]} MHz, P-states {gpu['pstates']}, max "
            f"{gpu['temp_c_max']} C, {gpu['power_w_mean']:.0f} W of {gpu['power_limit_w']:.0f} W, throttle reasons: "
            f"{', '.join(gpu['throttle_reasons']) or 'none'}")


def _sweep_lines(sweep: dict) -> list[str]:
    lines = ["", "Inference sweep over the test set (latency includes the copy back to the host; "
                 f"{sweep['passes']} passes after a warm-up pass); sweet spot: **batch {sweep['sweet_spot']}** "
                 f"({sweep['sweet_rule']}).", "",
             "| batch | mean ms | std ms | p95 ms | samples/s | GPU util | memory MB | temp C | power W (limit) | "
             "SM / mem clock MHz | P-state | throttle |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in sweep["rows"]:
        if "mean_ms" not in r:
            lines.append(f"| {r['batch_size']} | skipped: {r['skipped']} |||||||||||")
            continue
        g = r["gpu"]
        gcols = (f"{g['gpu_util_mean']:.0f}% | {g['mem_used_mb_max']:.0f} | {g['temp_c_max']} | "
                 f"{g['power_w_mean']:.0f} ({g['power_limit_w']:.0f}) | "
                 f"{g['sm_clock_mhz'][1]} / {g['mem_clock_mhz'][1]} | "
                 f"{g['pstates']} | {', '.join(g['throttle_reasons']) or 'none'}"
                 if g.get("available") else "n/a | n/a | n/a | n/a | n/a | n/a | n/a")
        lines.append(f"| {r['batch_size']} | {r['mean_ms']:.3f} | {r['std_ms']:.3f} | {r['p95_ms']:.3f} | "
                     f"{r['throughput_per_s']:.0f} | {gcols} |")
    return lines


def render(name: str, result: RunResult, a: Diagnosis, command: str, reports_dir: Path) -> list[Path]:
    e = result.env
    cpu = result.device != "cuda"
    src = result.data_source or {}
    lines = [f"# Diagnosis: {name}", "",
             f"Generated by `{command}` on **{env.describe_device(e)}**, {e.date} (commit {e.git_commit}); "
             f"torch {e.torch}. Data: {src.get('kind', '?')}{' - ' + src['note'] if src.get('note') else ''}. "
             "Every number below comes from that run.", "",
             "## Verdict", "", f"**{a.verdict[0].upper() + a.verdict[1:]}.**", "",
             "Every suspect, ranked by what it costs (its measured share of the step):", ""]
    for f in a.findings:
        links = ", ".join(f"[`{r}`](../recipes/{r}/README.md)" for r in f.recipes) or "none"
        lines.append(f"- **{f.kind}, {f.cost:.0%}**: {f.says}. Recipes: {links}.")
    b = a.baseline
    lines += ["", f"![where the time goes](baseline_{result.workload}.png)", "",
              "## Phase 1: baseline", "",
              f"- Batch {b['batch_size']}, {result.timing.summary.n} timed steps: median {b['median_ms']:.3f} ms, "
              f"p95 {b['p95_ms']:.3f} ms, CV {b['cv']:.1%}; {b['throughput']:.1f} samples/s; peak memory "
              f"{b['peak_mb']:.0f} MB ({'CPU process RSS' if cpu else 'allocated'}); "
              f"{fmt(b.get('tflops'), '.2f')} TFLOP/s" + (f", MFU {fmt(b.get('mfu'), '.1%')}" if not cpu else "") + ".",
              "- Conditions: " + _conditions(result.gpu_monitor or {})]
    lines += [f"- Warning: {w}" for w in result.warnings]
    extra = result.extra
    if extra.get("epochs") is not None:
        lines.append(f"- Trained {extra['epochs']:.1f} epochs; test accuracy {extra.get('test_accuracy', 0):.1%}.")
    if extra.get("epoch_s_estimate") is not None:
        lines.append(f"- Training accuracy over the run {extra['train_accuracy']:.1%}; "
                     f"one epoch ({extra['steps_per_epoch']} steps) at this pace: {extra['epoch_s_estimate']:.0f} s "
                     "(median step x steps).")
    if extra.get("inference"):
        lines += _sweep_lines(extra["inference"])
    ty = a.type
    lines += ["", "## Phase 2: bottleneck type", "", "What each suspect costs, as a share of the step:", ""]
    lines += [f"- {kind}: {cost:.1%}" for kind, cost in ty["costs"].items()]
    lines += ["", "- GPU utilisation (NVML, timed steps): "
                  f"{fmt(ty['gpu_util'], '.0f')}{'%' if ty['gpu_util'] is not None else ''}",
              f"- {'.item() calls (CPU proxy for syncs)' if cpu else 'Host syncs'} per step: "
              f"{fmt(ty['syncs_per_step'], '.1f')}, blocking the host {fmt(ty['sync_ms_per_step'], '.3f')} ms per step",
              f"- GPU idle share over the profiled steps: {fmt(ty['gpu_idle_share'], '.0%')}",
              f"- Host time inside next(batches): {fmt(ty['host_data_share'], '.1%')} of the wall time"
              + ("" if cpu else " (on a GPU this includes blocking on a full launch queue; the data cost above is the "
                                "GPU's wait, from CUDA events)"),
              "", "## Phase 3: component", "",
              f"Each phase of every timed step between {'CUDA events' if not cpu else 'perf_counter calls'} "
              "(`--phase-timing`); shares of the mean step; peak memory inside each phase (CUDA).", "",
              "| phase | mean ms | share of step | peak MB |", "|---|---:|---:|---:|"]
    for c in a.components:
        lines.append(f"| {c['phase']} | {c['mean_ms']:.3f} | {c['share']:.1%} | {fmt(c['peak_mb'], '.0f')} |")
    key = a.operations["key"] or "self_cpu_us"
    unit = "self device time" if "device" in key else "self CPU time"
    lines += ["", "## Phase 4: operations", "", f"Per profiled step, by {unit}.", "",
              "| kind of op | ms per step | calls |", "|---|---:|---:|"]
    for k in a.operations["by_kind"]:
        lines.append(f"| {k['name']} | {k[key] / 1000:.3f} | {k['calls']:.0f} |")
    ev = result.evidence
    views = ev.views if ev else {}
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
    mem = (ev.memory if ev else None) or {}
    lines += ["", "## Memory and traces", ""]
    if ev:
        lines.append(f"- Timeline trace: `{env.shown_path(ev.trace)}` (`make tensorboard`, or drop it on https://ui.perfetto.dev)")
    if mem.get("timeline"):
        lines.append(f"- The profiler's memory timeline: `{env.shown_path(mem['timeline'])}` (open in a browser)")
    if mem.get("snapshot"):
        lines.append(f"- CUDA memory snapshot: `{env.shown_path(mem['snapshot'])}`; to view it: {mem['view_snapshot']}")
    lines += [f"- {n}" for n in mem.get("notes", [])]
    lines.append("")
    reports_dir = Path(reports_dir)
    md, png = reports_dir / f"baseline_{result.workload}.md", reports_dir / f"baseline_{result.workload}.png"
    atomic_write_bytes(png, _plot(name, result, a))
    atomic_write_text(md, "\n".join(lines))
    return [md, png]


def parse_args(argv):
    p = OneLineParser(prog="python -m common.runners.diagnose", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", nargs="?", choices=WORKLOADS, help="diagnose this workload's baseline")
    p.add_argument("--script", help="diagnose another harness script instead (a path)")
    launch.add_flags(p)
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
    launch.use_cuda(args.device)
    reports = Path(args.reports_dir)
    name = args.workload or Path(args.script).stem
    workload = args.workload or catalog.identify(args.script)[1]
    data = launch.data_flags(args.data, WORKLOADS)[workload]
    launch.check_data(args.data, WORKLOADS)  # every path given, as its loader reads it
    cpus = launch.cpu_set(args.cpus)
    if args.script_args:  # as the script's parser reads them; a --script may add flags of its own
        import baselines

        check_script_flags(args.script_args, workload, {} if args.script else baselines.DEFAULTS,
                           prog=str(args.script) if args.script else f"python -m {BASELINES[workload]}",
                           reserved=("out", "trace_dir", "memory_dir"), known_only=bool(args.script))
    out_dir = launch.output_folder(reports, "diagnose", name)  # checked ...
    launch.make_folder(out_dir, reports)  # ... and created once every input has passed
    target = ["-m", BASELINES[args.workload]] if args.workload else [str(Path(args.script).resolve())]
    flags = ["--phase-timing", "--memory-dir", str(out_dir / "memory"),
             "--trace-dir", str(reports / "traces" / "diagnose" / name),
             "--device", args.device] + (["--smoke"] if args.smoke else [])
    flags += data + args.script_args
    print(f"diagnose {name}: running {' '.join(target)} with per-phase timing (log: {out_dir / 'result.log'})",
          flush=True)

    def echo(line):
        if not line.startswith(("USDT", "[W", "ERROR:")):
            print("  " + line.rstrip(), flush=True)

    outcome = launch.child(target, flags, out_dir / "result.json", cpus=cpus, echo=echo,
                            rerun=f"make diagnose-{workload}")
    if outcome.kind != "ok":
        why = (f"ran out of memory ({outcome.result.oom.stage})" if outcome.kind == "oom"
               else f"failed (exit {outcome.returncode})")
        print(f"diagnose {name}: the run {why} after {outcome.seconds:.0f} s; see {outcome.log}", file=sys.stderr)
        return 1
    result = outcome.result
    analysis = analyse(result)
    command = (f"make diagnose-{args.workload}" if args.workload and not argv[1:]
               else "python -m common.runners.diagnose " + " ".join(argv))
    written = render(name, result, analysis, command, reports)
    write_result(out_dir / "analysis.json", analysis)
    print(f"verdict: {analysis.verdict}")
    for f in analysis.findings:
        print(f"  - {f.kind} ({f.cost:.0%} of the step): {f.says} -> recipes: {', '.join(f.recipes) or 'none'}")
    print("report: " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CookbookError as e:
        exit_with(e, "common.runners.diagnose")
