import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NEEDS_CXX = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                               reason="torch.compile's CPU backend needs a C++ compiler")


# the files whose tests run the most child processes go first, so that the workers finish together
SLOW_FIRST = ("test_parity.py", "test_planted_workload.py", "test_recipes.py", "test_frozen.py",
              "test_device_profiles.py", "test_serving.py",
              "test_nodes.py", "test_sweep.py", "test_ladder.py", "test_reliability.py", "test_gpucheck.py",
              "test_diagnose.py", "test_doctor.py", "test_doctor_frameworks.py", "test_doctor_try.py", "test_tour.py",
              "test_runner.py", "test_startup.py", "test_notebook.py", "test_cold_start.py", "test_gpu_defects.py",
              "test_ddp.py", "test_errors.py", "test_ncu.py", "test_aa.py", "test_trace_page.py")


def pytest_itemcollected(item):
    """For `pytest -n auto --dist loadgroup`: the tests that share a recipe's smoke run (marked recipe(name))
    share a worker, so that it runs once; a module whose tests share a module fixture marks itself with
    xdist_group; every other test goes to whichever worker is free. Marked as each item is collected:
    pytest-xdist reads the groups in its collection_modifyitems."""
    marker = item.get_closest_marker("recipe")
    if marker:
        recipe = marker.args[0]
        item.add_marker(pytest.mark.xdist_group(f"recipe-{SAME_WORKER.get(recipe, recipe)}"))


# Recipes whose smoke runs share a worker, and why: compile's resnet18_fusion pair and cold_start's
# resnet18_cache pair compile the same graph (ResNet-18's whole training step, default mode, smoke size),
# so whichever runs second finds it in Inductor's cache: about 35 s of Inductor on 2 cores, once, not twice
SAME_WORKER = {"cold_start": "compile"}


def pytest_collection_modifyitems(items):
    items.sort(key=lambda i: SLOW_FIRST.index(i.path.name) if i.path.name in SLOW_FIRST else len(SLOW_FIRST))


@pytest.fixture(scope="session", autouse=True)
def isolated_data(tmp_path_factory):
    """Synthetic data in a temporary cache, no network: every subprocess inherits this."""
    os.environ["COOKBOOK_DATA_DIR"] = str(tmp_path_factory.mktemp("data"))
    os.environ["COOKBOOK_OFFLINE"] = "1"
    # the cold-start pairs' smoke runs check their pipeline; an empty Inductor cache per process would cost a
    # minute of C++ compilation each (tests/integration/test_cold_start.py compiles into empty caches where it matters)
    os.environ["COOKBOOK_COMPILE_CACHE"] = "shared"
    # Inductor's C++ kernels without SIMD: the suite checks the pipeline around torch.compile, never a CPU
    # kernel's speed, and scalar code compiles in half the time (ResNet-18's 39 training kernels, cold:
    # 35 s of CPU against 74 s); nor does each process probe the compiler's instruction sets (~9 s)
    os.environ["TORCHINDUCTOR_VEC_ISA_OK"] = "0"
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker per core: each child's torch on one thread, no contention
        os.environ["OMP_NUM_THREADS"] = "1"
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # nor a pool of compile workers, each importing torch
    yield


