"""The markdown report of a comparison: reports/<recipe>.md, a plot, side-by-side HTML diffs.

    python -m common.report amp     # re-render from reports/results/amp/comparison.json

Every number comes from the result files of a run; nothing here is typed in by hand.
"""
import sys
from pathlib import Path

from common import diffview, env, mechanism, memory, plotting, stats
from common.errors import CookbookError, exit_with
from common.results import atomic_write_bytes, atomic_write_text, read_result

VIEW_TITLES = {
    "device_time": "Top ops by self device time",
    "self_memory": "Top ops by self memory",
    "cpu_time": "Top ops by CPU time (incl. children)",
    "calls": "Top ops by call count",
}
VIEW_ROWS = 8


def _fmt(value, spec, none="n/a"):
    return none if value is None else format(value, spec)


def _value(key, v):
    if key.endswith("_us"):
        return f"{v / 1000:.3f} ms" if v >= 1000 else f"{v:.1f} us"
    if key == "self_mem_bytes":
        return f"{v / 2**20:.2f} MB"
    return f"{v:.1f}"


def _mem_label(mem):
    return "peak MB (allocated)" if "max_allocated_mb" in mem else "peak MB (CPU RSS)"


def device_label(comparison):
    for entry in comparison["workloads"].values():
        for v in ("slow", "fast"):
            if v in entry:
                return env.describe_device(entry[v]["env"])
    return "no successful run"


def terminal_table(comparison) -> str:
    head = f"{'workload':10} {'variant':7} {'median ms':>10} {'p95 ms':>9} {'cv':>6} {'samples/s':>11} " \
           f"{'peak MB':>9} {'syncs/st':>9} {'kern/st':>8}  result"
    lines = [f"{comparison['recipe']} on {device_label(comparison)}", head, "-" * len(head)]
    noisy = False
    for workload, entry in comparison["workloads"].items():
        for variant in ("slow", "fast"):
            v = entry.get(variant)
            if v is None:
                lines.append(f"{workload:10} {variant:7} {'FAILED':>10}")
                continue
            if v["status"] == "oom":
                lines.append(f"{workload:10} {variant:7} out of memory at batch {v['oom']['batch_size']} "
                             f"({v['oom']['stage']})")
                continue
            s, ev = v["stats"], v["evidence"] or {}
            noisy |= stats.is_noisy(s)
            tail = verdict(entry) + f", parity {'ok' if entry['parity']['ok'] else 'FAILED'}" \
                if variant == "fast" and "speedup" in entry else ""
            lines.append(
                f"{workload:10} {variant:7} {s['median_ms']:10.3f} {s['p95_ms']:9.3f} {s['cv']:6.1%} "
                f"{s['throughput_per_s']:11.1f} {memory.headline_mb(v['memory']):9.0f} "
                f"{_fmt(ev.get('syncs_per_step'), '9.1f', '      n/a')} {_fmt(ev.get('kernels_per_step'), '8.0f', '     n/a')}"
                f"  {'NOISY ' if stats.is_noisy(s) else ''}{tail}")
            lines += [f"{'':18} WARNING: {w}" for w in v["warnings"]]
    if noisy:
        lines.append(NOISY_ADVICE)
    return "\n".join(lines)


NOISY_ADVICE = (f"NOISY: a coefficient of variation above {stats.NOISY_CV:.0%}; re-run on an idle machine, "
                "with more steps (ARGS='-- --steps N') or more rounds (ARGS='--rounds 5')")


def verdict(entry) -> str:
    """The speedup, or "no significant difference" when the medians' 95% ranges overlap. A fast
    twin that is slower is a result too, and is said in words."""
    if entry["significant"]:
        return f"{entry['speedup']:.2f}x" + (" (the fast twin is SLOWER)" if entry["speedup"] < 1 else "")
    return f"no significant difference ({entry['speedup']:.2f}x)"


def _plot(comparison) -> bytes:
    plt = plotting.pyplot()

    names = [w for w, e in comparison["workloads"].items() if "speedup" in e]
    fig, axes = plt.subplots(2, max(len(names), 1), figsize=(4.5 * max(len(names), 1), 6.5), squeeze=False)
    for i, w in enumerate(names):
        e = comparison["workloads"][w]
        med = [e[v]["stats"]["median_ms"] for v in ("slow", "fast")]
        p95 = [e[v]["stats"]["p95_ms"] - m for v, m in zip(("slow", "fast"), med)]
        ax = axes[0][i]
        ax.bar(["slow", "fast"], med, yerr=[[0, 0], p95], capsize=6, color=["#8c8c8c", "#2a7ab9"])
        ax.set_title(f"{w}: step time (median, p95 whisker)\n{verdict(e)}")
        ax.set_ylabel("ms per step")
        mem = [memory.headline_mb(e[v]["memory"]) for v in ("slow", "fast")]
        ax = axes[1][i]
        ax.bar(["slow", "fast"], mem, color=["#8c8c8c", "#2a7ab9"])
        ax.set_title(f"{w}: {_mem_label(e['slow']['memory'])}")
        ax.set_ylabel("MB")
    fig.suptitle(f"{comparison['recipe']}: {device_label(comparison)}", fontsize=9)
    fig.tight_layout()
    return plotting.png(fig)


