"""The one runner (common/launch.py), typed results and parity: unit tests with no child process
except where the runner's launch itself is the subject."""
import json
import os
import sys

import pytest

from common.analysis import aggregate
from common.analysis.results import SCHEMA_VERSION, read_result, write_result
from common.analysis.results_compare import Comparison
from common.analysis.results_run import RunResult
from common.errors import CookbookError
from common.runners import launch

from tests_helpers import run_result


def test_one_data_grammar_for_every_runner():
    assert launch.data_flags(["synthetic"], ["churn", "resnet18"]) == {"churn": ["--data", "synthetic"],
                                                                      "resnet18": ["--data", "synthetic"]}
    flags = launch.data_flags(["churn=/x/telco.csv", "resnet18=/y/cifar"], ["churn", "resnet18"])
    assert flags == {"churn": ["--data", "/x/telco.csv"], "resnet18": ["--data", "/y/cifar"]}
    assert launch.data_flags(["churn=/x/telco.csv"], ["resnet18"]) == {"resnet18": []}  # never sent to ResNet-18
    for bad in ("/x/telco.csv", "gpt2=/x", "churn="):
        with pytest.raises(CookbookError, match="WORKLOAD=PATH"):
            launch.data_flags([bad], ["churn"])


def test_the_ladder_and_the_diagnosis_take_the_same_grammar():
    from common.runners import climb, diagnose

    args = climb.parse_args(["--data", "churn=/x/telco.csv", "--data", "resnet18=/y"])
    assert args.data == ["churn=/x/telco.csv", "resnet18=/y"]
    assert diagnose.parse_args(["churn", "--data", "synthetic"]).data == ["synthetic"]


def test_rounds_alternate_who_goes_first():
    assert launch.alternating(["slow", "fast"], 1) == ["slow", "fast"]
    assert launch.alternating(["slow", "fast"], 2) == ["fast", "slow"]
    assert launch.alternating(range(3), 2) == [2, 1, 0]


def test_the_cpu_set_is_chosen_and_checked():
    usable = launch.env.cpu_set()
    assert launch.cpu_set(None) == (usable[1:] if len(usable) >= 4 else usable)
    assert launch.cpu_set(str(usable[0])) == [usable[0]]
    for bad in ("x", "99999", "0-99999"):
        with pytest.raises(CookbookError, match="--cpus"):
            launch.cpu_set(bad)


def test_the_device_check_is_one_line_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(CookbookError, match="CUDA is not available"):
        launch.use_cuda("cuda")
    assert launch.use_cuda("auto") is False


def test_the_progress_line_estimates_the_time_left():
    import time

    assert launch.progress(1, 10, time.perf_counter(), "churn slow round 1") == "[1/10] churn slow round 1 ..."
    line = launch.progress(3, 10, time.perf_counter() - 60, "x")
    assert line.startswith("[3/10, ~4 min left] x")


