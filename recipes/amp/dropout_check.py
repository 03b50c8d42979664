"""Dropout's randomness across a pair's twins, measured on this machine (python -m recipes.amp.dropout_check):

- masks: one seed, `F.dropout` on ones(64, 1024) in fp32, bf16 and fp16 (and fp32 compiled, and
  replayed from a CUDA graph): do the twins drop the same units? CUDA's fused kernel draws its Philox
  numbers per vector of 16 bytes (aten/src/ATen/native/cuda/Dropout.cu, get_vector_size), 4 fp32
  elements and 8 bf16 ones, so under one seed they do not; a CPU's bernoulli_ does whatever the dtype.
- noise: the churn pair's loss trajectories as the harness checks them (warm-up, learning probe,
  timed steps; common.analysis.aggregate.parity with amp's rule), for bf16 against fp32 with each
  twin's own masks, with every mask drawn as fp32's (`SharedMasks`), and for fp32
  against itself with its dropout reseeded: the noise a precision change is judged against.

Writes one JSON (--out) and prints a table."""
import argparse
import contextlib
import json
import math
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from common.measure.dropout import SharedMasks
from common.workloads import churn

SHAPE = (64, 1024)
P = 0.3


def _mask(x: torch.Tensor) -> torch.Tensor:
    return x != 0


def masks(device: torch.device, seed: int = 0) -> dict:
    """Each way of drawing a dropout mask under one seed, and the share of units it drops as fp32 eager does."""
    drawn = {}

    def eager(dtype):
        torch.manual_seed(seed)
        return _mask(F.dropout(torch.ones(SHAPE, dtype=dtype, device=device), P, training=True))

    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        drawn[name] = eager(dtype)
    if device.type == "cuda":
        with torch.autocast("cuda", dtype=torch.bfloat16):
            torch.manual_seed(seed)
            layer = torch.nn.Linear(1024, 1024, device=device)
            torch.manual_seed(seed)
            drawn["autocast bf16 (after a Linear)"] = _mask(F.dropout(layer(torch.ones(SHAPE, device=device)), P))
    with contextlib.suppress(Exception):
        compiled = torch.compile(lambda x: F.dropout(x, P, training=True))
        torch.manual_seed(seed)
        drawn["fp32 compiled"] = _mask(compiled(torch.ones(SHAPE, device=device)))
    if device.type == "cuda":
        with contextlib.suppress(Exception):
            x = torch.ones(SHAPE, device=device)
            torch.manual_seed(seed)
            F.dropout(x, P)  # warm-up outside the capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = F.dropout(x, P, training=True)
            torch.manual_seed(seed)
            graph.replay()
            drawn["fp32 CUDA graph replay"] = _mask(y)
    for name, dtype in (("shared fp32", torch.float32), ("shared bf16", torch.bfloat16)):
        torch.manual_seed(seed)
        with SharedMasks():
            drawn[name] = _mask(F.dropout(torch.ones(SHAPE, dtype=dtype, device=device), P, training=True))
    ref = drawn["fp32"]
    return {name: {"same_as_fp32": float((m == ref).float().mean()), "dropped": float((~m).float().mean())}
            for name, m in drawn.items()}


