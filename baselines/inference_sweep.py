"""The seed's inference sweep (baselines/churn_mlp.py): latency per batch size over the test set, with the GPU
watched. Not the serving recipe's HTTP server, which is common/server.py.

Each request batch is copied to the device, run, and its probabilities copied back: `.cpu()` waits
for the GPU, so a perf_counter pair around it is the latency a caller sees. The first pass over the
test set at each batch size is a warm-up and is not counted.
"""
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from common.analysis import stats
from common.measure.gpu_monitor import GpuMonitor

BATCH_SIZES = (32, 64, 128, 512, 1024)
SWEET_SHARE = 0.9  # the sweet spot: the smallest batch reaching 90% of the best throughput


def latency_sweep(model, X_test: torch.Tensor, device: torch.device, batch_sizes=BATCH_SIZES, passes: int = 5,
                  progress=print) -> dict:
    model.eval()
    rows = []
    with torch.no_grad():
        for bs in batch_sizes:
            if bs > len(X_test):
                rows.append({"batch_size": bs, "skipped": f"larger than the test set ({len(X_test)} rows)"})
                continue
            loader = DataLoader(TensorDataset(X_test), batch_size=bs, drop_last=True)  # the seed's loaders
            latencies = []
            monitor = GpuMonitor(device, interval_s=0.02)
            with monitor:
                for p in range(passes + 1):
                    for (x,) in loader:
                        t0 = time.perf_counter()
                        probs = model(x.to(device)).cpu()  # note: .cpu() is a sync point: the caller's latency
                        if p:  # pass 0 is the warm-up
                            latencies.append((time.perf_counter() - t0) * 1000.0)
                    del probs
            s = stats.summarize(latencies, bs)
            rows.append({"batch_size": bs, "batches": len(latencies), "mean_ms": s.mean_ms, "std_ms": s.std_ms,
                         "p95_ms": s.p95_ms, "p99_ms": s.p99_ms, "median_ms": s.median_ms,
                         "throughput_per_s": bs * 1000.0 / s.mean_ms, "gpu": monitor.report().to_json()})
            progress(f"  batch {bs:5d}: mean {s.mean_ms:.3f} ms, p95 {s.p95_ms:.3f} ms, "
                     f"{rows[-1]['throughput_per_s']:.0f} samples/s")
    measured = [r for r in rows if "mean_ms" in r]
    best = max((r["throughput_per_s"] for r in measured), default=0)
    sweet = next((r["batch_size"] for r in measured if r["throughput_per_s"] >= SWEET_SHARE * best), None)
    return {"rows": rows, "sweet_spot": sweet, "sweet_rule": f"smallest batch with at least {SWEET_SHARE:.0%} of the "
            "best throughput", "passes": passes}
