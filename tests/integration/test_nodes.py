"""A data-parallel recipe across machines: two runners on 127.0.0.1 play two nodes (gloo), joined by
torchrun's static rendezvous; node 0 writes the report naming both, node 1 runs its share; a node that
never joins ends the run with one line naming the endpoint, exit 2, nothing written."""
import os
import socket
import subprocess
import sys
from argparse import Namespace

import pytest

from common.errors import CookbookError
from common.runners import nodes

from conftest import REPO, comparison_of, run_module


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _args(**kw):
    return Namespace(**{"nnodes": None, "node_rank": None, "rdzv_endpoint": None, "join_timeout": 120, **kw})


def test_the_nodes_come_from_the_flags_or_from_slurm():
    assert nodes.from_args(_args(), environ={}) is None
    n = nodes.from_args(_args(nnodes=2, node_rank=1, rdzv_endpoint="node0:29500"), environ={})
    assert (n.nnodes, n.node_rank, n.endpoint, n.source) == (2, 1, "node0:29500", "flags")
    assert "--rdzv-backend static" in " ".join(n.torchrun(4, "x")) and "--node-rank 1" in " ".join(n.torchrun(4, "x"))
    slurm = {"SLURM_NNODES": "4", "SLURM_NODEID": "3", "MASTER_ADDR": "gpu-17", "MASTER_PORT": "29600"}
    n = nodes.from_args(_args(), environ=slurm)
    assert (n.nnodes, n.node_rank, n.endpoint, n.source) == (4, 3, "gpu-17:29600", "SLURM")
    assert nodes.from_args(_args(), environ=slurm, slurm=False) is None  # a recipe torchrun does not launch
    for bad, said in (({"nnodes": 2, "rdzv_endpoint": "h:1"}, "--node-rank None"),
                      ({"nnodes": 2, "node_rank": 2, "rdzv_endpoint": "h:1"}, "0 to 1"),
                      ({"nnodes": 2, "node_rank": 0, "rdzv_endpoint": "h"}, "HOST:PORT"),
                      ({"node_rank": 1}, "give --nnodes N")):
        with pytest.raises(CookbookError, match=said):
            nodes.from_args(_args(**bad), environ={})


def test_a_recipe_not_launched_by_torchrun_refuses_nnodes(tmp_path):
    proc = run_module("common.runners.compare", "amp", "--smoke", "--device", "cpu", "--nnodes", "2", "--node-rank",
                      "0", "--rdzv-endpoint", "127.0.0.1:1", "--reports-dir", str(tmp_path))
    assert proc.returncode == 2 and "only a recipe launched by torchrun runs across machines" in proc.stderr


def _two_nodes(tmp_path, recipe, workload, fault=None):
    """The recipe's smoke run as two nodes on 127.0.0.1, one rank each: (node 0's, node 1's) outcome."""
    endpoint = f"127.0.0.1:{_port()}"
    cmd = [sys.executable, "-m", "common.runners.compare", recipe, "--workloads", workload, "--smoke", "--device",
           "cpu", "--data", "synthetic", "--nnodes", "2", "--rdzv-endpoint", endpoint, "--nproc-per-node", "1",
           "--join-timeout", "60"]
    child_env = {**os.environ, **({"COOKBOOK_FAULT": fault} if fault else {})}
    procs = [subprocess.Popen(cmd + ["--node-rank", str(k), "--reports-dir", str(tmp_path / f"node{k}")], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env)
             for k in (1, 0)]
    (out1, err1), (out0, err0) = (p.communicate(timeout=300) for p in procs)
    return (procs[1].returncode, out0 + err0), (procs[0].returncode, out1 + err1)


def _named_both_nodes(tmp_path, recipe):
    md = (tmp_path / "node0" / f"{recipe}.md").read_text()
    assert f"- Nodes (fast): node 0 on {socket.gethostname()} (ranks 0-0, 1 x CPU), node 1 on" in md
    assert not (tmp_path / "node1" / f"{recipe}.md").exists()  # only node 0 writes the report


