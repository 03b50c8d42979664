"""The seed's four-phase diagnosis read from one result of a harness script run with --phase-timing:
each suspect's measured cost as a share of the step, ranked, the largest one the verdict."""
from common import catalog
from common.analysis import metrics
from common.analysis.aggregate import aggregate
from common.analysis.results_diagnose import Baseline, Bottleneck, Component, Diagnosis, DiagnosisOps, Finding
from common.analysis.results_run import RunResult

SYNC_MIN = 1.0  # host syncs per step inside the loop worth a finding, whatever they cost


def cures() -> dict[str, list[str]]:
    """Each cost's recipes, in the order their specs place them (common.spec: cures)."""
    found = {}
    for recipe in catalog.available():
        for cost, place in catalog.spec(recipe).cures.items():
            found.setdefault(cost, []).append((place, recipe))
    return {cost: [r for _, r in sorted(places)] for cost, places in found.items()}


RECIPES = cures()


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
    gpu = result.gpu_monitor
    views = ev.views if ev else None
    return Diagnosis(
        baseline=Baseline(batch_size=result.config.batch_size, cv=t.summary.cv,
                          bursts=t.bursts,
                          **{m: metrics.get(m).value(v) for m in ("step_ms", "median_ms", "p95_ms", "throughput",
                                                                  "peak_mb", "tflops", "mfu")}),
        bottleneck=Bottleneck(step_ms=step, costs={f.kind: f.cost for f in findings},
                              gpu_util=gpu.gpu_util_mean if gpu and gpu.available else None,
                              syncs_per_step=ev.syncs_per_step if ev else None,
                              sync_ms_per_step=ev.sync_ms_per_step if ev else None,
                              gpu_idle_share=ev.gpu_idle_share if ev else None, host_data_share=t.host_data_share),
        components=[Component(phase=p, mean_ms=ms, share=_share(ms, step), peak_mb=(t.phase_peak_mb or {}).get(p))
                    for p, ms in phases.items()],
        operations=DiagnosisOps(key=views.device_time.key, top=views.device_time.rows[:10],
                                by_kind=views.by_kind.rows) if views else DiagnosisOps(),
        findings=findings, verdict=findings[0].says)
