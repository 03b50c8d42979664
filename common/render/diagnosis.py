"""The diagnosis' report: reports/baseline_<workload>.md and its plot, from a run's result and its Diagnosis."""
from pathlib import Path

from common import env
from common.analysis.metrics import fmt
from common.analysis.results_diagnose import Diagnosis
from common.analysis.results_run import GpuReport, OpViews, RunResult
from common.files import atomic_write_bytes
from common.render import page, plots
from common.render.report import VIEW_ROWS, VIEW_TITLES, view_title, view_value


def _plot(name, result: RunResult, analysis: Diagnosis) -> bytes:
    return plots.png(_figure(name, result, analysis))


def _figure(name, result: RunResult, analysis: Diagnosis):
    """Where a step goes (phases), the time per kind of op, and the inference sweep where there is one."""
    plt = plots.pyplot()

    sweep = (result.extra.get("inference") or {}).get("rows")
    panels = 3 if sweep else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.2), layout="constrained")
    comps = analysis.components
    axes[0].barh([c.phase for c in comps][::-1], [c.mean_ms for c in comps][::-1], color="#2a7ab9")
    axes[0].set_title(f"where a step goes (step {analysis.bottleneck.step_ms:.2f} ms)", fontsize=10)
    axes[0].set_xlabel("mean ms per step")
    kinds = analysis.operations.by_kind[:8]
    key = analysis.operations.key or "self_cpu_us"
    axes[1].barh([plots.wrap(k.name, 22) for k in kinds][::-1], [getattr(k, key) / 1000 for k in kinds][::-1],
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


def _conditions(gpu: GpuReport | None) -> str:
    if not gpu or not gpu.available:
        return ("NVML unavailable (no GPU or no pynvml): no utilisation, clocks or power; "
                "the rest of the diagnosis runs.")
    return (f"GPU util {gpu.gpu_util_mean:.0f}% mean, "
            f"SM clock {gpu.sm_clock_mhz[0]}-{gpu.sm_clock_mhz[1]} MHz, "
            f"memory clock {gpu.mem_clock_mhz[0]}-{gpu.mem_clock_mhz[1]} MHz, P-states {gpu.pstates}, max "
            f"{gpu.temp_c_max} C, {gpu.power_w_mean:.0f} W of {gpu.power_limit_w:.0f} W, throttle reasons: "
            f"{', '.join(gpu.throttle_reasons) or 'none'}")


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


def _view_lines(views: OpViews | None, cpu: bool) -> list[str]:
    """The profiler's four views, titled and formatted as in a recipe's report."""
    lines = []
    for view in VIEW_TITLES if views else ():
        title, v = view_title(view, cpu), getattr(views, view)
        lines += ["", f"The seed's view: {title[0].lower() + title[1:]}.", "", "| op | value per step |", "|---|---:|"]
        lines += [f"| `{r.name[:60]}` | {view_value(v.key, getattr(r, v.key) or 0.0)} |" for r in v.rows[:VIEW_ROWS]]
    return lines


def render(name: str, result: RunResult, a: Diagnosis, command: str, reports_dir: Path) -> list[Path]:
    """reports/baseline_<workload>.md and its plot; the files written."""
    e = result.env
    src = result.data_source
    lines = [f"# Diagnosis: {name}", "",
             f"Generated by `{command}` on **{env.describe_device(e)}**, {e.date} (commit {e.git_commit}); "
             f"torch {e.torch}. Data: {src.kind if src else '?'}{' - ' + src.note if src and src.note else ''}. "
             "Every number below comes from that run.", "",
             "## Verdict", "", f"**{a.verdict[0].upper() + a.verdict[1:]}.**", "",
             "Every suspect, ranked by what it costs (its measured share of the step):", ""]
    for f in a.findings:
        links = ", ".join(f"[`{r}`](../recipes/{r}/README.md)" for r in f.recipes) or "none"
        lines.append(f"- **{f.kind}, {f.cost:.0%}**: {f.says}. Recipes: {links}.")
    lines += ["", f"![where the time goes](baseline_{result.workload}.png)"]
    lines += phase_sections(result, a)
    reports_dir = Path(reports_dir)
    md, png = reports_dir / f"baseline_{result.workload}.md", reports_dir / f"baseline_{result.workload}.png"
    atomic_write_bytes(png, _plot(name, result, a))
    page.write(md, "\n".join(lines))
    return [md, png]


def phase_sections(result: RunResult, a: Diagnosis) -> list[str]:
    """The seed's four phases, then memory and traces: the part a baseline's and the doctor's reports share."""
    cpu = result.device != "cuda"
    b = a.baseline
    lines = ["", "## Phase 1: baseline", "",
              f"- Batch {b.batch_size}, {result.timing.summary.n} timed steps: {fmt(b.step_ms, '.3f')} ms per step "
              f"(the timed stretch over its steps); single steps: median {b.median_ms:.3f} ms, "
              f"p95 {b.p95_ms:.3f} ms, CV {b.cv:.1%}; {b.throughput:.1f} samples/s; peak memory "
              f"{b.peak_mb:.0f} MB ({'CPU process RSS' if cpu else 'allocated'}); "
              f"{fmt(b.tflops, '.2f')} TFLOP/s" + (f", MFU {fmt(b.mfu, '.1%')}" if not cpu else "") + ".",
              "- Conditions: " + _conditions(result.gpu_monitor)]
    lines += [f"- **Steps in bursts**: {b.bursts.words}"] if b.bursts else []
    lines += [f"- Warning: {w}" for w in result.warnings]
    extra = result.extra
    if extra.get("epochs") is not None:
        lines.append(f"- Trained {extra['epochs']:.1f} epochs; test accuracy {extra.get('test_accuracy', 0):.1%}.")
    if extra.get("epoch_s_estimate") is not None:
        lines.append(f"- Training accuracy over the run {extra['train_accuracy']:.1%}; "
                     f"one epoch ({extra['steps_per_epoch']} steps) at this pace: {extra['epoch_s_estimate']:.0f} s "
                     "(ms per step x steps).")
    if extra.get("inference"):
        lines += _sweep_lines(extra["inference"])
    ty = a.bottleneck
    lines += ["", "## Phase 2: bottleneck type", "", "What each suspect costs, as a share of the step:", ""]
    lines += [f"- {kind}: {cost:.1%}" for kind, cost in ty.costs.items()]
    lines += ["", "- GPU utilisation (NVML, timed steps): "
                  f"{fmt(ty.gpu_util, '.0f')}{'%' if ty.gpu_util is not None else ''}",
              f"- {'.item() calls (CPU proxy for syncs)' if cpu else 'Host syncs'} per step: "
              f"{fmt(ty.syncs_per_step, '.1f')}, blocking the host {fmt(ty.sync_ms_per_step, '.3f')} ms per step",
              f"- GPU idle share over the profiled steps: {fmt(ty.gpu_idle_share, '.0%')}",
              f"- Host time inside next(batches): {fmt(ty.host_data_share, '.1%')} of the wall time"
              + ("" if cpu else " (on a GPU this includes blocking on a full launch queue; the data cost above is the "
                                "GPU's wait, from CUDA events)"),
              "", "## Phase 3: component", "",
              f"Each phase of every timed step between {'CUDA events' if not cpu else 'perf_counter calls'} "
              "(the harness's `--phase-timing`, or the doctor's hooks); shares of the mean step; peak memory inside "
              "each phase (CUDA).", "",
              "| phase | mean ms | share of step | peak MB |", "|---|---:|---:|---:|"]
    for c in a.components:
        lines.append(f"| {c.phase} | {c.mean_ms:.3f} | {c.share:.1%} | {fmt(c.peak_mb, '.0f')} |")
    key = a.operations.key or "self_cpu_us"
    unit = "self device time" if "device" in key else "self CPU time"
    lines += ["", "## Phase 4: operations", "", f"Per profiled step, by {unit}.", "",
              "| kind of op | ms per step | calls |", "|---|---:|---:|"]
    for k in a.operations.by_kind:
        lines.append(f"| {k.name} | {getattr(k, key) / 1000:.3f} | {k.calls:.0f} |")
    ev = result.evidence
    lines += _view_lines(ev.views if ev else None, cpu)
    mem = ev.memory if ev else None
    lines += ["", "## Memory and traces", ""]
    if ev:
        lines.append(f"- Timeline trace: `{env.shown_path(ev.trace)}` (`make tensorboard`, or drop it on https://ui.perfetto.dev)")
    if ev and ev.page:
        lines.append(f"- Its views in one page that needs no network: `{env.shown_path(ev.page)}`")
    if mem and mem.timeline:
        lines.append(f"- The profiler's memory timeline: `{env.shown_path(mem.timeline)}` (open in a browser)")
    if mem and mem.snapshot:
        lines.append(f"- CUDA memory snapshot: `{env.shown_path(mem.snapshot)}`; to view it: {mem.view_snapshot}")
    lines += [f"- {n}" for n in (mem.notes if mem else [])]
    lines.append("")
    return lines