def _env_table(comparison):
    any_entry = next((e[v] for e in comparison["workloads"].values() for v in ("slow", "fast") if v in e), None)  # noqa: E501
    if any_entry is None:
        return ["No variant finished."]
    e = any_entry["env"]
    device = (f"{e['gpu_name']} ({e['gpu_memory_gb']} GB)" if e["device_type"] == "cuda"
              else f"CPU, {e['cpu']} x{e['cpu_count']}: a CPU run, not a GPU result")
    rows = [("device", device), ("driver / CUDA / cuDNN", f"{e['driver']} / {e['cuda']} / {e['cudnn']}"),
            ("TF32 matmul / cuDNN, cudnn.benchmark", f"{e['tf32_matmul']} / {e['tf32_cudnn']}, {e['cudnn_benchmark']}"),
            ("torch / torchvision / Python", f"{e['torch']} / {e['torchvision']} / {e['python']}"),
            ("CPU", f"{e['cpu']} x{e['cpu_count']} (torch threads {e['torch_threads']})"),
            ("date (UTC) / commit", f"{e['date']} / {e['git_commit']}"),
            ("rounds", f"{comparison['rounds']} (slow and fast alternate; who goes first alternates too)"),
            ("mode", "smoke (tiny sizes)" if comparison["smoke"] else "full presets for this device"),
            ("command", f"`{comparison['command']}`")]
    return ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]


