"""Bad input gives one clear line on stderr and exit status 2, not a stack trace."""
import os
import subprocess
import sys

import pytest

from conftest import REPO, run_module


def one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_unknown_recipe_lists_the_valid_ones():
    line = one_line(run_module("common.runners.compare", "turbo"))
    assert "unknown recipe 'turbo'" in line and "amp" in line


def test_unknown_workload_lists_the_valid_ones():
    line = one_line(run_module("common.runners.compare", "amp", "--workloads", "bert"))
    assert "bert" in line and "churn, resnet18" in line


def test_a_script_refuses_bad_input_in_one_line_and_exit_2(tmp_path):
    """The contract in a child process, as a user meets it; the cases below run in this process."""
    line = one_line(run_module("recipes.amp.churn_slow", "--steps", "0", "--out", str(tmp_path / "r.json")))
    assert "--steps: must be 1 or more" in line and "python -m recipes.amp.churn_slow" in line
    assert not (tmp_path / "r.json").exists()


@pytest.fixture
def refused(capsys):
    """refused(module, *argv): a recipe script run in this process on bad input -> the one line it
    gives (its CookbookError, or the parser's exit 2), with the process hooks put back afterwards."""
    import runpy
    import signal

    from common.errors import CookbookError

    saved = sys.argv, sys.excepthook, signal.getsignal(signal.SIGTERM)

    def run(module, *argv):
        sys.argv = [module, *argv]
        try:
            runpy.run_module(module, run_name="__main__")
        except CookbookError as e:
            return str(e)
        except SystemExit as e:
            assert e.code == 2, e.code
            lines = capsys.readouterr().err.strip().splitlines()
            assert len(lines) == 1, lines
            return lines[0]
        pytest.fail(f"{module} {' '.join(argv)}: accepted")

    yield run
    sys.argv, sys.excepthook = saved[:2]
    signal.signal(signal.SIGTERM, saved[2])


@pytest.mark.parametrize("flags, words", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--steps", "0"], "--steps: must be 1 or more"),
    (["--warmup", "-1"], "--warmup: must be 1 or more"),
    (["--batch-size", "x"], "--batch-size: 'x' is not a whole number"),
])
def test_bad_flags(flags, words, refused):
    assert words in refused("recipes.amp.churn_slow", *flags)


def test_unreadable_data_file(tmp_path, refused):
    bad = tmp_path / "telco.csv"
    bad.write_bytes(b"\x00\x01\x02 not a csv")
    line = refused("recipes.amp.churn_slow", "--smoke", "--data", str(bad), "--out", str(tmp_path / "r.json"))
    assert str(bad) in line and "not a readable CSV" in line
    assert not (tmp_path / "r.json").exists()


def test_missing_data_file(tmp_path, refused):
    assert "no such file" in refused("recipes.amp.churn_fast", "--smoke", "--data", str(tmp_path / "nope.csv"))


def test_cuda_requested_without_cuda(refused):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    line = refused("recipes.amp.churn_slow", "--device", "cuda", "--smoke")
    assert "CUDA is not available" in line and "--device cpu" in line


def test_help_lists_the_shared_flags(capsys):
    import runpy

    saved, sys.argv = sys.argv, ["recipes.amp.resnet18_fast", "--help"]
    try:
        with pytest.raises(SystemExit) as e:
            runpy.run_module("recipes.amp.resnet18_fast", run_name="__main__")
    finally:
        sys.argv = saved
    out = capsys.readouterr().out
    assert e.value.code == 0
    for flag in ("--device", "--steps", "--warmup", "--batch-size", "--seed", "--data", "--out", "--trace-dir",
                 "--smoke", "--profile-steps", "--image-size"):
        assert flag in out


def test_unwritable_output_folder(tmp_path, refused):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    line = refused("recipes.amp.churn_slow", "--smoke", "--data", "synthetic", "--out", str(blocker / "r.json"))
    assert "output folder" in line and "cannot be written" in line and "choose another folder" in line
    assert blocker.read_text() == "not a folder"


def test_unwritable_trace_folder(tmp_path, refused):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = refused("recipes.amp.churn_slow", "--smoke", "--data", "synthetic", "--out", str(tmp_path / "r.json"),
                   "--trace-dir", str(blocker / "traces"))
    assert "trace folder" in line and "cannot be written" in line
    assert not (tmp_path / "r.json").exists()


def test_unwritable_reports_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = one_line(run_module("common.runners.compare", "amp", "--smoke", "--device", "cpu",
                               "--reports-dir", str(blocker / "reports")))
    assert "--reports-dir" in line and "choose a writable folder" in line


