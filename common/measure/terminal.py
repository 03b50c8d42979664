"""The one-screen summary a script prints when it finishes: what ran, on what, and its figures."""
from pathlib import Path

from common import env
from common.analysis import stats
from common.analysis.metrics import fmt
from common.analysis.results_run import DataSource, RunResult


def summary(r: RunResult, out: Path) -> str:
    """The lines a finished run prints; `out` is where its result was written."""
    t, s, m, ev, cfg = r.timing, r.timing.summary, r.memory, r.evidence, r.config
    src = r.data_source or DataSource(kind="?")
    size = f", image {cfg.image_size}px" if cfg.image_size else ""
    mem = (f"{m.peak_mb:.0f} MB allocated ({m.reserved_mb:.0f} MB reserved)" if m.kind == "cuda_allocator"
           else f"{m.peak_mb:.0f} MB peak RSS (CPU, whole process)")
    longer = f" (more than the preset's {cfg.steps}: at least {cfg.min_time_s:g} s of steps)" if s.n > cfg.steps else ""
    setups = "".join(f"; {name} {sec:.3f} s before the loop, counted in both"
                     for name, sec in ((r.compile and r.compile.setup_s) or {}).items())
    lines = [
        f"{r.recipe}/{r.pair} {r.variant} on {env.describe_device(r.env)}",
        f"  data       {src.kind}{' - ' + src.note if src.note else ''}",
        f"  setup      batch {cfg.batch_size}{size}, {s.n} timed steps{longer} after {t.warmup_steps} warm-up "
        f"steps ({t.warmup_s:.2f} s; the first step alone {fmt(t.first_step_s, '.2f')} s, compile included{setups})",
        f"  step time  {s.mean_ms:.3f} ms per step (the timed stretch over its steps); single steps: median "
        f"{s.median_ms:.3f} ms  p95 {s.p95_ms:.3f}  p99 {s.p99_ms:.3f}  cv {s.cv:.1%}"
        f"{'  NOISY' if stats.is_noisy(s.cv) else ''}",
        f"  throughput {s.throughput_per_s:.1f} samples/s",
        f"  host       waiting for data {fmt(t.data_wait_share, '.1%')} of the step time (host time in next(): "
        f"{fmt(t.host_data_share, '.1%')}); CPU {t.cpu_ms_per_step:.2f} ms/step in this process, "
        f"{fmt(t.worker_cpu_ms_per_step, '.2f')} in its workers",
        f"  memory     {mem}",
    ]
    if t.bursts:  # the pattern is a finding: the pipeline delivers in groups
        lines.insert(5, f"  bursts     {t.bursts.words}")
    if r.flops_per_step is not None:
        lines.append(f"  compute    {r.flops_per_step / 1e9:.3f} GFLOP per step (FlopCounterMode), "
                     f"{r.flops_per_step / s.mean_ms / 1e9:.2f} TFLOP/s at that pace")
    if ev:
        lines.append(f"  evidence   syncs/step {ev.syncs_per_step:.1f}  kernels/step {fmt(ev.kernels_per_step, '.0f')}"
                     f"  ops/step {ev.ops_per_step:.0f}  GPU idle {fmt(ev.gpu_idle_share, '.0%')}")
        lines.append(f"  trace      {ev.trace}")
        if ev.page:
            lines.append(f"  page       {ev.page} (its views in a browser, no network needed)")
    lines += [f"  result     {out}"] + [f"  notice     {n}" for n in r.notices]
    lines += [f"  WARNING    {w}" for w in r.warnings]
    return "\n".join(lines)
