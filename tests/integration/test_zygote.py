"""The suite's zygote (common.measure.zygote): a child forked from it ends as a python process would,
its status, its output and its exception hook included, and it stops when its runner stops it."""
import os
import signal
import subprocess
import sys
import time

import pytest

from common.runners import launch


def forked(tmp_path, name, code):
    if not os.environ.get("COOKBOOK_ZYGOTE"):  # set by conftest's session fixture, after collection
        pytest.skip("the suite runs without its zygote (COOKBOOK_ZYGOTE=0)")
    (tmp_path / f"{name}.py").write_text(code)
    log = open(tmp_path / f"{name}.log", "w")
    return launch.Forked(os.environ["COOKBOOK_ZYGOTE"], name, ["--flag", "x"], tmp_path, dict(os.environ, MINE="1"),
                         None, log), log


def said(tmp_path, name, code):
    """A forked child's exit status and output, once it has ended."""
    proc, log = forked(tmp_path, name, code)
    status = proc.wait(timeout=30)
    log.close()
    return status, (tmp_path / f"{name}.log").read_text()


def test_a_forked_child_runs_its_module_as_main_with_its_argv_env_and_folder(tmp_path):
    proc, log = forked(tmp_path, "says", "import os, sys\nprint(__name__, sys.argv[1:], os.environ['MINE'], "
                                         "os.getcwd() == os.path.dirname(__file__))\nsys.exit(3)\n")
    for _ in range(300):  # poll() sees the end without wait()
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    assert proc.returncode == 3 and proc.pid != os.getpid()
    log.close()
    assert (tmp_path / "says.log").read_text() == "__main__ ['--flag', 'x'] 1 True\n"


def test_a_forked_child_reads_what_torch_reads_at_import_from_its_own_environment(tmp_path):
    """TORCH_COMPILE_DISABLE is read once, when torch is imported: in the zygote, before any child's env."""
    code = "import torch._dynamo\nprint(torch._dynamo.config.disable)\n"
    assert said(tmp_path, "default", code) == (0, "False\n")  # the suite's own env: compiled as it asks
    (tmp_path / "reads.py").write_text(code)
    with open(tmp_path / "reads.log", "w") as log:
        proc = launch.Forked(os.environ["COOKBOOK_ZYGOTE"], "reads", [], tmp_path,
                             dict(os.environ, TORCH_COMPILE_DISABLE="1"), None, log)
        assert proc.wait(timeout=30) == 0
    assert (tmp_path / "reads.log").read_text() == "True\n"


def test_an_uncaught_error_goes_through_the_exception_hook_the_child_set(tmp_path):
    assert said(tmp_path, "hooked", "import sys\nsys.excepthook = lambda *a: (print('one line'), "
                                    "sys.exit(2))\nraise ValueError('x')\n") == (2, "one line\n")


