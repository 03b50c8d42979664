"""`make gpu-check` (the tour's --check): every target once, one line each, on a CPU at smoke sizes; its
budget, bundle and resume are the tour's."""
import json
import os
import subprocess
import sys

import pytest

from common import catalog
from common.runners import checks, tour

from conftest import REPO

# a check as a process takes the checkout's tour lock: one such test at a time, beside the tour's own
LOCK = pytest.mark.xdist_group("tour-lock")


def test_the_check_covers_every_recipe_sweep_ladder_and_diagnosis(tmp_path, monkeypatch):
    monkeypatch.setattr(checks.shutil, "which", lambda name: f"/usr/local/cuda/bin/{name}")  # ncu installed
    names = [t.name for t in checks.targets(smoke=False, out=tmp_path)]
    sweeps = catalog.swept()
    assert names == ["aa", "tests", *[f"recipe-{r}" for r in catalog.available()], *[f"sweep-{r}" for r in sweeps],
                     "ladder", "diagnose-churn", "diagnose-resnet18", "doctor-churn", "doctor-resnet18", "doctor-try",
                     "ncu-amp"]
    aa = checks.targets(smoke=False, out=tmp_path)[0]
    assert aa.alone and "--aa" in aa.cmd and aa.cmd[aa.cmd.index("--rounds") + 1] == "3"  # the real sizes, the tour's
    assert "--reports-dir" not in aa.cmd  # into reports/results/amp/aa/, where the reports rendered here cite it
    for t in checks.targets(smoke=False, out=tmp_path)[2:]:
        assert str(tmp_path) in t.cmd  # never over the committed reports
        assert "--smoke" not in t.cmd
        served = t.name.startswith("recipe-") and catalog.served(t.name[len("recipe-"):])
        # a server: seconds of load, no script flags; else a GPU's few steps (ncu: 2 timed, 1 profiled)
        assert ("--duration-s" in t.cmd and "--" not in t.cmd if served
                else "20" in t.cmd or "10" in t.cmd or t.name == "ncu-amp")
    smoke = checks.targets(smoke=True, out=tmp_path)
    assert all("--smoke" in t.cmd for t in smoke[2:]) and str(tmp_path) in smoke[0].cmd  # a test's A/A: its folder
    assert "ncu-amp" not in [t.name for t in smoke]  # ncu: CUDA only
    monkeypatch.setattr(checks.shutil, "which", lambda name: None)
    assert "ncu-amp" not in [t.name for t in checks.targets(smoke=False, out=tmp_path)]  # not installed


