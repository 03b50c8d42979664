"""The evidence a report shows per variant, by name. A recipe lists in EVIDENCE the names its
technique must move (e.g. sync_removal: "syncs_per_step"); the report leads with those."""
from common import memory


def _ev(v):
    return v.get("evidence") or {}


def _phase(name, key):
    return lambda v: (_ev(v).get("phases") or {}).get(name, {}).get(key)


def _host(key):
    return lambda v: (v.get("host") or {}).get(key)


# name -> (label, CPU label or None, how to read it from an aggregated variant, format)
METRICS = {
    "syncs_per_step": ("host syncs per step", ".item() calls per step (CPU proxy for syncs)",
                       lambda v: _ev(v).get("syncs_per_step"), ".1f"),
    "kernels_per_step": ("GPU kernels per step", None, lambda v: _ev(v).get("kernels_per_step"), ".0f"),
    "ops_per_step": ("aten ops per step", None, lambda v: _ev(v).get("ops_per_step"), ".0f"),
    "optimizer_kernels": ("optimizer: GPU kernels per step", None, _phase("optimizer", "kernels"), ".0f"),
    "optimizer_ops": ("optimizer: aten ops called per step", None, _phase("optimizer", "ops"), ".0f"),
    "optimizer_host_ms": ("optimizer: host ms per step (profiled)", None, _phase("optimizer", "host_ms"), ".3f"),
    "optimizer_gpu_ms": ("optimizer: GPU kernel ms per step (profiled)", None, _phase("optimizer", "kernel_ms"), ".3f"),
    "forward_kernels": ("forward: GPU kernels per step", None, _phase("forward", "kernels"), ".0f"),
    "forward_ops": ("forward: aten ops called per step", None, _phase("forward", "ops"), ".0f"),
    "data_wait_share": ("share of step time waiting for data", None, _host("data_wait_share"), ".1%"),
    "data_wait_ms": ("wait for the next batch, ms (median)", None, _host("data_wait_ms_median"), ".3f"),
    "cpu_ms_per_step": ("CPU ms per step, training process (all threads)", None, _host("cpu_ms_per_step"), ".2f"),
    "worker_cpu_ms_per_step": ("CPU ms per step, loader workers", None, _host("worker_cpu_ms_per_step"), ".2f"),
    "first_step_s": ("first step, s (compilation, autotuning)", None, _host("first_step_s"), ".2f"),
    "gflop_per_step": ("GFLOP per step (FlopCounterMode)", None,
                       lambda v: v["flops_per_step"] / 1e9 if v.get("flops_per_step") else None, ".3f"),
    "peak_mb": ("peak memory, MB", None, lambda v: memory.headline_mb(v["memory"]) if v.get("memory") else None, ".0f"),
    "gpu_idle_share": ("GPU idle share (profiled steps)", None, lambda v: _ev(v).get("gpu_idle_share"), ".0%"),
}
HOST_KEYS = ("first_step_s", "data_wait_share", "data_wait_ms_median", "cpu_ms_per_step", "worker_cpu_ms_per_step")


def label(name: str, cpu: bool) -> str:
    text, cpu_text, _, _ = METRICS[name]
    return cpu_text if cpu and cpu_text else text


def value(name: str, variant: dict):
    return METRICS[name][2](variant)


def formatted(name: str, variant: dict) -> str:
    v = value(name, variant)
    return "n/a" if v is None else format(v, METRICS[name][3])


def change(name: str, slow: dict, fast: dict) -> str:
    a, b = value(name, slow), value(name, fast)
    if a is None or b is None:
        return ""
    if METRICS[name][3].endswith("%"):
        return f"{(b - a) * 100:+.1f} points"
    if a == 0:
        return "from 0" if b else "same"
    if b == 0:
        return "gone"
    return f"{b / a:.2f}x"
