"""Nsight Compute's per-kernel metrics, read from `ncu --import R --csv --page details --print-units base`:
one row per kernel launch and metric (those asked for with --metrics carry their own names), columns
found by their header (they change between ncu versions), units turned into base units (a version
that still scales them writes "us", "Mbyte"), "n/a" kept as missing.

Per kernel: duration, compute (SM) and memory throughput as % of peak, achieved occupancy, and the
arithmetic intensity (FLOP per DRAM byte) to set against the card's ridge point."""
from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from dataclasses import dataclass, field

DURATION = "gpu__time_duration.sum"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
OCCUPANCY_PCT = "sm__warps_active.avg.pct_of_peak_sustained_active"
DRAM_BYTES = "dram__bytes.sum"
# FLOPs on the CUDA cores, as ncu's roofline counts them: an FMA is 2
CORE_FLOPS = {f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum": (2 if op.endswith("fma") else 1)
              for op in ("fadd", "fmul", "ffma", "hadd", "hmul", "hfma", "dadd", "dmul", "dfma")}
# operations on the tensor cores per data path (Hopper's names; "n/a" where a GPU lacks one), taken as
# FLOPs, a multiply-add as 2, like the matmul ceilings (to check once against a GEMM of known size)
TENSOR_OPS = ("sm__ops_path_tensor_src_fp16_dst_fp16.sum", "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
              "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "sm__ops_path_tensor_src_tf32_dst_fp32.sum")
# the card's peaks per cycle and its clocks, as ncu's roofline sections read them: FP32 FMAs, each tensor
# path's operations and DRAM bytes, at ncu's locked clocks
FFMA_PEAK = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"
TENSOR_PEAKS = {m: f"{m}.peak_sustained" for m in TENSOR_OPS}
SM_HZ = "sm__cycles_elapsed.avg.per_second"
DRAM_PEAK = "dram__bytes.sum.peak_sustained"
DRAM_HZ = "dram__cycles_elapsed.avg.per_second"
METRICS = (DURATION, SM_PCT, MEMORY_PCT, OCCUPANCY_PCT, DRAM_BYTES, *CORE_FLOPS, *TENSOR_OPS,
           FFMA_PEAK, *TENSOR_PEAKS.values(), SM_HZ, DRAM_PEAK, DRAM_HZ)

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12}
_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_COUNTS = ("byte", "second", "cycle", "inst", "warp", "thread", "sector", "request", "hz", "flop")


class NcuFormatError(ValueError):
    """A CSV this parser cannot read, named with what is missing."""


def unit_factor(unit: str) -> float:
    """The factor from ncu's unit to the base unit: "us" 1e-6, "Mbyte" 1e6, "Gbyte/second" 1e9,
    "cycle/nsecond" 1e9, "%" and "" 1."""
    unit = unit.strip()
    if "/" in unit:
        top, bottom = unit.split("/", 1)
        return unit_factor(top) / unit_factor(bottom)
    if unit in ("", "%"):
        return 1.0
    if unit in _SECONDS:
        return _SECONDS[unit]
    for base in _COUNTS:
        prefix = unit[:-len(base)] if unit.lower().endswith(base) else None
        if prefix is not None and prefix in _PREFIX:
            return _PREFIX[prefix]
    raise NcuFormatError(f"unknown ncu unit {unit!r}")


def number(text: str) -> float | None:
    """ncu's value: "1,234.5" -> 1234.5; "n/a" or empty -> None."""
    text = text.strip().replace(",", "")
    if text in ("", "n/a"):
        return None
    try:
        return float(text)
    except ValueError:
        raise NcuFormatError(f"not a number: {text!r}") from None


@dataclass
class Launch:
    """One kernel launch with its metrics in base units (seconds, bytes, %, per second)."""
    id: str
    name: str
    metrics: dict[str, float | None] = field(default_factory=dict)

    def get(self, metric: str) -> float | None:
        return self.metrics.get(metric)