def test_cifar_folder_with_a_missing_batch(tmp_path, refused):
    from common.workloads import cifar10

    root = cifar10.write_synthetic(tmp_path / "cifar", per_file=20)
    (root / cifar10.BATCHES / "test_batch").unlink()
    out = tmp_path / "r.json"
    line = refused("recipes.amp.resnet18_slow", "--smoke", "--data", str(root), "--out", str(out))
    assert "missing CIFAR-10 batch file test_batch" in line
    assert not out.exists()


def test_nsys_missing_says_what_to_do(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # a PATH without nsys
    proc = subprocess.run([sys.executable, "-m", "common.runners.nsys", "amp"], cwd=REPO,
                          capture_output=True, text=True, env=env, timeout=120)
    line = one_line(proc)
    assert "nsys not found" in line and "make tensorboard" in line


def test_auto_device_on_cpu_says_so(tmp_path):
    import json

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "r.json"
    proc = run_module("recipes.amp.churn_slow", "--smoke", "--data", "synthetic", "--out", str(out),
                      "--profile-steps", "0")
    assert proc.returncode == 0, proc.stderr
    assert "CUDA not available: ran on CPU" in proc.stdout
    assert "CUDA not available: ran on CPU (numbers are CPU numbers)" in json.loads(out.read_text())["notices"]


# --- every runner checks every input before the first run, and writes nothing on bad input -------
def _listing(folder):
    """Every path under folder with its size and mtime: what a bad input must leave as it was."""
    return sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def telco_lookalike(tmp_path_factory):
    path = tmp_path_factory.mktemp("csv") / "not-telco.csv"
    path.write_text("id,amount,label\n1,2.5,yes\n2,3.5,no\n")
    return path


@pytest.fixture(scope="module")
def fake_cifar(tmp_path_factory):
    """A folder in the CIFAR-10 layout whose batch files are not the real ones (md5 mismatch)."""
    from common.workloads import cifar10

    return cifar10.write_synthetic(tmp_path_factory.mktemp("cifar"), per_file=2)


BAD_RUNNER_INPUT = [
    (["common.runners.sweep", "amp", "--values", "0,-4"], "--values '0,-4': '0' is not a valid batch size"),
    (["common.runners.sweep", "amp", "--values", "4,x"], "'x' is not a valid batch size"),
    (["common.runners.sweep", "dataloader", "--values", "0,-1"], "'-1' is not a valid DataLoader workers"),
    (["common.runners.sweep", "amp", "--values", "4,4"], "--values '4,4': batch size 4 is given twice"),
    (["common.runners.sweep", "amp", "--rounds", "0"], "--rounds: must be 1 or more"),
    (["common.runners.sweep", "amp", "--", "--batch-size", "8"], "it is the sweep's knob"),
    (["common.runners.compare", "amp", "--data", "resnet18=/nonexistent"], "no cifar-10-batches-py folder"),
    (["common.runners.compare", "amp", "--data", "resnet18={cifar}"], "batch file data_batch_1 is corrupt"),
    (["common.runners.compare", "amp", "--data", "churn={csv}"], "not the Telco churn table, missing columns"),
    (["common.runners.compare", "amp", "--data", "churn=/nonexistent.csv"], "no such file"),
    (["common.runners.compare", "checkpointing", "--memory-budget-gb", "-1"], "--memory-budget-gb: must be 0 or more"),
    (["common.runners.compare", "amp", "--cpus", "3-1"], "--cpus '3-1'"),
    (["common.runners.compare", "amp", "--cpus", "99999"], "--cpus '99999'"),
    (["common.runners.compare", "amp", "--parity-rtol", "0"], "--parity-rtol: must be more than 0"),
    (["common.runners.compare", "amp", "--max-rounds", "0"], "--max-rounds: must be 1 or more"),
    (["common.runners.compare", "amp", "--rounds", "5", "--max-rounds", "3"], "--rounds 5 is more than --max-rounds 3"),
    (["common.runners.compare", "amp", "--workloads", ","], "--workloads ','"),
    (["common.runners.compare", "amp", "--", "--steps", "0"], "after --: argument --steps: must be 1 or more, got 0"),
    (["common.runners.compare", "amp", "--", "--out", "x.json"], "--out is set by the runner itself"),
    (["common.runners.compare", "amp", "--", "--bogus"], "unrecognized arguments: --bogus"),
    (["common.runners.climb", "--rounds", "-1"], "--rounds: must be 1 or more"),
    (["common.runners.climb", "churn", "--", "--steps", "0"], "after --: argument --steps: must be 1 or more"),
    (["common.runners.climb", "--", "--rung", "2"], "--rung is set by the runner itself"),
    (["common.runners.climb", "--data", "churn={csv}"], "not the Telco churn table"),
    (["common.runners.diagnose", "churn", "--cpus", "x"], "--cpus 'x'"),
    (["common.runners.diagnose", "churn", "--", "--warmup", "0"], "after --: argument --warmup: must be 1 or more"),
    (["common.runners.diagnose", "resnet18", "--data", "resnet18=/nonexistent"], "no cifar-10-batches-py folder"),
]


@pytest.mark.parametrize("argv, words", BAD_RUNNER_INPUT, ids=[" ".join(a) for a, _ in BAD_RUNNER_INPUT])
def test_a_runner_checks_every_input_before_it_starts_or_writes(argv, words, tmp_path, telco_lookalike, fake_cifar):
    import time

    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "sentinel.md").write_text("left as it was\n")
    before = _listing(reports)
    argv = [a.format(csv=telco_lookalike, cifar=fake_cifar) for a in argv]
    own = argv.index("--") if "--" in argv else len(argv)  # runner flags before the scripts' ones
    argv = argv[:own] + ["--smoke", "--device", "cpu", "--reports-dir", str(reports)] + argv[own:]
    started = time.perf_counter()
    line = one_line(run_module(*argv, timeout=60))
    assert words in line
    assert time.perf_counter() - started < 30  # no run was started
    assert _listing(reports) == before  # not even an empty results folder