def trajectory(device, features, targets, seed: int, dtype, shared: bool, dropout_seed: int,
               warmup=30, probe=12, steps=420, batch=64) -> SimpleNamespace:
    """The churn pair's losses in the harness's order: warm-up, the learning probe on the last warm-up
    batch (the training state put back after it), then the timed steps; the batches fixed by `seed`."""
    torch.manual_seed(seed)
    model = churn.ChurnMLP(features.shape[1]).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = torch.nn.BCELoss()
    order = torch.Generator(device="cpu").manual_seed(seed)
    n = warmup + steps
    index = torch.cat([torch.randperm(len(features), generator=order) for _ in range(n * batch // len(features) + 1)])
    index = index[:n * batch].view(n, batch).to(device)
    torch.manual_seed(dropout_seed)
    mode = SharedMasks() if shared else contextlib.nullcontext()

    def step(x, y):
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            probs = model(x).squeeze(1)
        loss = criterion(probs.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    losses, probe_losses = [], []
    with mode:
        for i in range(n):
            x, y = features[index[i]], targets[index[i]]
            losses.append(step(x, y))
            if i == warmup - 1:  # the probe: 12 steps on this batch, then the state put back
                saved = ({k: v.clone() for k, v in model.state_dict().items()},
                         {k: (dict((n2, t.clone() if torch.is_tensor(t) else t) for n2, t in s.items()))
                          for k, s in optimizer.state.items()})
                probe_losses = [step(x, y) for _ in range(probe)]
                model.load_state_dict(saved[0])
                for k, s in saved[1].items():
                    optimizer.state[k] = s
    as_list = lambda t: torch.stack(t).cpu().tolist()  # noqa: E731
    return SimpleNamespace(losses=as_list(losses), probe_losses=as_list(probe_losses), skipped_steps=[],
                           probe_skipped=0, config=SimpleNamespace(batch_size=batch))


def noise(device: torch.device, seeds=(0, 1, 2, 3), steps=420) -> dict:
    """amp's parity on the churn pair for each comparison and seed, with the figures it judges."""
    from common.analysis.aggregate import parity
    from common.workloads import telco
    from recipes import amp

    X, _, y, _, source = telco.load(None)
    features, targets = torch.from_numpy(X).to(device), torch.from_numpy(y).to(device)
    half = torch.bfloat16
    comparisons = {  # name: (slow twin, fast twin), each (dtype, shared masks, dropout seed offset)
        "bf16 vs fp32, own masks": ((torch.float32, False, 0), (half, False, 0)),
        "fp32 vs fp32, dropout reseeded": ((torch.float32, False, 0), (torch.float32, False, 1000)),
        "bf16 vs fp32, shared fp32 masks": ((torch.float32, True, 0), (half, True, 0)),
        "fp32 vs fp32, shared masks reseeded": ((torch.float32, True, 0), (torch.float32, True, 1000)),
    }
    rule = amp.RECIPE.parity.rule()
    out = {"data": source.kind if hasattr(source, "kind") else str(source), "steps": steps, "rule": rule,
           "comparisons": {}}
    for name, (slow, fast) in comparisons.items():
        rows = []
        for seed in seeds:
            a, b = (trajectory(device, features, targets, seed, dt, sh, seed + off, steps=steps)
                    for dt, sh, off in (slow, fast))
            par = parity(a, b, rule)
            rows.append({"seed": seed, "ok": par.ok, "early_max_rel": par.early_max_rel, "max_rel": par.max_rel,
                         "at_step": par.at_step, "probe_max_rel": par.probe_max_rel})
        out["comparisons"][name] = rows
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m recipes.amp.dropout_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", default=None, help="write the figures here (JSON)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--steps", type=int, default=420, help="timed steps after the warm-up (amp's churn on an H100)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    t0 = time.perf_counter()
    found = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
             "torch": torch.__version__, "masks": masks(device)}
    print(f"dropout masks under one seed, {SHAPE} at p={P}, on {found['device']} (torch {torch.__version__}):")
    for name, v in found["masks"].items():
        print(f"  {name:32s} same units as fp32: {v['same_as_fp32']:7.2%}   dropped {v['dropped']:.2%}")
    found["noise"] = noise(device, tuple(range(args.seeds)), args.steps)
    rule = found["noise"]["rule"]
    print(f"amp's churn parity (early {rule['early_rtol']:.0%}, windows {rule['rtol']:.0%}), {args.steps} timed steps:")
    for name, rows in found["noise"]["comparisons"].items():
        def fmt(key, rows=rows):
            return " ".join("-" if r[key] is None or not math.isfinite(r[key]) else f"{r[key]:.2%}" for r in rows)
        print(f"  {name:38s} ok {sum(r['ok'] for r in rows)}/{len(rows)}  early {fmt('early_max_rel')}  "
              f"windows {fmt('max_rel')}  probe {fmt('probe_max_rel')}")
    found["seconds"] = round(time.perf_counter() - t0, 1)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(found, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
