"""A data-parallel recipe across machines: two runners on 127.0.0.1 play two nodes (gloo), joined by
torchrun's static rendezvous; node 0 writes the report naming both, node 1 runs its share; a node that
never joins ends the run with one line naming the endpoint, exit 2, nothing written."""
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


@pytest.mark.parametrize("recipe, workload", [("ddp", "churn"), ("fsdp", "resnet18")])
def test_two_nodes_train_in_step_and_node_0_writes_the_report_naming_both(tmp_path, recipe, workload):
    """Two runners on 127.0.0.1, one rank each, joined as two nodes: DDP's ranks end identical, FSDP's
    shards make one consistent state (gathered whole, one digest); only node 0 writes the report."""
    endpoint = f"127.0.0.1:{_port()}"
    cmd = [sys.executable, "-m", "common.runners.compare", recipe, "--workloads", workload, "--smoke", "--device",
           "cpu", "--data", "synthetic", "--nnodes", "2", "--rdzv-endpoint", endpoint, "--nproc-per-node", "1",
           "--join-timeout", "60"]
    procs = [subprocess.Popen(cmd + ["--node-rank", str(k), "--reports-dir", str(tmp_path / f"node{k}")], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in (1, 0)]
    (out1, err1), (out0, err0) = (p.communicate(timeout=300) for p in procs)
    assert procs[1].returncode == 0, out0 + err0
    assert procs[0].returncode == 0 and "node 0 writes the report" in out1, out1 + err1
    entry = comparison_of(tmp_path / "node0", recipe)["workloads"][workload]
    for variant in ("slow", "fast"):
        d = entry[variant]["extra"]["ddp"]
        assert d["world_size"] == 2 and d["distinct_digests"] == 1  # identical, or one consistent sharded state
        assert [r["node"] for r in d["ranks"]] == [0, 1]
    assert entry["parity"]["ok"]
    md = (tmp_path / "node0" / f"{recipe}.md").read_text()
    assert f"- Nodes (fast): node 0 on {socket.gethostname()} (ranks 0-0, 1 x CPU), node 1 on" in md
    assert not (tmp_path / "node1" / f"{recipe}.md").exists()  # only node 0 writes the report


def test_a_node_that_never_joins_ends_the_run_with_the_endpoint_named(tmp_path):
    endpoint = f"127.0.0.1:{_port()}"
    proc = run_module("common.runners.compare", "ddp", "--workloads", "churn", "--smoke", "--device", "cpu",
                      "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", endpoint, "--nproc-per-node", "1",
                      "--join-timeout", "3", "--reports-dir", str(tmp_path), timeout=120)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert f"did not all join at {endpoint} within 3 s" in last
    assert not (tmp_path / "results").exists()  # nothing written