def test_launch_reads_a_result_a_failure_and_an_out_of_memory(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(
        "import sys, json, os\n"
        "from common.analysis.results import write_result\n"
        "sys.path.insert(0, os.environ['HELPERS'])\n"
        "from tests_helpers import run_result\n"
        "out = sys.argv[sys.argv.index('--out') + 1]\n"
        "kind = sys.argv[-1]\n"
        "if kind == 'crash':\n"
        "    print('some output'); raise SystemExit('boom')\n"
        "write_result(out, run_result(status='oom' if kind == 'oom' else 'ok'))\n"
        "raise SystemExit(3 if kind == 'oom' else 0)\n")
    import os

    os.environ["HELPERS"] = str(launch.env.REPO_ROOT / "tests")
    ok = launch.child([str(script)], ["ok"], tmp_path / "a.json")
    assert ok.kind == "ok" and isinstance(ok.result, RunResult) and ok.result.timing.summary.n == 20
    oom = launch.child([str(script)], ["oom"], tmp_path / "b.json")
    assert oom.kind == "oom" and oom.returncode == 3
    bad = launch.child([str(script)], ["crash"], tmp_path / "c.json")
    assert bad.kind == "failed" and bad.returncode == 1 and "boom" in bad.tail[-1] and bad.log.exists()
    failure = bad.failure("churn slow", 2)
    assert failure.what == "churn slow" and failure.round == 2 and failure.tail == bad.tail


def test_results_round_trip_through_json(tmp_path):
    r = run_result(ms=7.0)
    write_result(tmp_path / "r.json", r)
    back = read_result(tmp_path / "r.json", RunResult)
    assert back == r and back.timing.summary.median_ms == pytest.approx(7.0)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["type"] == "RunResult"


def test_a_result_of_another_schema_is_one_line_naming_the_file_and_the_command(tmp_path):
    old = tmp_path / "comparison.json"
    old.write_text(json.dumps({"schema_version": 1, "workloads": {}}))
    with pytest.raises(CookbookError) as e:
        read_result(old, Comparison, "make recipe-amp")
    text = str(e.value)
    assert str(old) in text and "schema_version 1" in text and f"reads {SCHEMA_VERSION}" in text
    assert "make recipe-amp" in text and "\n" not in text


def test_report_of_an_old_results_file_is_one_line(tmp_path, monkeypatch):
    from conftest import run_module

    proc = run_module("common.render.report", "no_such_recipe")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_aggregation_is_the_median_of_the_process_figures():
    agg = aggregate.aggregate([run_result(ms=m) for m in (10.0, 30.0, 12.0)])
    assert agg.step_ms == 12.0 and agg.process_ms == [10.0, 30.0, 12.0]
    assert agg.pooled.n == 60 and agg.between_cv == pytest.approx(0.6362, abs=1e-3)
    assert agg.throughput_per_s == pytest.approx(32 * 1000 / 12.0)
    oom = aggregate.aggregate([run_result(), run_result(status="oom")])
    assert oom.status == "oom" and oom.step_ms is None


def _twins(fast_losses):
    return run_result(variant="slow"), run_result(variant="fast", losses=fast_losses)


def test_parity_passes_identical_trajectories_and_says_how_close():
    slow, fast = _twins(None)
    par = aggregate.parity(slow, fast, {"early_steps": 5, "early_rtol": 0.001, "window": 10, "rtol": 0.02})
    assert par.ok and par.max_rel == 0 and par.early_max_rel == 0 and par.steps == len(slow.losses)


def test_parity_fails_on_a_wrong_first_step_a_drift_and_a_nan():
    rule = {"early_steps": 5, "early_rtol": 0.01, "window": 10, "rtol": 0.02}
    base = run_result().losses
    early = aggregate.parity(*_twins([base[0] * 1.1] + base[1:]), rule)
    assert not early.ok and "first 5 steps" in aggregate.parity_failure(early)
    drift = aggregate.parity(*_twins(base[:10] + [x * 1.2 for x in base[10:]]), rule)
    assert not drift.ok and "10-step mean loss differs" in aggregate.parity_failure(drift)
    nan = aggregate.parity(*_twins(base[:-1] + [float("nan")]), rule)
    assert not nan.ok and "not finite" in aggregate.parity_failure(nan)


def test_parity_compares_the_steps_both_twins_ran():
    """A twin that timed more steps to fill its minimum time is compared over the common prefix."""
    slow, fast = _twins(run_result().losses + [0.5] * 30)
    par = aggregate.parity(slow, fast, {"early_steps": 5, "early_rtol": 0.001, "window": 10, "rtol": 0.02})
    assert par.ok and par.steps == len(slow.losses)


def test_parity_with_no_losses_says_why():
    slow, fast = _twins([])
    slow.losses = []
    par = aggregate.parity(slow, fast, {"early_steps": 5, "early_rtol": 0.001, "window": 10, "rtol": 0.02})
    assert not par.ok and "0 and 0 steps" in aggregate.parity_failure(par)


def test_harness_hooks_are_restored_after_finish(tmp_path):
    import signal

    from common import harness

    before = sys.excepthook, signal.getsignal(signal.SIGTERM)
    run = harness.start(str(launch.env.REPO_ROOT / "recipes" / "amp" / "churn_slow.py"), None,
                        ["--smoke", "--profile-steps", "0", "--out", str(tmp_path / "r.json")])
    assert sys.excepthook != before[0]
    for _ in run.loop(iter(range(100))):
        run.log_loss(__import__("torch").tensor(1.0))
    run.finish()
    assert (sys.excepthook, signal.getsignal(signal.SIGTERM)) == before


def test_fault_injection_wraps_the_batch_stream(monkeypatch):
    from common.measure import faults

    monkeypatch.setenv(faults.ENV, "crash:fast:churn")
    assert faults.planned("fast", "churn") == "crash" and faults.planned("slow", "churn") is None
    assert faults.planned("fast", "resnet18") is None
    asked = []
    stream = faults.wrap(iter(range(10)), "crash", armed=lambda: len(asked) == 3)
    for _ in range(3):
        asked.append(next(stream))
    assert asked == [0, 1, 2]
    with pytest.raises(RuntimeError, match="injected crash"):
        next(stream)
    monkeypatch.setenv(faults.env.RUN_ENV, "fast:1")  # under --aa the slow script plays the fast role
    assert faults.planned("slow", "churn") == "crash"
    import inspect

    from common.measure import stages

    timed = inspect.getsource(stages.timed)
    assert "fault" not in timed.lower() and "pace" not in timed.lower()  # nothing of it inside the timed loop


def test_the_pace_fault_gives_each_role_and_round_its_factor_and_stretches_each_step(monkeypatch):
    import time

    from common.measure import faults

    monkeypatch.setenv(faults.ENV, "pace:1,1.5,2")
    factors = {}
    for round_no in (1, 2, 3):
        for role in ("slow", "fast"):
            monkeypatch.setenv(faults.env.RUN_ENV, f"{role}:{round_no}")
            factors[role, round_no] = faults.pace("slow")  # the script's own name does not matter
    assert [factors["slow", r] for r in (1, 2, 3)] == [1, 1.5, 2]
    assert [factors["fast", r] for r in (1, 2, 3)] == [1.5, 2, 1]  # the same paces, another order
    assert faults.planned("fast", "churn") is None  # a pace is no crash
    monkeypatch.delenv(faults.env.RUN_ENV)
    assert faults.pace("fast") == 1.5  # outside a runner: the script's variant, round 1
    stream = faults.paced(iter(range(3)), 3.0)
    next(stream)
    time.sleep(0.05)  # the step's own work
    t0 = time.perf_counter()
    next(stream)
    assert time.perf_counter() - t0 >= 0.09  # slept twice the step again before the next batch


def test_a_relative_reports_folder_is_taken_from_where_the_runner_starts(tmp_path, monkeypatch):
    import argparse

    monkeypatch.chdir(tmp_path)
    p = argparse.ArgumentParser()
    launch.add_flags(p)
    assert p.parse_args(["--reports-dir", "out"]).reports_dir == str(tmp_path / "out")


def test_the_rounds_engine_alternates_stops_when_told_and_keeps_failures(capsys, monkeypatch):
    from common.analysis.results_run import RunResult

    order = []

    def run_one(item, round_no):
        order.append((item, round_no))
        if (item, round_no) == ("b", 2):
            return launch.Outcome("failed", None, 0.1, launch.Path("x.log"), 1, ["boom"])
        r = RunResult.__new__(RunResult)
        r.status = "ok"
        return launch.Outcome("ok", r, 0.1, launch.Path("x.log"), 0, [])

    monkeypatch.setattr(launch.Outcome, "describe", lambda self: self.kind)  # no timing to describe here
    counter = launch.Counter({"w": (2, 10)})
    done = launch.rounds(["a", "b"], run_one, 5, counter, "w", lambda i, n: f"{i} {n}",
                         stop=lambda n, d: "a failure" if d.failures else None)
    assert order == [("a", 1), ("b", 1), ("b", 2), ("a", 2)]  # round 2 runs backwards
    assert [(i, n) for i, n, _ in done.failures] == [("b", 2)] and done.stopped == "a failure"
    assert len(done.runs["a"]) == 2 and len(done.runs["b"]) == 1
    assert counter.totals() == (4, 4, 4)  # settled: no more runs promised
    assert "[4/4" in capsys.readouterr().out


def test_a_local_run_and_make_clean_leave_the_checkout_clean(tmp_path):
    """A CPU run rewrote the tracked reports/README.md, and every later stamp read "-dirty"; make clean
    then left reports whose trace links pointed at deleted files. In a fresh clone of this commit."""
    import os
    import subprocess

    from conftest import REPO

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    env = {**os.environ, "PYTHONPATH": str(clone)}  # the children forked from the suite's zygote: the same commit
    status = lambda: subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True,  # noqa: E731
                                    text=True, check=True).stdout
    run = subprocess.run([sys.executable, "-m", "common.runners.compare", "amp", "--smoke", "--device", "cpu", "--data",
                          "synthetic", "--workloads", "churn"], cwd=clone, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (clone / "reports" / "local" / "amp.md").exists() and status() == ""
    subprocess.run(["make", "clean"], cwd=clone, env={k: v for k, v in env.items() if k != "MAKEFLAGS"},
                   capture_output=True, check=True, timeout=60)
    assert not (clone / "reports" / "local").exists() and status() == ""


def test_a_pages_links_into_the_repository_resolve_wherever_it_lands(tmp_path):
    import shutil

    from common.render import page

    folder = launch.env.LOCAL_REPORTS / f"test-{os.getpid()}" / "deeper"  # a page in another folder of the repo
    try:
        out = folder / "x.md"
        out.parent.mkdir(parents=True)
        page.write(out, "see [amp](../recipes/amp/README.md) and [plot](amp.png)")
        link = out.read_text().split("](")[1].split(")")[0]
        assert link == "../../../../recipes/amp/README.md" and (out.parent / link).resolve() == \
            launch.env.REPO_ROOT / "recipes" / "amp" / "README.md"
        assert "[plot](amp.png)" in out.read_text()  # a page's own files stay beside it
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    page.write(tmp_path / "y.md", "[amp](../recipes/amp/README.md)")  # outside the repository: as written
    assert (tmp_path / "y.md").read_text() == "[amp](../recipes/amp/README.md)"
