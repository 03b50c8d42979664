"""The counting comm hook's own cost: two DDP copies of the churn MLP (the ddp recipe's model), one
with its all-reduces counted (common.distributed's Python hook) and one with DDP's built-in C++
all-reduce, trained on the same batches with their steps alternating, so that drift hits both.
Prints, on rank 0, both median step times, the hook's host time per step, and whether the two
copies ended with the same parameters (the same arithmetic)."""
import json
import statistics
import sys
import time

import torch

from common import distributed
from common.workloads import churn

WARMUP, STEPS, BATCH = 5, 40, 64
rank, world = distributed.world()
device = torch.device("cpu")
distributed.init(device)
copies = {}
for counted in (True, False):
    torch.manual_seed(0)
    model = distributed.wrap(churn.ChurnMLP(38).eval(), device, count=counted)  # eval: no dropout masks to differ
    copies[counted] = (model, torch.optim.Adam(model.parameters(), lr=1e-3))
data = torch.Generator().manual_seed(1)
times = {True: [], False: []}
for step in range(WARMUP + STEPS):
    x, y = torch.randn(BATCH, 38, generator=data), torch.rand(BATCH, 1, generator=data).round()
    xr, yr = distributed.rank_share(x, y)
    for counted in ((True, False) if step % 2 else (False, True)):  # who goes first alternates
        model, optimizer = copies[counted]
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.binary_cross_entropy(model(xr), yr).backward()
        optimizer.step()
        if step >= WARMUP:
            times[counted].append((time.perf_counter() - t0) * 1e3)
hook = distributed.COUNTED[0]
found = {"rank": rank, "counted_ms": statistics.median(times[True]), "uncounted_ms": statistics.median(times[False]),
         "hook_ms_per_step": hook.host_s / (WARMUP + STEPS) * 1e3, "calls_per_step": hook.calls / (WARMUP + STEPS),
         "same_parameters": distributed.digest(distributed.WRAPPED[0]) == distributed.digest(distributed.WRAPPED[1])}
if rank == 0:
    print("RESULT " + json.dumps(found), flush=True)
distributed.shut_down()
sys.exit(0)
