"""The traces load in a real TensorBoard with torch-tb-profiler, served on 127.0.0.1."""
import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import REPO

PLUGIN = "/data/plugin/pytorch_profiler"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_addresses(port):
    """Local IPv4 addresses with a socket listening on port, from /proc/net/tcp (state 0A = LISTEN)."""
    found = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
    return found


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


@pytest.mark.recipe("amp")
def test_profiler_plugin_lists_runs_and_views(amp_smoke):
    pytest.importorskip("torch_tb_profiler")
    _, reports = amp_smoke
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "common.render.tensorboard", "--logdir", str(reports / "traces"),
                             "--port", str(port)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wanted = {"amp/churn_slow", "amp/churn_fast", "amp/resnet18_slow", "amp/resnet18_fast"}
        runs, deadline = [], time.time() + 90
        while time.time() < deadline:
            try:
                listing = get(port, f"{PLUGIN}/runs")
                runs = listing["runs"]
                # every run listed: the plugin loads them one by one and may say it is done between two
                if wanted <= set(runs) and not listing.get("loading"):
                    break
            except OSError:
                pass
            time.sleep(1)
        assert wanted <= set(runs)
        views = get(port, f"{PLUGIN}/views?run=amp/resnet18_fast")
        assert {"Overview", "Operator", "Trace"} <= set(views)
        assert get(port, f"{PLUGIN}/workers?run=amp/resnet18_fast&view=Operator") == ["resnet18_fast"]
        assert listening_addresses(port) == {"127.0.0.1"}  # loopback only, unless asked otherwise
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.recipe("amp")
def test_taken_port_is_one_clear_error(amp_smoke):
    _, reports = amp_smoke
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "common.render.tensorboard", "--logdir", str(reports / "traces"),
                               "--port", str(port)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and f"port {port} on 127.0.0.1 is taken" in proc.stderr
