"""Data-parallel runs under torchrun (the ddp recipe): the process group, the model's DDP wrapper
with an all-reduce counter, and what rank 0 gathers from every rank at the end.

A script launched by `torchrun --standalone --nproc-per-node N` finds its rank in the environment
torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK); run as plain `python` it is rank 0 of 1, wraps
nothing and counts nothing: the single-process run of the same global batch.
"""
import contextlib
import hashlib
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook

from common.env import rank_world as world  # (rank, world size)
from common.measure import hta


def init(device: torch.device) -> tuple[torch.device, list[str]]:
    """Join the process group: NCCL with one GPU per rank, gloo on the CPU otherwise. Returns the
    rank's device and the notices that go with it."""
    rank, size = world()
    local = int(os.environ.get("LOCAL_RANK", rank))
    notices = []
    if device.type == "cuda" and torch.cuda.device_count() < int(os.environ.get("LOCAL_WORLD_SIZE", size)):
        notices.append(f"NCCL needs one GPU per rank: {size} ranks, {torch.cuda.device_count()} GPU(s); "
                       "ran on the CPU with gloo")
        device = torch.device("cpu")
    if device.type == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    notices.append(f"rank {rank} of {size} ({dist.get_backend()} backend)")
    return device, notices


@dataclass
class AllReduces:
    """What the DDP communication hook saw: every bucket's all-reduce, and its bytes; the host time
    spent in the hook (the counting's own cost: the hook replaces DDP's built-in C++ all-reduce with a
    Python one); and the options the model was wrapped with."""
    calls: int = 0
    bytes: int = 0
    host_s: float = 0.0
    options: dict | None = None


COUNTED: list[AllReduces] = []  # one per wrapped model, read by the harness at the end
COLLECTIVES = {"all_gather_into_tensor": 0, "reduce_scatter_tensor": 0}  # FSDP2's, counted by shard()
HELD: dict = {}  # this rank's share of the training state at the end, MB (held())
OPTIMIZER_STEPS = [0]  # optimizer steps taken once a model was wrapped: the all-reduces' denominator
WRAPPED: list[torch.nn.Module] = []  # the models wrap() was given, for their digests at the end


def _counting_allreduce(state: AllReduces, bucket):
    """DDP's default all-reduce (the same future, the same average), counted."""
    t0 = time.perf_counter()
    buffer = bucket.buffer()
    state.calls += 1
    state.bytes += buffer.numel() * buffer.element_size()
    future = default_hooks.allreduce_hook(None, bucket)
    state.host_s += time.perf_counter() - t0  # the whole hook: the all-reduce's launch included
    return future


def wrap(model: torch.nn.Module, device: torch.device, count: bool = True, **options) -> torch.nn.Module:
    """DistributedDataParallel with `options` (bucket_cap_mb, static_graph, ...) and its all-reduces
    counted (count=False: DDP's own all-reduce, uncounted); the model itself in a plain process."""
    WRAPPED.append(model)
    if world()[1] == 1:
        return model
    ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None, **options)
    if not count:
        return ddp
    counter = AllReduces(options=dict(options))
    ddp.register_comm_hook(counter, _counting_allreduce)
    _count_steps()
    COUNTED.append(counter)
    return ddp


_STEPS_COUNTED = []


def _count_steps() -> None:
    """Count every step of any optimizer once a model is wrapped: the collectives' denominator."""
    if not _STEPS_COUNTED:
        _STEPS_COUNTED.append(register_optimizer_step_post_hook(
            lambda *_: OPTIMIZER_STEPS.__setitem__(0, OPTIMIZER_STEPS[0] + 1)))