def test_the_data_check_reads_a_folder_as_torchvision_would():
    """The runners' torch-free CIFAR-10 check uses torchvision's own checksums."""
    from torchvision.datasets import CIFAR10

    from common.workloads import cifar10

    expected = CIFAR10.train_list + CIFAR10.test_list + [[CIFAR10.meta["filename"], CIFAR10.meta["md5"]]]
    assert cifar10.MD5 == dict(map(tuple, expected))


# --- files get the usual mode ----------------------------------------------------------------------
@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_files_get_the_mode_of_the_umask(tmp_path, mask, mode):
    from common.files import atomic_write_text, umask

    saved = os.umask(mask)
    try:
        assert umask() == mask
        atomic_write_text(tmp_path / "report.md", "# a report\n")
        atomic_write_text(tmp_path / "report.md", "# again, replaced\n")
    finally:
        os.umask(saved)
    assert (tmp_path / "report.md").stat().st_mode & 0o777 == mode
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


# --- the progress line never promises fewer runs than are to come ----------------------------------
def _shown(line):
    """'[5/12 planned, up to 40, ~2 min left as planned] ...' -> (5, 12, 40)."""
    import re

    m = re.match(r"\[(\d+)/(\d+)( planned, up to (\d+))?[,\]]", line)
    assert m, line
    done, planned = int(m[1]), int(m[2])
    return done, planned, int(m[4]) if m[3] else planned


def test_the_progress_text_says_planned_and_the_most():
    import time

    from common.runners import launch

    assert launch.progress(1, 10, time.perf_counter(), "x") == "[1/10] x ..."
    assert launch.progress(1, 10, time.perf_counter(), "x", most=40) == "[1/10 planned, up to 40] x ..."
    line = launch.progress(3, 10, time.perf_counter() - 60, "x", most=40)
    assert line.startswith("[3/10 planned, up to 40, ~4 min left as planned] x")
    assert launch.progress(12, 10, time.perf_counter(), "x").startswith("[12/12")  # never below what ran


@pytest.mark.parametrize("rounds", [(3, 3), (5, 3), (10, 10), (4, 6), (1, 10)])
def test_the_progress_counter_never_shows_fewer_runs_than_are_still_to_come(rounds):
    """Two pairs, 3 to 10 rounds each (or stopped early by a failure), then a search of 1 to 19
    probes: at every run the planned total covers the runs under way and the least of the stages
    still ahead, and the most covers every run that really follows."""
    from common.runners import launch

    stages = {"churn": (6, 20), "resnet18": (6, 20), "budget": (1, 19)}
    real = {"churn": 2 * rounds[0], "resnet18": 2 * rounds[1], "budget": 7}
    counter, total, n = launch.Counter(stages), sum(real.values()), 0
    for k, (stage, runs) in enumerate(real.items()):
        ahead = sum(stages[s][0] for s in list(stages)[k + 1:])
        for i in range(runs):
            if stage != "budget" and i % 2 == 0:
                counter.at_least(stage, i + 2)  # a round starts: both of its runs
            n += 1
            done, planned, most = _shown(counter(stage, f"{stage} run {i + 1}"))
            assert done == n and planned >= n + ahead and most >= total
        counter.settle(stage)
    assert counter.totals() == (total, total, total)


