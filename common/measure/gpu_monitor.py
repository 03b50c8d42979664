"""NVML sampling during the timed steps: utilisation, memory, temperature, power, clocks, P-state,
throttle reasons and other processes on the GPU. Turns what it sees into warnings for the report
(throttling, clock changes, other processes), since any of them makes a timing less trustworthy.

pynvml (nvidia-ml-py) is optional: without it, or without a GPU, the monitor is off with a notice.
NVML calls do not touch the CUDA stream, so sampling adds no sync to the timed steps.
"""
import os
import threading
import time

import torch

from common.analysis.results_run import GpuReport
from common.measure import memory

# clocks-event (throttle) reason bits from nvml.h; GPU idle is not a slowdown
THROTTLE_BITS = {
    0x2: "applications clocks setting", 0x4: "software power cap", 0x8: "hardware slowdown",
    0x10: "sync boost", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
    0x80: "hardware power brake", 0x100: "display clock setting",
}
CLOCK_SPREAD = 0.05  # an SM clock that moves by more than 5% during the run is worth a warning


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def _nvml():
    import pynvml  # optional

    return pynvml


def _handle(nvml, device: torch.device):
    """(NVML handle, notice) of the GPU torch computes on. NVML numbers the GPUs in PCI order and ignores
    CUDA_VISIBLE_DEVICES, so cuda:0 may be NVML's GPU 2: found by its UUID, else its PCI address."""
    index = device.index
    try:
        index = memory.cuda_index(device)
        props = torch.cuda.get_device_properties(index)
        lookups = (lambda: nvml.nvmlDeviceGetHandleByUUID(f"GPU-{props.uuid}"),  # torch's UUID has no prefix
                   lambda: nvml.nvmlDeviceGetHandleByPciBusId(
                       f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"))
    except Exception:
        lookups = ()
    for lookup in lookups:
        try:
            return lookup(), None
        except Exception:
            pass
    index = index or 0
    return nvml.nvmlDeviceGetHandleByIndex(index), (f"GPU monitor: NVML's GPU {index}, found by index, may not be "
                                                    f"cuda:{index} (CUDA_VISIBLE_DEVICES renumbers them)")


class GpuMonitor:
    def __init__(self, device, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.samples, self.notice = [], None
        self._stop = threading.Event()
        self._thread = None
        self.nvml = self.handle = None
        if device.type != "cuda":
            self.notice = "GPU monitor off: no CUDA device"
            return
        try:
            nvml = _nvml()
            nvml.nvmlInit()
            self.handle, self.notice = _handle(nvml, device)
            self.nvml = nvml
        except Exception as e:  # no pynvml, or no NVML driver library
            self.notice = f"GPU monitor off: NVML unavailable ({type(e).__name__})"

    def sample(self) -> dict:
        nvml, h = self.nvml, self.handle
        util = nvml.nvmlDeviceGetUtilizationRates(h)
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        reasons = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                   or nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        try:
            others = [p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(h) if p.pid != os.getpid()]
        except Exception:  # not permitted in some containers
            others = []
        return {
            "t": time.perf_counter(),
            "gpu_util": util.gpu, "mem_util": util.memory, "mem_used_mb": mem.used / 2**20,
            "temp_c": nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
            "power_w": nvml.nvmlDeviceGetPowerUsage(h) / 1000,
            "power_limit_w": nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
            "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM),
            "pstate": nvml.nvmlDeviceGetPerformanceState(h),
            "throttle_mask": reasons(h),
            "other_pids": others,
        }

    def _run(self):
        while not self._stop.is_set():
            try:
                self.samples.append(self.sample())
            except Exception as e:
                self.notice = f"GPU monitor stopped: {type(e).__name__}"
                return
            self._stop.wait(self.interval_s)

    def __enter__(self):
        if self.nvml is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            try:
                self.samples.append(self.sample())  # at least one sample, even for a short run
            except Exception:
                pass
        return False

    def report(self, siblings: set[int] = frozenset()) -> GpuReport:
        """What the samples show, and the warnings they call for; siblings: the pids of this process's
        pipeline (common.measure.gate), idle during its steps, never another process's work."""
        if not self.samples:
            return GpuReport(available=False, notice=self.notice)
        s = self.samples
        pick = lambda key: [x[key] for x in s]  # noqa: E731
        sm = pick("sm_clock_mhz")
        mask = 0
        for m in pick("throttle_mask"):
            mask |= m
        others = sorted({pid for x in s for pid in x["other_pids"]} - set(siblings))
        warnings = []
        if throttle_names(mask):
            warnings.append("GPU throttled during the run: " + ", ".join(throttle_names(mask)))
        if max(sm) > 0 and (max(sm) - min(sm)) / max(sm) > CLOCK_SPREAD:
            warnings.append(f"SM clock changed during the run: {min(sm)}-{max(sm)} MHz")
        if others:
            warnings.append(f"other processes on the GPU during the run: pid {', '.join(map(str, others))}")
        return GpuReport(
            available=True, samples=len(s),
            gpu_util_mean=sum(pick("gpu_util")) / len(s),
            mem_used_mb_max=max(pick("mem_used_mb")),
            temp_c_max=max(pick("temp_c")),
            power_w_mean=sum(pick("power_w")) / len(s), power_limit_w=s[-1]["power_limit_w"],
            sm_clock_mhz=[min(sm), max(sm)],
            mem_clock_mhz=[min(pick("mem_clock_mhz")), max(pick("mem_clock_mhz"))],
            pstates=sorted(set(pick("pstate"))),
            throttle_reasons=throttle_names(mask), other_pids=others,
            warnings=warnings, notice=self.notice,
        )
