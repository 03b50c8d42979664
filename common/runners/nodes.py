"""A data-parallel recipe across machines: the same `make recipe-<name>` on every node, torchrun's
static rendezvous joining them round after round.

    node 0:  make recipe-ddp ARGS='--nnodes 2 --node-rank 0 --rdzv-endpoint node0:29500'
    node 1:  make recipe-ddp ARGS='--nnodes 2 --node-rank 1 --rdzv-endpoint node0:29500'

Under SLURM (`srun` one task per node) the flags come from SLURM_NNODES, SLURM_NODEID and
MASTER_ADDR/MASTER_PORT (or the job's first host, port 29500). The static backend makes node K's
agent group rank K, so global rank 0, which writes each result, is on node 0, and only node 0's runner
aggregates and writes the report; every other node runs the same launches in the same order (a fixed
number of rounds: the nodes cannot agree on an adaptive one) and checks their exit. Before anything
is written, one launch checks that every node joins within --join-timeout seconds; a node that never
does ends the run there with one line that names the endpoint, exit 2."""
import os
import subprocess
import sys
from dataclasses import dataclass

from common import env
from common.errors import CookbookError

DEFAULT_PORT = 29500
JOIN_TIMEOUT_S = 120


@dataclass
class Nodes:
    nnodes: int
    node_rank: int
    endpoint: str  # HOST:PORT of node 0's rendezvous store
    join_timeout_s: int = JOIN_TIMEOUT_S
    source: str = "flags"  # or "SLURM"

    def torchrun(self, nproc: int, run_id: str) -> list[str]:
        """torchrun's flags for one launch across the nodes."""
        return ["--nnodes", str(self.nnodes), "--node-rank", str(self.node_rank), "--nproc-per-node", str(nproc),
                "--rdzv-backend", "static", "--rdzv-endpoint", self.endpoint, "--rdzv-id", run_id,
                "--rdzv-conf", f"timeout={self.join_timeout_s}"]

    def describe(self) -> str:
        return f"node {self.node_rank} of {self.nnodes}, rendezvous at {self.endpoint} ({self.source})"


def add_flags(p) -> None:
    p.add_argument("--nnodes", type=int, help="machines in a data-parallel run (default 1; SLURM_NNODES under srun)")
    p.add_argument("--node-rank", type=int, help="this machine's rank among them, 0 to nnodes-1 (node 0 writes the "
                                                 "report)")
    p.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="node 0's address and a free port on it")
    p.add_argument("--join-timeout", type=int, default=JOIN_TIMEOUT_S, metavar="SECONDS",
                   help=f"how long a launch waits for every node to join (default {JOIN_TIMEOUT_S})")


def from_args(args, environ=os.environ, slurm: bool = True) -> Nodes | None:
    """The nodes of this run from the flags, else (slurm: a recipe torchrun launches) from SLURM's
    variables; None for one machine."""
    source = "flags"
    nnodes, rank, endpoint = args.nnodes, args.node_rank, args.rdzv_endpoint
    if nnodes is None and slurm and int(environ.get("SLURM_NNODES", "1")) > 1:
        source, nnodes = "SLURM", int(environ["SLURM_NNODES"])
        rank = int(environ.get("SLURM_NODEID", "0")) if rank is None else rank
        endpoint = endpoint or _slurm_endpoint(environ)
    if nnodes is None or nnodes == 1:
        if rank or endpoint:
            raise CookbookError("--node-rank and --rdzv-endpoint are for a run across machines: give --nnodes N "
                                "(2 or more) with them")
        return None
    if nnodes < 1:
        raise CookbookError(f"--nnodes {nnodes}: give 1 or more")
    if rank is None or not 0 <= rank < nnodes:
        raise CookbookError(f"--node-rank {rank}: give this machine's rank, 0 to {nnodes - 1} (node 0 writes the "
                            "report)")
    host, _, port = (endpoint or "").rpartition(":")
    if not host or not port.isdigit():
        raise CookbookError(f"--rdzv-endpoint {endpoint}: give node 0's HOST:PORT, e.g. node0:{DEFAULT_PORT}, the "
                            "same on every node")
    if args.join_timeout < 1:
        raise CookbookError("--join-timeout: give 1 second or more")
    return Nodes(nnodes, rank, endpoint, args.join_timeout, source)


def _slurm_endpoint(environ) -> str:
    port = environ.get("MASTER_PORT", str(DEFAULT_PORT))
    if environ.get("MASTER_ADDR"):
        return f"{environ['MASTER_ADDR']}:{port}"
    try:  # the job's first host, as `scontrol show hostnames` expands the node list
        hosts = subprocess.run(["scontrol", "show", "hostnames", environ.get("SLURM_JOB_NODELIST", "")],
                               capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        hosts = []
    if not hosts:
        raise CookbookError("under SLURM: set MASTER_ADDR (node 0's address) and MASTER_PORT, or give "
                            "--rdzv-endpoint HOST:PORT")
    return f"{hosts[0]}:{port}"


def join_check(nodes: Nodes, nproc: int, device: str) -> str:
    """One launch on every node that only joins the process group: every node there within the join
    timeout, or one line naming the endpoint. Returns what the ranks said (their hosts and devices)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", *nodes.torchrun(nproc, "cookbook-join"),
           "-m", "common.distributed", "--join", device]
    child_env = {**os.environ, "PYTHONPATH": str(env.REPO_ROOT)}
    try:
        proc = subprocess.run(cmd, cwd=env.REPO_ROOT, capture_output=True, text=True, env=child_env,
                              timeout=nodes.join_timeout_s + 60)
    except subprocess.TimeoutExpired:
        proc = None
    if proc is None or proc.returncode != 0:
        raise CookbookError(f"the {nodes.nnodes} nodes did not all join at {nodes.endpoint} within "
                            f"{nodes.join_timeout_s} s (this is {nodes.describe()}): start the same command on every "
                            "node with its own --node-rank, and check that node 0's HOST:PORT is reachable from each")
    return proc.stdout


def follow(run_one, workloads, rounds: int, alternating) -> int:
    """A node other than 0: the same launches, in the same order, as node 0 runs them; their exit
    checked, nothing aggregated. run_one(workload, variant, round) -> the launch's Outcome."""
    failed = 0
    for workload in workloads:
        for r in range(1, rounds + 1):
            for variant in alternating(["slow", "fast"], r):
                outcome = run_one(workload, variant, r)
                print(f"  {workload} {variant} round {r}: "
                      + ("ok" if outcome.returncode == 0 else f"FAILED (exit {outcome.returncode}), log "
                                                               f"{outcome.log}"), flush=True)
                failed += outcome.returncode != 0
    print("this node's launches are done; node 0 writes the report" if not failed
          else f"{failed} launch(es) failed on this node", flush=True)
    return 1 if failed else 0