def _check(tmp_path, *flags, env=None):
    """make gpu-check as a process, its bundle in tmp_path/bundle and so its reports and logs in tmp_path/checks."""
    return subprocess.run([sys.executable, "-m", "common.runners.tour", "--check", "--bundle", str(tmp_path / "bundle"),
                           *flags], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def _in_process(tmp_path, monkeypatch, *flags, commit="0123456789ab"):
    """The check in this process, its lock and sitting folder under tmp_path (as the tour's tests have them)."""
    monkeypatch.setattr(tour.env, "git_commit", lambda: commit)
    monkeypatch.setattr(tour.env, "REPO_ROOT", tmp_path)
    return tour.tour(["--check", "--smoke", "--no-zygote", *flags])


@LOCK
def test_without_cuda_it_says_to_use_a_gpu_or_smoke(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = _check(tmp_path)
    assert proc.returncode == 2 and "no CUDA device here" in proc.stderr and proc.stderr.count("\n") == 1
    assert not any(tmp_path.iterdir())


@LOCK
def test_one_line_per_target_ok_or_failed_with_its_log(tmp_path):
    # the two cheapest targets: the fault crashes the measured baseline (variant "mlp"); the doctor runs
    # the same script plain, where no fault is planted
    proc = _check(tmp_path, "--smoke", "--only", "diagnose-churn,doctor-churn", "--jobs", "2",
                  env={"COOKBOOK_FAULT": "crash:mlp:churn"})
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert any(line.startswith("ok      doctor-churn") for line in lines)
    failed = next(line for line in lines if line.startswith("FAILED  diagnose-churn"))
    assert "exit 1" in failed and "(log: " in failed and (tmp_path / "checks" / "logs" / "diagnose-churn.log").exists()
    assert lines[-1] == "gpu-check: 1 of 2 ok; failed: diagnose-churn"


def test_the_aa_runs_alone_before_the_others_and_its_ok_line_shows_its_interval(tmp_path, monkeypatch):
    """The order and the line, with stand-in targets (tests/integration/test_aa.py runs compare --aa itself)."""
    said = "A/A: 1.00x, 0.98-1.02 (95% interval, 3 processes each): no meaningful difference (within +-3%); parity ok"
    stand_ins = [checks.Target("aa", ["-c", f"print('x'); print({said!r}); print('y')"], alone=True, tells="A/A: "),
                 checks.Target("quick", ["-c", "pass"]), checks.Target("other", ["-c", "pass"])]
    started = []
    real_run = checks.run

    def run(target, log, timeout, track=None):
        started.append((target.name, timeout))
        return real_run(target, log, timeout, track)

    monkeypatch.setattr(checks, "targets", lambda smoke, out: stand_ins)
    monkeypatch.setattr(checks, "run", run)
    assert _in_process(tmp_path, monkeypatch, "--jobs", "2", "--bundle", str(tmp_path / "bundle")) == 0
    assert started[0] == ("aa", checks.AA_SECONDS)  # first, alone, bounded
    assert {name for name, _ in started[1:]} == {"quick", "other"}


def test_an_ok_line_shows_the_last_line_its_target_tells(tmp_path):
    target = checks.Target("aa", ["-c", "print('A/A: 1.50x, 0.20-9.00 (first)'); print('A/A: 1.01x, 0.99-1.03')"],
                             tells="A/A: ")
    ok, line = checks.run(target, tmp_path / "aa.log", 60)
    assert ok and line.startswith("ok      aa") and line.endswith("  A/A: 1.01x, 0.99-1.03")


@LOCK
def test_it_prints_the_device_profile_first_and_says_what_the_gpu_lacks(tmp_path):
    """As on a P100 (sm_60, simulated on this CPU): TF32 and Inductor missing, said on the targets' lines,
    nothing timed for them."""
    proc = _check(tmp_path, "--smoke", "--only", "recipe-precision,sweep-compile",
                  env={"COOKBOOK_DEVICE_PROFILE": "P100"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("gpu-check: device profile: Tesla P100-PCIE-16GB (sm_60, simulated), 17.1 GB: "
                               "AMP in float16 with a GradScaler; TF32 no; torch.compile (Inductor) no")
    precision = next(line for line in lines if "recipe-precision" in line)
    sweep = next(line for line in lines if "sweep-compile" in line)
    assert precision.startswith("ok")
    assert "not applicable on Tesla P100-PCIE-16GB (sm_60, simulated): no TF32" in precision
    assert sweep.startswith("ok") and "no Triton" in sweep


def test_a_later_sitting_runs_only_what_an_earlier_one_did_not_pass_at_this_commit_on_this_device(tmp_path,
                                                                                               monkeypatch, capsys):
    """About 110 processes do not fit one short stretch of GPU: sittings add up to every target once."""
    flaky = tmp_path / "flaky"
    code = f"import os, sys; sys.exit(0 if os.path.exists({str(flaky)!r}) else 1)"
    stand_ins = [checks.Target("fine", ["-c", "pass"]), checks.Target("flaky", ["-c", code])]
    ran = []
    real_run = checks.run
    monkeypatch.setattr(checks, "targets", lambda smoke, out: stand_ins)
    monkeypatch.setattr(checks, "run", lambda t, log, timeout, track=None: (ran.append(t.name),
                                                                        real_run(t, log, timeout, track))[1])
    bundle = ["--bundle", str(tmp_path / "bundle")]
    assert _in_process(tmp_path, monkeypatch, *bundle) == 1 and sorted(ran) == ["fine", "flaky"]
    flaky.touch()
    ran.clear()
    assert _in_process(tmp_path, monkeypatch, *bundle) == 0 and ran == ["flaky"]  # only what failed
    assert capsys.readouterr().out.splitlines()[-1] == "gpu-check: 1 of 1 ok (1 more passed earlier)"
    assert set(json.loads((tmp_path / "bundle" / "tour.json").read_text())["checks"]) == {"fine", "flaky"}
    ran.clear()
    assert _in_process(tmp_path, monkeypatch, *bundle, "--again") == 0 and sorted(ran) == ["fine", "flaky"]
    ran.clear()
    # another commit: its own sitting folder and bundle, everything again; the old bundle is refused
    assert _in_process(tmp_path, monkeypatch, commit="ba9876543210") == 0 and sorted(ran) == ["fine", "flaky"]
    with pytest.raises(tour.CookbookError, match="holds a tour of"):
        _in_process(tmp_path, monkeypatch, *bundle, commit="ba9876543210")


def test_the_tour_and_the_check_share_one_bundle(tmp_path, monkeypatch):
    """A check's passes sit beside the tour's pairs in tour.json."""
    monkeypatch.setattr(checks, "targets", lambda smoke, out: [checks.Target("fine", ["-c", "pass"])])
    assert _in_process(tmp_path, monkeypatch, "--bundle", str(tmp_path / "bundle")) == 0
    manifest = tour.read_manifest(tmp_path / "bundle")
    assert list(manifest["checks"]) == ["fine"] and manifest["legs"] == {}
