"""A second, independent reader of every GPU trace: HolisticTraceAnalysis (`traceinsight` on PyPI,
imported as `hta`). Filled in below; optional at import time."""
from pathlib import Path

import torch


def summarize(trace_path: Path, device: torch.device) -> dict:
    if device.type != "cuda":
        return {"available": False, "why": "HTA reads GPU traces: a CPU run has none for it to read"}
    return {"available": False, "why": "not wired yet"}