def test_fsdp_on_two_nodes_holds_half_the_state_per_rank_in_one_consistent_state(tmp_path):
    """The fsdp recipe end to end, as two nodes: each rank holds half of ResNet-18's parameters,
    gradients and Adam state that a DDP rank holds whole, paid for in all-gathers and reduce-scatters;
    the shards, gathered whole, make one state; parity passes; node 0's report names both nodes."""
    (rc0, said0), (rc1, said1) = _two_nodes(tmp_path, "fsdp", "resnet18")
    assert rc0 == 0, said0
    assert rc1 == 0 and "node 0 writes the report" in said1, said1
    entry = comparison_of(tmp_path / "node0", "fsdp")["workloads"]["resnet18"]
    assert entry["parity"]["ok"]
    slow, fast = entry["slow"]["extra"]["ddp"], entry["fast"]["extra"]["ddp"]
    for d in (slow, fast):
        assert d["world_size"] == 2 and d["distinct_digests"] == 1 and [r["node"] for r in d["ranks"]] == [0, 1]
    for whole, shard in ((a["held"], b["held"]) for a, b in zip(slow["ranks"], fast["ranks"])):
        assert whole["params_mb"] == pytest.approx(11_181_642 * 4 / 2**20, rel=1e-6)  # ResNet-18 (10 classes), fp32
        for part in ("params_mb", "grads_mb", "optimizer_mb"):
            assert shard[part] == pytest.approx(whole[part] / 2, rel=0.01), part  # 1/N, N = 2
    assert fast["all_gather_into_tensor_per_step"] > 0 and fast["reduce_scatter_tensor_per_step"] > 0
    assert slow["all_gather_into_tensor_per_step"] == 0 and fast["allreduce_per_step"] == 0 and fast["sharded"]
    assert "FSDP2 (fully_shard); parameters after the run one consistent state" in \
        (tmp_path / "node0" / "fsdp.md").read_text()
    _named_both_nodes(tmp_path, "fsdp")


def test_ddp_on_two_nodes_trains_in_step_and_its_planted_frozen_twin_fails_parity(tmp_path):
    """The ddp recipe as two nodes, its fast twin planted to update nothing (faults.frozen, the ddp recipe's
    share of tests/integration/test_parity.py's): every rank of each twin ends identical across the nodes, node 0's
    report names both, and parity fails the frozen twin."""
    (rc0, said0), (rc1, said1) = _two_nodes(tmp_path, "ddp", "churn", fault="frozen:fast")
    assert rc0 == 1 and "parity FAILED for ddp/churn" in said0, said0
    assert rc1 == 0 and "node 0 writes the report" in said1, said1
    entry = comparison_of(tmp_path / "node0", "ddp")["workloads"]["churn"]
    assert not entry["parity"]["ok"]
    for variant in ("slow", "fast"):
        d = entry[variant]["extra"]["ddp"]
        assert d["world_size"] == 2 and d["distinct_digests"] == 1  # the two nodes' ranks ended identical
        assert [r["node"] for r in d["ranks"]] == [0, 1]
    _named_both_nodes(tmp_path, "ddp")


def test_a_node_that_never_joins_ends_the_run_with_the_endpoint_named(tmp_path):
    endpoint = f"127.0.0.1:{_port()}"
    proc = run_module("common.runners.compare", "ddp", "--workloads", "churn", "--smoke", "--device", "cpu",
                      "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", endpoint, "--nproc-per-node", "1",
                      "--join-timeout", "3", "--reports-dir", str(tmp_path), timeout=120)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert f"did not all join at {endpoint} within 3 s" in last
    assert not (tmp_path / "results").exists()  # nothing written


@pytest.mark.parametrize("gpus, nnodes, ranks", [(1, 2, 1), (4, 2, 4), (1, 1, 2), (0, 2, 2)])
def test_across_machines_a_gpu_each_runs_one_nccl_rank_per_gpu(monkeypatch, gpus, nnodes, ranks):
    """One GPU per node is the common cluster shape: its ranks run on NCCL, one per GPU, not as two CPU
    ranks on gloo; one machine with one GPU still runs two (one rank shares nothing)."""
    import json

    from common.analysis import device
    from common.runners import compare, launch

    profile = device.simulated("H100")
    seen = {"gpus": gpus, "profile": profile.to_json() if gpus else None, "ceiling": True}
    monkeypatch.setenv("COOKBOOK_DEVICE_SEEN", json.dumps(seen))
    monkeypatch.delenv("COOKBOOK_DEVICE_PROFILE", raising=False)
    for cached in (launch.cuda_device_count, launch.device_profile):
        cached.cache_clear()
    try:
        flags = ["--nnodes", str(nnodes), "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:29400"] * (nnodes > 1)
        plan = compare.make_plan(["ddp", "--device", "auto", *flags])
    finally:
        for cached in (launch.cuda_device_count, launch.device_profile):
            cached.cache_clear()
    assert plan.cuda == bool(gpus) and plan.nproc == ranks