def shard(model: torch.nn.Module, device: torch.device, block: type) -> torch.nn.Module:
    """FSDP2: every `block` module, then the root, fully_shard'ed over all ranks: each rank keeps 1/N of
    the parameters, gradients and optimizer state, gathering a block's parameters for its forward and
    backward and reduce-scattering its gradients; its all-gathers and reduce-scatters counted. The model
    itself in a plain process."""
    WRAPPED.append(model)
    if world()[1] == 1:
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    for name in COLLECTIVES:  # FSDP2 calls them through torch.distributed's module at run time
        setattr(dist, name, _counting(getattr(dist, name), name))
    _count_steps()
    # the run's own device: without a mesh fully_shard takes CUDA whenever a GPU exists, even where the
    # ranks run on the CPU with gloo (more ranks than GPUs)
    mesh = init_device_mesh(device.type, (world()[1],))
    for module in model.modules():
        if isinstance(module, block):
            fully_shard(module, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _counting(collective, name: str):
    def counted(*args, **kwargs):
        COLLECTIVES[name] += 1
        return collective(*args, **kwargs)
    return counted


def held(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Record this rank's share of the training state: parameters, gradients and optimizer state in MB,
    a sharded tensor (DTensor) counted by its local shard."""
    def mb(tensors):
        local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
        return sum(t.numel() * t.element_size() for t in local) / 2**20
    params = list(model.parameters())
    HELD.update(params_mb=mb(params), grads_mb=mb(p.grad for p in params if p.grad is not None),
                optimizer_mb=mb(v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)))


def rank_share(*tensors):
    """This rank's slice of a global batch (each tensor alike); the whole batch in a plain process."""
    rank, size = world()
    if tensors and tensors[0].shape[0] % size:
        from common.errors import CookbookError

        raise CookbookError(f"--batch-size {tensors[0].shape[0]}: the global batch is split evenly over {size} ranks; "
                            f"give a multiple of {size}")
    return tuple(t.chunk(size)[rank] for t in tensors)


def no_sync(model: torch.nn.Module, unless: bool = False):
    """DDP's no_sync() (gradients kept local, no all-reduce) unless `unless`; nothing in a plain process."""
    if unless or not isinstance(model, DistributedDataParallel):
        return contextlib.nullcontext()
    return model.no_sync()


def agree_max(value: int) -> int:
    """The largest of every rank's value: a count of steps all ranks must run alike."""
    if world()[1] == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64, device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def _full(p: torch.Tensor) -> torch.Tensor:
    """A parameter whole: a sharded one (FSDP2's DTensor) gathered from every rank (a collective)."""
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def digest(model: torch.nn.Module) -> str:
    """The parameters' exact bytes, hashed (a sharded one whole): equal on every rank when they train in
    step, or when their shards make one consistent state."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(_full(p).detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def fingerprint(model: torch.nn.Module) -> list[float]:
    """Each parameter's sum and sum of squares (float64): close, within rounding, to a single-process
    run of the same global batch, whose reductions add in another order."""
    out = []
    for p in model.parameters():
        x = _full(p).detach().double()
        out += [x.sum().item(), (x * x).sum().item()]
    return out


def rank_placement(device: torch.device) -> dict:
    """Where this rank runs: its node (torchrun's group rank), host and device."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return {"node": int(os.environ.get("GROUP_RANK", 0)), "host": socket.gethostname(), "device": name}


def gather(obj) -> list:
    """Every rank's `obj`, in rank order (on every rank)."""
    found = [None] * world()[1]
    dist.all_gather_object(found, obj)
    return found


def shut_down() -> None:
    """Leave the process group together: a rank that tears down its gloo connections while another is
    still using them makes that one abort ("terminate called without an active exception")."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        # A gloo worker thread may still be dropping a finished all-reduce whose future holds the comm
        # hook's Python callback (that needs the GIL); destroying the group joins those threads with the
        # GIL held, so a rank could wait forever. Sleeping releases the GIL until they are done.
        time.sleep(0.2)
        dist.destroy_process_group()


def settle(result, device: torch.device) -> None:
    """Every rank's run, gathered into rank 0's result: the step time of a step is its slowest rank's;
    whether the ranks' parameters are identical; the all-reduces per optimizer step; the parameters'
    fingerprint (for the comparison with a single process). Then the process group is left."""
    from common.analysis import stats

    rank, size = world()
    counted = COUNTED[0] if COUNTED else AllReduces()
    model = WRAPPED[0] if WRAPPED else None
    trace = result.evidence.trace if result.evidence else None  # this rank's, written during the loop
    mine = {"step_ms": result.timing.step_ms, "digest": digest(model) if model is not None else None,
            "trace": trace, "held": dict(HELD), **rank_placement(device)}
    ranks = gather(mine) if size > 1 else [mine]
    if size > 1:
        slowest = [max(r["step_ms"][i] for r in ranks) for i in range(len(result.timing.step_ms))]
        result.timing.step_ms = slowest
        result.timing.summary = stats.summarize(slowest, result.config.samples_per_step)
    result.extra["ddp"] = {
        "world_size": size, "backend": dist.get_backend() if size > 1 else None,
        "distinct_digests": len({r["digest"] for r in ranks}), "digests": [r["digest"] for r in ranks],
        "allreduce_per_step": counted.calls / max(OPTIMIZER_STEPS[0], 1),
        "allreduce_mb_per_step": counted.bytes / max(OPTIMIZER_STEPS[0], 1) / 2**20, "options": counted.options or {},
        **({"hook_us_per_call": counted.host_s / counted.calls * 1e6,
            "hook_ms_per_step": counted.host_s / max(OPTIMIZER_STEPS[0], 1) * 1e3} if counted.calls else {}),
        "sharded": any(COLLECTIVES.values()),
        "fingerprint": fingerprint(model) if model is not None else None,
        "ranks": [{k: r[k] for k in ("node", "host", "device", "held")} for r in ranks],
        **{f"{name}_per_step": calls / max(OPTIMIZER_STEPS[0], 1) for name, calls in COLLECTIVES.items()}}
    traces = {r: Path(x["trace"]) for r, x in enumerate(ranks) if x["trace"]}
    if rank == 0 and size > 1 and traces:  # every rank's trace is written: each finished its loop
        result.extra["ddp"]["comm_overlap"] = hta.comm_overlap(traces, device)
    shut_down()


def join(device: torch.device) -> None:
    """The runner's join check across nodes (common/runners/nodes.py): every rank in the process group,
    rank 0 printing where each runs."""
    device, _ = init(device)
    found = gather({"rank": world()[0], **rank_placement(device)})
    if world()[0] == 0:
        print(json.dumps(found), flush=True)
    shut_down()


if __name__ == "__main__":  # python -m common.distributed --join cpu|cuda, under torchrun
    if sys.argv[1:2] != ["--join"]:
        sys.exit("usage: torchrun ... -m common.distributed --join cpu|cuda")
    join(torch.device(sys.argv[2] if len(sys.argv) > 2 else "cpu"))
