"""For the test suite: a torchrun rank forked from the zygote (common.measure.zygote) instead of
started cold, so that each rank of the suite's few dozen launches skips torch's import.

    torchrun ... -m common.measure.zygote_client MODULE ARGS...     # (launch._start writes this)

This process stands in for the rank where torchrun watches it: it asks the zygote for a child
running MODULE with this process's argv, folder, environment (RANK, WORLD_SIZE, ...), cores and
output, passes on the signals torchrun sends, and exits with the child's status. The child is tied
to it: if this process dies, so does the child. No torch here (common.env is the standard library
only): it must start at once."""
import json
import os
import signal
import socket
import sys

from common.env import ZYGOTE_ENV


def main() -> int:
    module, argv = sys.argv[1], sys.argv[2:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(os.environ[ZYGOTE_ENV])
    request = {"module": module, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
               "cpus": sorted(os.sched_getaffinity(0)), "tied": True}
    child, early = [], []  # the child's pid once the zygote says it; the signals that came before

    def forward(sig, _frame):
        if not child:
            early.append(sig)
            return
        try:
            os.kill(child[0], sig)
        except ProcessLookupError:
            pass

    # before the request: the child may run (and be signalled through this process) before its pid arrives
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    socket.send_fds(sock, [json.dumps(request).encode()], [1])
    child.append(int(sock.recv(64)))
    for sig in early:
        forward(sig, None)
    said = sock.recv(64)  # the child's status; nothing if it was killed
    return int(said) if said else 128 + signal.SIGKILL


if __name__ == "__main__":
    sys.exit(main())