def parse(text: str) -> list[Launch]:
    """The launches in an ncu details-page CSV, in profiling order. Lines before the header (ncu's
    "==PROF==" chatter) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise NcuFormatError('no "ID" header: not the CSV of `ncu --csv --page details`')
    rows = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(rows)
    wanted = ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")
    missing = [c for c in wanted if c not in header]
    if missing:
        raise NcuFormatError(f"columns {missing} missing: export with --page details (not raw)")
    col = {c: header.index(c) for c in wanted}
    launches: dict[str, Launch] = {}
    for row in rows:
        if len(row) <= col["Metric Value"] or not row[col["Metric Name"]]:
            continue  # a rule's advice row, or a blank line
        launch = launches.setdefault(row[col["ID"]], Launch(row[col["ID"]], row[col["Kernel Name"]]))
        if row[col["Metric Name"]] not in METRICS:
            continue  # a section's metric (a user's ncu config): its units need not be known here
        value = number(row[col["Metric Value"]])
        factor = unit_factor(row[col["Metric Unit"]])
        launch.metrics[row[col["Metric Name"]]] = None if value is None else value * factor
    return list(launches.values())


_PLAIN = {"float", "double", "int", "long", "bool", "unsigned", "char", "half", "void", "true", "false", "const",
          "signed", "short", "int64_t", "int32_t", "uint32_t", "uint64_t", "size_t"}


def short_name(name: str) -> str:
    """A demangled kernel name made readable: the function without namespaces, templates and
    parameters, tagged with what tells its instances apart: the innermost Functor in its templates,
    else a reduction's Ops, else the op's implementation (a name ending in _cuda), else its first named
    template argument. Only a label: kernels are grouped by their full names.
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, ...>(...)"
    -> "vectorized_elementwise_kernel<CUDAFunctor_add>"."""
    text = name.replace("(anonymous namespace)", "anonymous")
    depth, parens, outer, inner, first = 0, 0, [], [], [""]
    for ch in text:
        if ch == "(" and depth == 0:
            break  # the parameters
        depth += (ch == "<") - (ch == ">")
        if depth == 1 and ch == "<":
            first = [""]  # the last template group at depth 1 is the function's own
        if depth == 0 and ch != ">":
            outer.append(ch)
        elif depth >= 1:
            inner.append(ch)
            parens += (ch == "(") - (ch == ")")
            if depth == 1 and ch == "," and parens == 0:  # not a comma of a lambda's parameters
                first.append("")
            elif depth == 1 and ch != "<":
                first[-1] += ch
    words = "".join(outer).split()
    function = words[-1].split("::")[-1] if words else name
    idents = re.findall(r"[A-Za-z_]\w*", "".join(inner))
    named = [found[-1] for found in (re.findall(r"[A-Za-z_]\w*", a) for a in first)
             if found and found[-1] not in _PLAIN]
    tag = (next((i for i in reversed(idents) if "Functor" in i), None)
           or next((i for i in reversed(idents) if i.endswith("Ops")), None)
           or next((i for i in reversed(idents) if i.endswith("_cuda")), None)
           or (named[0] if named else None))
    return f"{function}<{tag}>" if tag else function


def flops(launch: Launch) -> float | None:
    """FLOPs of one launch on CUDA and tensor cores; None when ncu gave none of the counters."""
    parts = [(launch.get(m), w) for m, w in CORE_FLOPS.items()] + [(launch.get(m), 1) for m in TENSOR_OPS]
    found = [v * w for v, w in parts if v is not None]
    return sum(found) if found else None


def tensor_path(launches: list[Launch]) -> str | None:
    """The tensor-core path (a TENSOR_OPS metric) with the most operations over the launches, or None."""
    ops = {m: sum(launch.get(m) or 0 for launch in launches) for m in TENSOR_OPS}
    best = max(ops, key=ops.get)
    return best if ops[best] > 0 else None


@dataclass
class Kernel:
    """Every launch of one kernel (by its full demangled name) in the profiled step."""
    name: str
    launches: int
    total_s: float
    sm_pct: float | None  # duration-weighted over its launches
    memory_pct: float | None
    occupancy_pct: float | None
    flops: float | None
    dram_bytes: float | None
    tensor_path: str | None  # the tensor-core path with the most operations, if any

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOP per DRAM byte."""
        if self.flops is None or not self.dram_bytes:
            return None
        return self.flops / self.dram_bytes


