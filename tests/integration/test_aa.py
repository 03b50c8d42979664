"""A/A through the real recipe runner: `compare --aa` runs the slow script in both roles, each process
at its own pace (COOKBOOK_FAULT=pace, as a loaded host), so that the two copies of one program time
different numbers of steps. The pipeline must pass parity every time and never call the program
faster or slower than itself."""
import json
import re

import pytest

from common.analysis.aggregate import RESEEDED_RTOL

from conftest import REPO, comparison_of, run_module

REPS = 3  # runner invocations, each with its own round-1 parity check and its own verdict
# the slow role's pace in round 1, the fast role's in round 2 and the other way round: over the two
# rounds both roles meet both paces, so no role is favoured, while the twins of round 1 differ
PACE = "pace:1,2.5"
SIZING = ["--warmup", "5", "--min-time", "0.3"]  # a time-sized stretch, sized from 4 warm-up steps


@pytest.mark.parametrize("rep", range(REPS))
def test_an_aa_passes_parity_and_is_never_called_faster_or_slower(tmp_path, rep):
    proc = run_module("common.runners.compare", "amp", "--aa", "--workloads", "churn", "--smoke", "--rounds", "2",
                      "--device", "cpu", "--data", "synthetic", "--reports-dir", str(tmp_path), "--", *SIZING,
                      env={"COOKBOOK_FAULT": PACE})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    saved = comparison_of(tmp_path, "amp/aa")
    entry = saved["workloads"]["churn"]
    assert saved["aa"] and entry["parity"]["ok"] and entry["parity"]["probe_steps"] == 12
    par = entry["parity"]
    assert par["probe_max_rel"] == 0 and par["early_max_rel"] == 0  # one program, one state, the same masks
    # then the second role's dropout is reseeded: its windows measure the spread a precision change is judged by
    assert par["masks_shared_until"] == 5 and 0 < par["max_rel"] <= par["rtol"] == RESEEDED_RTOL
    assert "A/A: dropout reseeded after the first 5 steps and the probe: the windows" in proc.stdout
    assert entry["speedup"]["verdict"] not in ("faster", "slower")
    assert re.search(r"^A/A: \d+\.\d\dx, \d+\.\d\d-\d+\.\d\d \(", proc.stdout, re.M), proc.stdout
    round1 = {role: json.loads((REPO / saved["results_dir"] / f"churn_{role}_r1.json").read_text())
              for role in ("slow", "fast")}
    assert {r["variant"] for r in round1.values()} == {"slow"}  # the slow script played both roles
    steps = [r["timing"]["summary"]["n"] for r in round1.values()]
    assert steps[0] > steps[1], steps  # the slower-paced fast role timed fewer steps, from the same probe
    assert not (tmp_path / "amp.md").exists() and not (tmp_path / "README.md").exists()  # no report over the recipe's


def test_twins_of_one_throughput_whose_steps_come_in_bursts_are_not_called_different(tmp_path):
    """The planted pair of the throughput issue: one role's batches wait 30 ms each, the other's 80, 5, 5 ms
    in turn (three loader workers' batches arriving together): the same throughput, which the per-process
    median step calls about 2.5x faster here (the issue's 6 and 16, 1, 1 ms: 3.83x). Each process's figure
    is its stretch over its steps: no difference, and the pattern is said with its cause."""
    proc = run_module("common.runners.compare", "amp", "--aa", "--workloads", "churn", "--smoke", "--rounds", "3",
                      "--device", "cpu", "--data", "synthetic", "--reports-dir", str(tmp_path), "--", "--warmup", "5",
                      "--min-time", "0.6", env={"COOKBOOK_FAULT": "waits:30/80,5,5"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    entry = comparison_of(tmp_path, "amp/aa")["workloads"]["churn"]
    assert entry["speedup"]["verdict"] not in ("faster", "slower"), entry["speedup"]
    assert 0.7 < entry["speedup"]["ratio"] < 1.4, entry["speedup"]  # the median's ~2.5x is far outside
    # the pattern is the planted role's (the suite's other worker may give any process a few slow steps of its own)
    assert entry["slow"]["statistic"] == "mean step"
    assert not any(b and b["period"] == 3 for b in entry["slow"]["bursts"]), entry["slow"]["bursts"]
    found = [b for b in entry["fast"]["bursts"] if b]
    assert any(b["period"] == 3 and b["cause"] == "the data pipeline" for b in found), found
    # the terminal says the first process's pattern, which the other worker's load may have bent into another shape
    assert f"bursts: {found[0]['words']} ({len(found)} of 3 processes)" in proc.stdout