def test_the_recipe_counter_counts_the_memory_budget_probes():
    from pathlib import Path

    from common.runners import budget, compare
    from common.spec import Budget

    plan = compare.ComparePlan(recipe="checkpointing", title="", evidence=(), cuda=True,
                        rounds=compare.Rounds(3, 10, fixed=False), workloads=["churn", "resnet18"], script_flags={},
                        cpus=[0], reports_dir=Path("."), results_dir=Path("."), traces_dir=Path("."), smoke=False,
                        command="", budget_gb=16.0, budget_spec=Budget(pair="resnet18", start=64))
    assert compare.make_counter(plan).totals() == (0, 12 + 2, 40 + 2 * budget.most_probes(64))
    plan.cuda = False  # on a CPU the search does not run
    assert compare.make_counter(plan).totals() == (0, 12, 40)


def test_the_budget_bound_is_the_most_probes_a_search_runs(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from common.runners import budget

    for start in (1, 48, 256):
        worst = 0
        for first_oom in [*range(1, 2 * budget.MAX_BATCH, 97), 10 ** 9]:
            launched = []

            def child(target, flags, out, cpus=None, first_oom=first_oom, launched=launched):
                launched.append(flags[-1])
                return SimpleNamespace(kind="ok" if int(flags[-1]) < first_oom else "oom")

            monkeypatch.setattr(budget.launch, "child", child)
            budget.search("m", [], tmp_path, None, start, progress=lambda _: None)
            worst = max(worst, len(launched))
        assert worst == budget.most_probes(start)


# --- a runner that ends with status 1 says why in its last line ------------------------------------
def test_a_sweep_that_fails_says_which_point_and_why_last(monkeypatch, capsys, tmp_path):
    from common.render import index
    from common.runners import sweep

    result = sweep.SweepResult(recipe="amp", title="AMP", pair="resnet18", knob="batch size", flag="--batch-size",
                               mode="smoke", rounds=2, command="", points=[
                                   sweep.Point(value=2, parity_ok=False, parity_failure="the first 5 steps' losses "
                                               "differ by up to 9.00% (tolerance 3%)"),
                                   sweep.Point(value=4, failed=["fast round 2: exit 1 (x.log)"])])
    monkeypatch.setattr(sweep, "run_sweep", lambda argv: (result, tmp_path))
    monkeypatch.setattr(sweep, "render", lambda r, d: [])
    monkeypatch.setattr(index, "render", lambda d: [])
    assert sweep.main(["amp"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "batch size 2: parity FAILED: the first 5 steps' losses differ by up to 9.00%" in last
    assert "batch size 4: fast round 2: exit 1 (x.log)" in last


def test_a_comparison_that_fails_says_which_pair_and_why_last(monkeypatch, capsys, tmp_path):
    from common.analysis.results_compare import Comparison, Failure, Parity, WorkloadComparison
    from common.render import report
    from common.runners import compare

    plan = compare.ComparePlan(recipe="amp", title="AMP", evidence=(), cuda=False, rounds=compare.Rounds(1, 1, True),
                        workloads=["churn", "resnet18"], script_flags={}, cpus=[0], reports_dir=tmp_path,
                        results_dir=tmp_path / "results" / "amp" / "run", traces_dir=tmp_path, smoke=True, command="")
    bad = Parity(ok=False, what="training loss", rtol=0.05, early_max_rel=0.0, early_steps=5, early_rtol=0.03,
                 max_rel=0.2, at_step=10, window=10, steps=40)
    comparison = Comparison(recipe="amp", title="AMP", evidence_keys=[], smoke=True, device="cpu", command="",
                            results_dir="", workloads={"churn": WorkloadComparison(parity=bad)},
                            failures=[Failure(what="resnet18 slow", round=1, returncode=1, log="r.log",
                                              tail=["RuntimeError: boom"], seconds=1.0)])
    monkeypatch.setattr(report, "terminal_table", lambda c: "")
    assert compare.finish(plan, comparison) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "parity FAILED for amp/churn: the 10-step mean loss differs by 20.00%" in last
    assert "resnet18 slow round 1 failed (exit 1; log r.log)" in last