def _by_time(group: list[Launch], durations: list[float], metric: str) -> float | None:
    """The metric's mean over the launches, weighted by duration: a long launch counts for more."""
    known = [(launch.get(metric), d) for launch, d in zip(group, durations) if launch.get(metric) is not None]
    total = sum(d for _, d in known)
    return sum(v * d for v, d in known) / total if known and total else None


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def kernels(launches: list[Launch]) -> list[Kernel]:
    """The launches grouped by kernel (its full name), heaviest (total duration) first."""
    groups: dict[str, list[Launch]] = defaultdict(list)
    for launch in launches:
        groups[launch.name].append(launch)
    out = []
    for name, group in groups.items():
        durations = [launch.get(DURATION) or 0.0 for launch in group]
        out.append(Kernel(name=name, launches=len(group), total_s=sum(durations),
                          sm_pct=_by_time(group, durations, SM_PCT), memory_pct=_by_time(group, durations, MEMORY_PCT),
                          occupancy_pct=_by_time(group, durations, OCCUPANCY_PCT),
                          flops=_sum([flops(launch) for launch in group]),
                          dram_bytes=_sum([launch.get(DRAM_BYTES) for launch in group]),
                          tensor_path=tensor_path(group)))
    return sorted(out, key=lambda k: -k.total_s)


@dataclass
class Peaks:
    """The card's peaks as ncu reads them at its clocks: FP32 FLOP/s, each tensor path's FLOP/s, DRAM bytes/s."""
    fp32_flops_per_s: float | None
    tensor_flops_per_s: dict[str, float]
    dram_bytes_per_s: float | None

    def ridge(self, kernel: Kernel | None = None) -> float | None:
        """FLOP per byte where the kernel's roofline bends (its tensor path's, else FP32's): a kernel
        below it is on the memory side."""
        path = kernel.tensor_path if kernel is not None else None
        top = self.tensor_flops_per_s.get(path) if path else self.fp32_flops_per_s
        if not top or not self.dram_bytes_per_s:
            return None
        return top / self.dram_bytes_per_s


def peaks(launches: list[Launch]) -> Peaks:
    """The device's peaks (the same in every launch), each read from the first launch that has it."""
    def first(metric):
        return next((launch.get(metric) for launch in launches if launch.get(metric) is not None), None)

    sm_hz, dram, dram_hz, ffma = first(SM_HZ), first(DRAM_PEAK), first(DRAM_HZ), first(FFMA_PEAK)
    per_cycle = {m: first(peak) for m, peak in TENSOR_PEAKS.items()}
    tensor = {m: ops * sm_hz for m, ops in per_cycle.items() if ops and sm_hz}
    return Peaks(fp32_flops_per_s=2 * ffma * sm_hz if ffma and sm_hz else None, tensor_flops_per_s=tensor,
                 dram_bytes_per_s=dram * dram_hz if dram and dram_hz else None)


@dataclass
class KernelRow:
    """One kernel of the slow-vs-fast table: its label and each twin's figures, None where it did not run it."""
    label: str
    slow: Kernel | None
    fast: Kernel | None


def labels(names: list[str]) -> dict[str, str]:
    """A short label per full kernel name; where several share one, numbered in name order (the same
    in both twins)."""
    by_short: dict[str, list[str]] = defaultdict(list)
    for n in sorted(set(names)):
        by_short[short_name(n)].append(n)
    return {n: short if len(full) == 1 else f"{short} #{i}"
            for short, full in by_short.items() for i, n in enumerate(full, 1)}


def compare(slow: list[Kernel], fast: list[Kernel], top: int) -> list[KernelRow]:
    """The heaviest kernels of either twin (the `top` of each), matched by full name, heaviest first."""
    by_slow, by_fast = {k.name: k for k in slow}, {k.name: k for k in fast}
    names = list(dict.fromkeys([k.name for k in slow[:top]] + [k.name for k in fast[:top]]))
    label = labels(list(by_slow) + list(by_fast))
    rows = [KernelRow(label[n], by_slow.get(n), by_fast.get(n)) for n in names]
    return sorted(rows, key=lambda r: -max(r.slow.total_s if r.slow else 0, r.fast.total_s if r.fast else 0))