def test_a_runner_the_suite_starts_is_forked_with_its_errors_apart_from_its_output(tmp_path):
    """conftest.run_module forks the runners too: a process of its own, its output and errors on pipes of their own."""
    from conftest import forked as run_forked

    if not os.environ.get("COOKBOOK_ZYGOTE"):
        pytest.skip("the suite runs without its zygote (COOKBOOK_ZYGOTE=0)")
    (tmp_path / "both.py").write_text("import sys\nfrom common.measure import timeline\nprint('out', timeline.FORKED)\n"
                                      "print('err', file=sys.stderr)\nsys.exit(4)\n")
    proc = run_forked(os.environ["COOKBOOK_ZYGOTE"], ["both"], dict(os.environ), 30, cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (4, "out True\n", "err\n")


def test_a_child_its_runner_stops_ends_without_a_status(tmp_path):
    proc, log = forked(tmp_path, "sleeps", "import time\ntime.sleep(60)\n")
    time.sleep(0.5)
    assert proc.poll() is None  # running: a server's runner polls it while it waits for the first answer
    proc.kill()
    assert proc.wait(timeout=30) < 0
    log.close()


def test_a_forked_child_inherits_inductors_answer_on_the_vector_instruction_sets(tmp_path):
    """The probe costs ~9 s of CPU per process that compiles on a CPU: the zygote asks once."""
    assert said(tmp_path, "isa", "from torch._inductor import cpu_vec_isa\n"
                                 "print(cpu_vec_isa.valid_vec_isa_list.cache_info().currsize)\n") == (0, "1\n")


def test_a_forked_child_can_still_start_cuda(tmp_path):
    """Nothing the zygote did before forking initialized the CUDA driver (its warm-up included): a
    driver initialized there makes every child's CUDA fail with "Cannot re-initialize CUDA in forked
    subprocess" on a GPU machine. The same flag is set on a CPU-only machine, so this runs anywhere."""
    assert said(tmp_path, "cuda", "import torch\nprint(torch._C._cuda_isInBadFork())\n") == (0, "False\n")


def stand_in(tmp_path, name, code):
    """common.measure.zygote_client as torchrun starts a rank: its child forked from the zygote."""
    if not os.environ.get("COOKBOOK_ZYGOTE"):
        pytest.skip("the suite runs without its zygote (COOKBOOK_ZYGOTE=0)")
    (tmp_path / f"{name}.py").write_text(code)
    return subprocess.Popen([sys.executable, "-m", "common.measure.zygote_client", name, "--flag", "x"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, RANK="1", PYTHONPATH=str(launch.env.REPO_ROOT)))


def test_a_torchrun_rank_forked_through_its_stand_in_has_its_env_output_and_status(tmp_path):
    proc = stand_in(tmp_path, "rank", "import os, sys\nprint(__name__, sys.argv[1:], os.environ['RANK'], os.getpid(), "
                                      "sep='|')\nsys.exit(5)\n")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 5
    name, argv, rank, pid = out.strip().split("|")
    assert (name, argv, rank) == ("__main__", "['--flag', 'x']", "1") and int(pid) != proc.pid


def test_a_stand_in_passes_sigterm_on_and_its_child_dies_with_it(tmp_path):
    code = ("import os, signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: (print('terminated'), "
            "sys.exit(7)))\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n")
    proc = stand_in(tmp_path, "waits", code)
    int(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)  # what torchrun sends its ranks when one fails
    assert proc.wait(timeout=30) == 7 and "terminated" in proc.stdout.read()

    proc = stand_in(tmp_path, "waits", code)
    child = int(proc.stdout.readline())
    proc.kill()  # no signal to pass on: the child notices its stand-in is gone
    proc.wait(timeout=30)
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the rank {child} outlived its killed stand-in")


def test_a_child_pinned_to_fewer_cores_runs_as_many_torch_threads_as_a_fresh_process_would(tmp_path):
    """torch sizes its thread pool from the cores it may use when it is imported: in the server, over the
    server's cores. A child pinned to fewer that kept the server's count would oversubscribe its cores
    and time other steps than a fresh process pinned alike."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("one core: no fewer to pin to")
    plain = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "COOKBOOK_ZYGOTE")}
    plain["PYTHONPATH"] = str(launch.env.REPO_ROOT)
    sock = tmp_path / "socket"
    server = subprocess.Popen([sys.executable, "-m", "common.measure.zygote", "--socket", str(sock),
                               "--no-cpu-inductor"], stdout=subprocess.PIPE, text=True, env=plain)
    try:
        assert server.stdout.readline().strip() == "ready"
        (tmp_path / "threads.py").write_text("import torch\nprint(torch.get_num_threads())\n")
        for pinned in (cores[:1], cores):
            fresh = subprocess.run([sys.executable, str(tmp_path / "threads.py")], env=plain, capture_output=True,
                                   text=True, preexec_fn=lambda p=pinned: os.sched_setaffinity(0, p))
            with open(tmp_path / "threads.log", "w") as log:
                child = launch.Forked(str(sock), "threads", [], tmp_path, plain, pinned, log)
                assert child.wait(timeout=60) == 0
            assert (tmp_path / "threads.log").read_text().strip() == fresh.stdout.strip(), pinned
    finally:
        server.kill()
        server.wait()