def _workload_section(recipe, workload, entry, reports_dir, keys=()):
    out = [f"## {workload}", ""]
    ran = [v for v in ("slow", "fast") if v in entry]
    for v in ran:
        if entry[v]["status"] == "oom":
            o = entry[v]["oom"]
            out += [f"- **{v}: out of memory at batch {o['batch_size']}** ({o['stage']}): `{o['message']}`"]
    for v in ("slow", "fast"):
        if v not in entry:
            out += [f"- **{v}: failed**; see the failed runs below."]
    if "speedup" not in entry:
        ok = [v for v in ran if entry[v]["status"] == "ok"]
        for v in ok:
            s = entry[v]["stats"]
            out += [f"- {v} ran: median {s['median_ms']:.3f} ms, p95 {s['p95_ms']:.3f} ms, "
                    f"{s['throughput_per_s']:.1f} samples/s, {memory.headline_mb(entry[v]['memory']):.0f} MB"]
        out += ["", "No speedup: only one variant of the pair finished.", ""]
        return out + _diff_section(recipe, workload, reports_dir)
    slow, fast = entry["slow"], entry["fast"]
    src = slow["data_source"] or {}
    cfg = slow["config"]
    size = f", {cfg['image_size']} px crops" if cfg.get("image_size") else ""
    out += [f"Data: **{src.get('kind', '?')}**{' - ' + src['note'] if src.get('note') else ''}. "
            f"Batch {cfg['batch_size']}{size}; {slow['stats']['n']} timed steps per variant over all rounds.", ""]
    mem_label = _mem_label(slow["memory"])
    cpu = slow["env"]["device_type"] != "cuda"
    sync_label = ".item() calls/step (CPU proxy)" if cpu else "host syncs/step"
    out += [f"| variant | median ms | p95 ms | p99 ms | CV | samples/s | {mem_label} | {sync_label} | "
            "kernels/step | ops/step | GFLOP/step | GPU idle | warm-up s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, v in (("slow", slow), ("fast", fast)):
        s, ev = v["stats"], v["evidence"] or {}
        noisy = " (noisy)" if stats.is_noisy(s) else ""
        out.append(f"| {name} | {s['median_ms']:.3f} | {s['p95_ms']:.3f} | {s['p99_ms']:.3f} | {s['cv']:.1%}{noisy} | "
                   f"{s['throughput_per_s']:.1f} | {memory.headline_mb(v['memory']):.0f} | "
                   f"{_fmt(ev.get('syncs_per_step'), '.1f')} | {_fmt(ev.get('kernels_per_step'), '.0f')} | "
                   f"{_fmt(ev.get('ops_per_step'), '.0f')} | "
                   f"{_fmt(v['flops_per_step'] / 1e9 if v.get('flops_per_step') is not None else None, '.3f')} | "
                   f"{_fmt(ev.get('gpu_idle_share'), '.0%')} | "
                   f"{sorted(v['warmup_s'])[len(v['warmup_s']) // 2]:.2f} |")
    mem_s, mem_f = memory.headline_mb(slow["memory"]), memory.headline_mb(fast["memory"])
    par = entry["parity"]
    (s_lo, s_hi), (f_lo, f_hi) = entry["slow_median_ci_ms"], entry["fast_median_ci_ms"]
    headline = (f"**Speedup (median step time): {entry['speedup']:.2f}x**"
                + (" - **the fast twin is slower here**; the recipe's README says when and why" if entry["speedup"] < 1 else "")
                if entry["significant"] else
                f"**No significant difference** (median ratio {entry['speedup']:.2f}x, but the ranges overlap)")
    out += ["", f"- {headline}; 95% range of each median: slow {s_lo:.3f}-{s_hi:.3f} ms, fast {f_lo:.3f}-{f_hi:.3f} ms "
                f"(per-round medians, ms: slow {', '.join(f'{m:.3f}' for m in slow['round_medians_ms'])}; "
                f"fast {', '.join(f'{m:.3f}' for m in fast['round_medians_ms'])})",
            f"- Memory: {mem_f:.0f} MB vs {mem_s:.0f} MB ({(mem_f / mem_s - 1) * 100:+.1f}%)" if mem_s else "- Memory: n/a"]
    for key in (k for k in keys if mechanism.value(k, slow) is not None):  # the point of the recipe, first
        out.append(f"- **Mechanism: {mechanism.label(key, cpu)}**: {mechanism.formatted(key, slow)} (slow) -> "
                   f"{mechanism.formatted(key, fast)} (fast){_change(key, slow, fast)}")
    if par.get("max_rel") is not None:
        out.append(f"- Parity of the {par.get('what', 'training loss')} ({'passed' if par['ok'] else 'FAILED'}) over {par['steps']} steps: the first "
                   f"{par['early_steps']} losses within {par['early_max_rel']:.2%} of each other (tolerance "
                   f"{par['early_rtol'] * 100:.4g}%); {par['window']}-step mean losses within {par['max_rel']:.2%} of "
                   f"the initial loss (worst at steps {par['at_step']}-{par['at_step'] + par['window'] - 1}; tolerance "
                   f"{par['rtol'] * 100:.4g}%); {'all finite' if par['finite'] else 'NOT FINITE'}")
    else:
        out.append(f"- Parity FAILED: {par.get('why')}")
    if cpu:
        out.append("- On CPU the sync column counts `aten::_local_scalar_dense` (`.item()` and the like) outside "
                   "`optimizer.step()` and the data loader, whose tensors stay on the CPU in a GPU run too.")
    if stats.is_noisy(slow["stats"]) or stats.is_noisy(fast["stats"]):
        out.append(f"- {NOISY_ADVICE}")
    notices = sorted(set(slow["notices"]) | set(fast["notices"]))
    out += [f"- Notice: {n}" for n in notices]
    out += [f"- **WARNING ({v})**: {w}" for v in ("slow", "fast") for w in entry[v]["warnings"]]
    gpu = [(v, entry[v].get("gpu_monitor")) for v in ("slow", "fast")]
    out += [f"- GPU monitor ({v}): util {g['gpu_util_mean']:.0f}% mean, SM clock {g['sm_clock_mhz'][0]}-"
            f"{g['sm_clock_mhz'][1]} MHz, max {g['temp_c_max']} C, {g['power_w_mean']:.0f} W of {g['power_limit_w']:.0f} W"
            for v, g in gpu if g and g.get("available")]
    out.append("")
    out += _mechanism_table(slow, fast, keys, cpu)

    if slow["evidence"] and fast["evidence"]:
        out += ["### Profiler evidence (per step, profiled steps of round 1)", ""]
        for view, title in VIEW_TITLES.items():
            vs, vf = slow["evidence"]["views"][view], fast["evidence"]["views"][view]
            if cpu and view == "device_time":
                title = "Top ops by self CPU time (CPU run: no device time)"
            out += [f"**{title}**", "", "| # | slow: op | slow | fast: op | fast |", "|---:|---|---:|---|---:|"]
            for i in range(min(VIEW_ROWS, max(len(vs["rows"]), len(vf["rows"])))):
                a = vs["rows"][i] if i < len(vs["rows"]) else None
                b = vf["rows"][i] if i < len(vf["rows"]) else None
                cell = lambda r, k: (f"`{r['name'][:48]}`", _value(k, r[k])) if r else ("", "")  # noqa: E731
                (an, av), (bn, bv) = cell(a, vs["key"]), cell(b, vf["key"])
                out.append(f"| {i + 1} | {an} | {av} | {bn} | {bv} |")
            out.append("")

    return out + _diff_section(recipe, workload, reports_dir)


def _change(key, slow, fast):
    text = mechanism.change(key, slow, fast)
    return f", {text}" if text else ""


def _mechanism_table(slow, fast, keys, cpu):
    """Every piece of evidence both variants have, the recipe's own first."""
    names = list(keys) + [k for k in mechanism.METRICS if k not in keys]
    # a row where both sides are empty or zero says nothing, unless it is this recipe's evidence
    rows = [k for k in names if mechanism.value(k, slow) or mechanism.value(k, fast)
            or ((k in keys or k == "syncs_per_step") and mechanism.value(k, slow) is not None)]
    out = ["### Mechanism: what the technique moves", "", "| evidence | slow | fast | fast vs slow |", "|---|---:|---:|---:|"]
    for k in rows:
        name = mechanism.label(k, cpu)
        name = f"**{name}**" if k in keys else name
        out.append(f"| {name} | {mechanism.formatted(k, slow)} | {mechanism.formatted(k, fast)} | "
                   f"{mechanism.change(k, slow, fast)} |")
    return out + [""]


def _diff_section(recipe, workload, reports_dir):
    html_name = f"{recipe}_{workload}_diff.html"
    atomic_write_text(reports_dir / html_name, diffview.html(recipe, workload))
    return [f"### The diff ({diffview.changed_lines(recipe, workload)} changed lines; "
            f"[side by side]({html_name}), or `make diff-{recipe}`)", "",
            "```diff", diffview.unified(recipe, workload), "```", ""]


def render_markdown(comparison, reports_dir: Path) -> str:
    recipe = comparison["recipe"]
    lines = [f"# {comparison['title']} (`{recipe}`)", "",
             f"Generated by `make recipe-{recipe}`; every number below comes from that run's result files "
             f"(`reports/results/{recipe}/`). Device: **{device_label(comparison)}**.", ""]
    lines += _env_table(comparison) + ["", f"![step time and memory]({recipe}.png)", ""]
    lines += [f"Parity: both twins start from the same weights and see the same batches; each workload's rule is "
              f"stated with its result. Timing: CUDA events (CPU: perf_counter) around each step, read after the loop; "
              f"warm-up excluded and shown on its own; CV above {stats.NOISY_CV:.0%} is flagged noisy.", ""]
    for workload, entry in comparison["workloads"].items():
        lines += _workload_section(recipe, workload, entry, reports_dir, comparison.get("evidence_keys", ()))
    if comparison["failures"]:
        lines += ["## Failed runs", ""]
        for f in comparison["failures"]:
            lines += [f"- {f['workload']} {f['variant']} round {f['round']}: exit {f['returncode']} ({f['log']})", "",
                      "```", *f["tail"], "```", ""]
    lines += ["## Traces", "",
              f"Profiler traces (round 1) are in `reports/traces/{recipe}/<workload>_<variant>/`:", ""]
    for workload, entry in comparison["workloads"].items():
        for v in ("slow", "fast"):
            ev = entry.get(v, {}).get("evidence")
            if ev:
                lines.append(f"- {workload} {v}: `{env.shown_path(ev['trace'])}`")
    lines += ["", "- TensorBoard: `make tensorboard`, then open http://127.0.0.1:6006/#pytorch_profiler",
              "- Perfetto: open https://ui.perfetto.dev and drop a `.pt.trace.json` file on it",
              f"- Nsight Systems (NVTX ranges per step and phase): `make nsys-{recipe}` where `nsys` is installed", ""]
    return "\n".join(lines)


def render(comparison, reports_dir: Path) -> list[Path]:
    reports_dir = Path(reports_dir)
    recipe = comparison["recipe"]
    md_path, png_path = reports_dir / f"{recipe}.md", reports_dir / f"{recipe}.png"
    text = render_markdown(comparison, reports_dir)  # also writes the HTML diffs
    if any("speedup" in e for e in comparison["workloads"].values()):
        atomic_write_bytes(png_path, _plot(comparison))
    atomic_write_text(md_path, text)  # last: the report appears only once everything it links exists
    return [md_path, png_path] + sorted(reports_dir.glob(f"{recipe}_*_diff.html"))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if len(argv) != 1:
            raise CookbookError("usage: python -m common.report RECIPE")
        reports_dir = env.REPO_ROOT / "reports"
        path = reports_dir / "results" / argv[0] / "comparison.json"
        if not path.exists():
            raise CookbookError(f"no results for {argv[0]!r} in {path.parent}; run make recipe-{argv[0]} first")
        for p in render(read_result(path), reports_dir):
            print(p)
    except CookbookError as e:
        exit_with(e, "common.report")


if __name__ == "__main__":
    main()