@pytest.fixture(scope="session", autouse=True)
def zygote(isolated_data, tmp_path_factory):
    """The measured children forked from one process that has imported torch (common.measure.zygote):
    the suite starts a few hundred, each saving the ~4 s of torch's import. COOKBOOK_ZYGOTE=0 runs
    each as a plain process instead."""
    given = os.environ.get("COOKBOOK_ZYGOTE")
    if given == "0" or (given and os.path.exists(given)):  # off, or this session runs inside the suite (make
        yield                                               # gpu-check's tests): the suite's zygote serves it
        return
    path = tmp_path_factory.mktemp("zygote") / "socket"
    proc = subprocess.Popen([sys.executable, "-m", "common.measure.zygote", "--socket", str(path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    if proc.stdout.readline().strip() == "ready":
        os.environ["COOKBOOK_ZYGOTE"] = str(path)
    yield
    os.environ.pop("COOKBOOK_ZYGOTE", None)
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def dynamo_counters_kept():
    """For a test that compiles in the worker's own process: Dynamo's counters (graphs captured, breaks) are
    the process's, and the harness's compile record reads them, so a later in-process run of the same worker
    would count this test's graphs as its own. Put back as they were."""
    import copy

    from torch._dynamo.utils import counters

    saved = copy.deepcopy(counters)
    yield
    counters.clear()
    counters.update(saved)


def run_module(*args, timeout=600, env=None, fresh=False):
    """`python -m <args>` from the repository's root, as a user starts a runner: its status, output and errors.
    Where the suite's zygote serves, forked from it as the runner's own children are (a process of its own,
    its module run as __main__), without the interpreter's start and imports that each of the suite's few
    hundred runners paid (about 0.3 s, and 0.5 s more for matplotlib where it draws a report). fresh: a fresh
    interpreter all the same."""
    full = {**os.environ, **env} if env else dict(os.environ)
    zygote = full.get("COOKBOOK_ZYGOTE", "")
    if not fresh and zygote not in ("", "0") and os.path.exists(zygote):
        try:
            return forked(zygote, list(args), full, timeout)
        except ConnectionError:
            pass  # the zygote is gone: a fresh interpreter does the same
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=full)


def forked(zygote: str, args: list[str], env: dict, timeout: float, cwd=REPO) -> subprocess.CompletedProcess:
    """The module run by a child of the zygote (common.measure.zygote's protocol, its output and its errors
    on pipes of their own), as subprocess.run gives a process's."""
    import json
    import socket
    import threading

    pipes = [os.pipe(), os.pipe()]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(zygote)
        request = {"module": args[0], "argv": args[1:], "cwd": str(cwd), "env": env, "cpus": [], "prepare_on": []}
        socket.send_fds(sock, [json.dumps(request).encode()], [w for _, w in pipes])
    except OSError as e:
        sock.close()
        for r, w in pipes:
            os.close(r)
            os.close(w)
        raise ConnectionError(e) from e
    for _, w in pipes:
        os.close(w)
    texts = ["", ""]

    def drain(i):
        with open(pipes[i][0], errors="replace") as f:
            texts[i] = f.read()

    readers = [threading.Thread(target=drain, args=(i,), daemon=True) for i in (0, 1)]
    for t in readers:
        t.start()
    try:
        pid = int(sock.recv(64))
        sock.settimeout(timeout)
        try:
            said = sock.recv(64)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired([sys.executable, "-m", *args], timeout) from None
    finally:
        sock.close()
    for t in readers:
        t.join()
    return subprocess.CompletedProcess([sys.executable, "-m", *args], int(said) if said else -signal.SIGKILL,
                                       texts[0], texts[1])


# A recipe's runs in the suite that leave torch.compile out, and why: float8's twins both compile a GPT,
# minutes of C++ on 2 cores that say nothing of float8 (its Float8Linear and _scaled_mm run eagerly on a CPU)
SUITE_ENV = {"float8": {"TORCH_COMPILE_DISABLE": "1"}}


def simulated_for(recipe: str) -> dict | None:
    """A recipe whose technique a CPU lacks is not applicable here, so its pair would never run: the suite
    runs it under the first simulated GPU that has it (TF32: an A100; float8: an H100), with the choices
    that GPU gets, on this CPU."""
    from common import catalog
    from common.analysis import device

    if not catalog.not_applicable(recipe, device.cpu("?")):
        return None
    name = next(n for n in ("A100", "H100") if not catalog.not_applicable(recipe, device.SIMULATED[n]))
    return {"COOKBOOK_DEVICE_PROFILE": name, **SUITE_ENV.get(recipe, {})}


# The pairs a recipe's smoke run leaves out of the suite, and why: cold_start's regional pair compiles
# ResNet-18's blocks in seven configurations, about a minute of C++ compilation per process on 2 cores that
# no cache of the suite's saves (its CPU figures: recipes/cold_start/README.md, from `make recipe-cold_start`);
# compile's resnet18 pair is its resnet18_fusion pair with mode="reduce-overhead", whose CUDA graphs a CPU
# skips: the same kernels under another cache key, about 35 s of Inductor on 2 cores for no new path, where
# the fusion pair's graph is the one cold_start's smoke run compiles (SAME_WORKER)
SUITE_PAIRS = {"cold_start": ["resnet18_cache"], "compile": ["churn_serving", "resnet18_fusion", "gpt"]}
# Flags a recipe's smoke run adds, and why: the one-option DDP recipes' tests read their all-reduce counts
# and digests, which the counting hook gives, not the profiler (ddp's own run profiles its ranks)
# (and cold_start's, whose tests read its first steps, caches and break-even: none of them a trace)
SUITE_FLAGS = {r: ["--", "--profile-steps", "0"] for r in ("ddp_buckets", "ddp_bucket_view", "ddp_unused",
                                                           "ddp_static_graph", "cold_start")}


def suite_pairs(recipe: str) -> list[str]:
    from common import catalog

    return SUITE_PAIRS.get(recipe, catalog.workloads(recipe))


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """smoke_run(recipe): `python -m common.runners.compare <recipe> --smoke` once per session and recipe
    (its pairs but SUITE_PAIRS'), as (process, reports folder)."""
    done = {}

    def run(recipe):
        if recipe not in done:
            reports = tmp_path_factory.mktemp(f"reports-{recipe}")
            pairs = ["--workloads", ",".join(SUITE_PAIRS[recipe])] if recipe in SUITE_PAIRS else []
            proc = run_module("common.runners.compare", recipe, "--smoke", "--device", "cpu", "--data", "synthetic",
                              *pairs, "--reports-dir", str(reports), *SUITE_FLAGS.get(recipe, []),
                              env=simulated_for(recipe))
            done[recipe] = proc, reports
        return done[recipe]

    return run


@pytest.fixture(scope="session")
def amp_smoke(smoke_run):
    return smoke_run("amp")


def comparison_of(reports, recipe):
    import json

    return json.loads((reports / "results" / recipe / "comparison.json").read_text())
