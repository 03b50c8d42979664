"""Serve the profiler traces in TensorBoard (torch-tb-profiler), on 127.0.0.1 unless asked otherwise.

    python -m common.render.tensorboard [--port 6006] [--host 127.0.0.1] [--logdir reports/traces]
"""
import os
import socket
import sys
from pathlib import Path

from common.cli import OneLineParser, positive_int
from common.env import LOCAL_REPORTS
from common.errors import CookbookError, exit_with

DEFAULT_HOST = "127.0.0.1"  # this machine only; --host 0.0.0.0 to share on a network


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def main(argv=None):
    p = OneLineParser(prog="python -m common.render.tensorboard", description=__doc__)
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}: this machine only)")
    p.add_argument("--port", type=positive_int, default=6006)
    p.add_argument("--logdir", default=str(LOCAL_REPORTS / "traces"))
    args = p.parse_args(argv)
    try:
        logdir = Path(args.logdir)
        if not any(logdir.rglob("*.pt.trace.json")):
            raise CookbookError(f"no traces in {logdir} yet; run a recipe first (make recipe-amp)")
        if not port_free(args.host, args.port):
            raise CookbookError(f"port {args.port} on {args.host} is taken (another TensorBoard?); "
                                f"stop it or use make tensorboard PORT={args.port + 1}")
        try:
            import torch_tb_profiler  # noqa: F401  (the PYTORCH_PROFILER tab)
        except ImportError:
            print("notice: torch-tb-profiler is not installed: the PYTORCH_PROFILER tab will be missing "
                  "(pip install torch-tb-profiler)", file=sys.stderr)
    except CookbookError as e:
        exit_with(e, "common.render.tensorboard")
    print(f"TensorBoard on http://{args.host}:{args.port}/#pytorch_profiler (Ctrl-C to stop)", flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
                              "--host", args.host, "--port", str(args.port)])


if __name__ == "__main__":
    main()
