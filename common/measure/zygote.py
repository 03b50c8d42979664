"""For the test suite: one process that imports torch and the cookbook once, then forks each measured
child from there, so that a child starts in milliseconds rather than the ~4 s that torch's and
dynamo's imports cost on a CPU (the suite starts a few hundred children).

    python -m common.measure.zygote --socket PATH      # prints "ready" once it listens

A forked child is still a process of its own: its own pid, memory, log, cores, working folder and
environment, running its module as `python -m` would (its argv, `__main__`, the exception hook it
installs, its exit status). The runners use it only where COOKBOOK_ZYGOTE names the socket
(launch.child and launch.process; tests/conftest.py sets it, and forks the runners it starts from it
too), never for a tool that wraps python;
torchrun and its ranks are forked, each rank through a stand-in that torchrun starts (common.measure.zygote_client).

Protocol (AF_UNIX, SOCK_SEQPACKET): the runner sends one JSON message {module, argv, cwd, env, cpus,
prepare_on}
with the file descriptor the child writes its output to (or two: its output, then its errors); the
child answers its pid, and its exit status when it ends (no status: it was killed).
"""
import argparse
import atexit
import contextlib
import ctypes
import gc
import importlib
import io
import json
import os
import runpy
import signal
import socket
import sys
import threading
import traceback

from common.measure import timeline
from common.workload_specs import workload_names

# what the recipe scripts, the baselines and the doctor's child import (never a module run as
# __main__: runpy would warn that it is imported already)
PRELOAD = ("numpy", "torch", "torch._dynamo", "torch.profiler", "torch.utils.flop_counter", "torchvision",
           "common.harness", "common.data", "common.graphs", "common.measure.fixes", "common.measure.settings",
           *(f"common.workloads.{w}" for w in workload_names()))


def serve(path: str, cpu_inductor: bool = True) -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    import torch

    _SERVED.update(cores=sorted(os.sched_getaffinity(0)), threads=torch.get_num_threads())
    if cpu_inductor:  # Inductor's C++ backend (a CPU run); a GPU's children compile with Triton
        warm_inductor()  # before "ready": no child's budget waits for it
    # the imports' garbage freed and given back to the system, the rest frozen out of the collector: a
    # child then writes fresh pages rather than copying the zygote's (copy-on-write) as it allocates
    gc.collect()
    gc.freeze()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    if torch.cuda.is_initialized():  # every forked child's CUDA would fail: no server rather than a broken one
        sys.exit("the fork server initialised CUDA before forking; its children could not use the GPU")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children: no zombies
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path)
    server.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            _child(conn)  # never returns
        conn.close()


def warm_inductor() -> None:
    """Inductor's C++ backend asks once per process which vector instruction sets the compiler can
    build, by loading a test library in a fresh Python (which imports torch) per set: about 9 s of CPU
    for each child that compiles (torch/_inductor/cpu_vec_isa.py, valid_vec_isa_list). Asked here,
    before SIGCHLD is ignored (the probes' exit statuses must be read), the answer is inherited.
    The probes import torch.utils.cpp_extension, whose import asks torch.cuda.is_available() only to
    decide a warning; asking would initialize the CUDA driver here, and every forked child's CUDA would
    then fail ("Cannot re-initialize CUDA in forked subprocess"), so the import is answered "no"."""
    from unittest import mock

    import torch

    with mock.patch.object(torch.cuda, "is_available", lambda: False):
        import torch.utils.cpp_extension  # noqa: F401
    from torch._inductor import cpu_vec_isa

    cpu_vec_isa.pick_vec_isa()


def _child(conn: socket.socket) -> None:
    timeline.FORKED = True  # the child's result says its torch was imported before it began
    code = 1
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)  # its output, and its errors where apart
        request = json.loads(message)
        conn.send(str(os.getpid()).encode())
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _read_at_import()
        # a pipelined child prepares on other cores (common.measure.gate moves it at its gate)
        first = request.get("prepare_on") or request["cpus"]
        if first and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, first)
        _set_threads(os.environ.get("OMP_NUM_THREADS", ""), request["cpus"])
        if request.get("tied"):  # a torchrun rank's stand-in (zygote_client): this child ends with it
            threading.Thread(target=_end_with, args=(conn,), daemon=True).start()
        os.dup2(fds[0], 1)
        os.dup2(fds[-1], 2)
        for fd in set(fds):
            os.close(fd)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        sys.argv = [request["module"], *request["argv"]]
        sys.path[0] = request["cwd"]  # as `python -m` puts the working folder first
        code = _run(request["module"])
    except BaseException:  # the protocol's own failure: said on the child's output
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what a process's end runs, torch's and the script's
            sys.stdout.flush()
            sys.stderr.flush()
            conn.send(str(code).encode())
        finally:
            os._exit(code)


def _read_at_import() -> None:
    """What torch reads from the environment once, at its import (here, in the server), read again from the
    child's: a child asked to run uncompiled (TORCH_COMPILE_DISABLE=1, as the suite's float8 twins are) runs
    so, as a fresh process would."""
    import torch._dynamo

    torch._dynamo.config.disable = os.environ.get("TORCH_COMPILE_DISABLE", "0") == "1"


def _set_threads(given: str, cpus: list[int]) -> None:
    """torch's thread count as a fresh process would pick it: OMP_NUM_THREADS, else one per core it
    may use (torch reads the affinity once, at import: here, in the server, over the server's cores),
    in the server's proportion of threads to cores (a machine with two hardware threads per core)."""
    import torch

    if given.isdigit():
        torch.set_num_threads(int(given))
    elif cpus and len(cpus) != len(_SERVED["cores"]):
        torch.set_num_threads(max(1, round(_SERVED["threads"] * len(cpus) / len(_SERVED["cores"]))))


_SERVED = {}  # the server's own cores and torch's threads over them


def _end_with(conn: socket.socket) -> None:
    """The stand-in closed its end (it was killed, or it has the status already): stop at once, as a
    rank whose process torchrun killed would."""
    with contextlib.suppress(OSError):
        conn.recv(1)
    os.kill(os.getpid(), signal.SIGKILL)


def _run(module: str) -> int:
    """The module as __main__, ended as the interpreter ends a script: SystemExit's status, or the
    exception hook (which the harness sets) for anything else."""
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as e:
        return _status(e)
    except BaseException:
        try:
            sys.excepthook(*sys.exc_info())
        except SystemExit as e:
            return _status(e)
        return 1


def _status(e: SystemExit) -> int:
    if e.code is None or isinstance(e.code, int):
        return e.code or 0
    print(e.code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m common.measure.zygote")
    p.add_argument("--socket", required=True)
    p.add_argument("--no-cpu-inductor", action="store_true", help="skip the C++ backend's warm-up (children on a GPU)")
    args = p.parse_args()
    serve(args.socket, cpu_inductor=not args.no_cpu_inductor)
