"""The parity rule holds for a correct twin at every size the project runs, passes the slow script
against itself (an A/A), and still fails a broken twin.

The broken twins are the AMP fast twins with one bug each, written from the real scripts at test
time: one that stops learning (its optimizer step gone) and one that learns at a tenth of the rate
(a wrong learning rate, as a missing unscale does to plain SGD). The A/A's second copy is the slow
script again with more timed steps, as a faster twin times more of them to fill its minimum time.
They run through the real harness at the batch sizes the CPU runs use (the smoke presets and the
sweep's smoke points); the churn MLP also at the GPU's batch sizes, which a CPU runs too."""
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from common import catalog
from common.analysis.aggregate import early_tolerance, parity, parity_failure
from common.runners import launch

from conftest import NEEDS_CXX, REPO

pytestmark = pytest.mark.xdist_group("parity")  # one worker builds the module fixture once

BROKEN = {  # name -> (text in the AMP fast twin, its replacement)
    "stalled": ("scaler.step(optimizer)  #", "pass  # no optimizer step;"),
    "slowlearner": ("lr=1e-", "lr=0.1e-"),
}
SIZES = [("resnet18", 2), ("resnet18", 4), ("churn", 2), ("churn", 512)]
AGAIN = "again"  # the slow script once more, timing more steps: the A/A's second copy
MORE_STEPS = {"resnet18": 6, "churn": 12}  # twice the smoke presets'


def test_the_early_tolerance_widens_below_its_batch_and_never_narrows_above():
    rule = {"early_rtol": 0.03, "at_batch": 16}
    assert early_tolerance(rule, 16) == 0.03 and early_tolerance(rule, 256) == 0.03
    assert early_tolerance(rule, 4) == pytest.approx(0.06) and early_tolerance(rule, 1) == pytest.approx(0.12)
    assert early_tolerance({"early_rtol": 0.001}, 2) == 0.001  # no at_batch: the same at every size


def test_the_archived_h100_amp_twins_pass_at_their_batch_sizes():
    saved = json.loads((REPO / "tests" / "data" / "h100-2026-11-22" / "amp.comparison.json").read_text())
    for workload, entry in saved["workloads"].items():
        rule = catalog.parity_rule("amp", workload)
        measured = entry["parity"]["early_max_rel"]
        assert measured <= early_tolerance(rule, entry["slow"]["config"]["batch_size"]) / 2, workload


def _run(script, workload, batch, out, longer=False):
    """The script as the runners start it (launch.child: forked from the suite's zygote where it runs)."""
    flags = ["--device", "cpu", "--smoke", "--data", "synthetic", "--profile-steps", "0", "--batch-size", str(batch),
             *(["--steps", str(MORE_STEPS[workload])] if longer else [])]
    # a recipe's script by its module name; a broken twin by its file's, from its own folder
    module, cwd = ((f"recipes.amp.{script.stem}", REPO) if script.parent == catalog.RECIPES_DIR / "amp"
                   else (script.stem, script.parent))
    # two at a time (the fixture's pool): one thread each, whether or not pytest runs on workers
    outcome = launch.child(["-m", module], flags, out, cwd=cwd, timeout=300, extra_env={"OMP_NUM_THREADS": "1"})
    assert outcome.kind == "ok", "\n".join(outcome.tail)
    return outcome.result


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """{(workload, batch): {variant: RunResult}} for slow, fast and each broken twin."""
    folder = tmp_path_factory.mktemp("twins")
    scripts = {}
    for workload in {w for w, _ in SIZES}:
        fast = catalog.script("amp", workload, "fast").read_text()
        scripts[workload] = {"slow": catalog.script("amp", workload, "slow"),
                             "fast": catalog.script("amp", workload, "fast"),
                             AGAIN: catalog.script("amp", workload, "slow")}
        for name, (text, replacement) in BROKEN.items():
            assert text in fast, f"amp/{workload}_fast.py no longer has {text!r}"
            path = folder / f"{workload}_{name}.py"
            path.write_text(fast.replace(text, replacement))
            scripts[workload][name] = path
    jobs = [(w, b, v, s) for w, b in SIZES for v, s in scripts[w].items()]
    with ThreadPoolExecutor(2) as pool:
        results = pool.map(lambda j: (j, _run(j[3], j[0], j[1], folder / f"{j[0]}_{j[1]}_{j[2]}.json",
                                              longer=j[2] == AGAIN)), jobs)
        found = {}
        for (w, b, v, _), result in results:
            found.setdefault((w, b), {})[v] = result
    return found


@pytest.mark.parametrize("workload, batch", SIZES)
def test_a_correct_twin_passes_and_each_broken_twin_fails_at_this_size(twins, workload, batch):
    runs = twins[(workload, batch)]
    rule = catalog.parity_rule("amp", workload)
    good = parity(runs["slow"], runs["fast"], rule)
    assert good.ok, parity_failure(good)
    assert good.probe_steps > 0 and good.probe_drop > 0.1  # the probe taught the slow twin something
    for name in BROKEN:
        bad = parity(runs["slow"], runs[name], rule)
        assert not bad.ok, f"{name} at batch {batch} passed: {bad}"


@pytest.mark.parametrize("workload, batch", SIZES)
def test_the_slow_script_against_itself_over_a_longer_stretch_passes_exactly(twins, workload, batch):
    slow, again = twins[(workload, batch)]["slow"], twins[(workload, batch)][AGAIN]
    assert again.timing.summary.n == 2 * slow.timing.summary.n
    aa = parity(slow, again, catalog.parity_rule("amp", workload))
    assert aa.ok, parity_failure(aa)
    assert aa.probe_steps > 0 and aa.probe_max_rel == 0  # one program, probed from one state
    assert aa.early_max_rel == 0 and aa.max_rel == 0  # and every step both ran, the same


def test_served_answers_are_compared_request_by_request_and_in_order():
    """On trained weights answers differ from customer to customer: a twin that serves the previous
    batch (a stale input buffer) or hands answers to the wrong customers is far off, though its
    batch means may agree; the same answers pass exactly."""
    from types import SimpleNamespace

    from common.measure import faults

    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    batches = [torch.rand(32, generator=gen) for _ in range(4)]
    rule = catalog.parity_rule("cuda_graphs", "churn_serving")
    slow = SimpleNamespace(answers=[b.tolist() for b in batches])
    assert parity(slow, slow, rule).ok and parity(slow, slow, rule).max_abs == 0
    for kind in ("stale", "shuffled"):
        os.environ[faults.ENV] = f"{kind}:fast"
        try:
            wrong = faults.wrong_answers("fast", "churn_serving", "churn")
        finally:
            del os.environ[faults.ENV]
        fast = SimpleNamespace(answers=[wrong(b).tolist() for b in batches])
        par = parity(slow, fast, rule)
        assert not par.ok and par.max_abs > 0.1, kind
        assert "answers other requests, or other customers" in parity_failure(par)
    short = SimpleNamespace(answers=[b[:16].tolist() for b in batches])
    assert not parity(slow, short, rule).ok and "requests per batch" in parity_failure(parity(slow, short, rule))


@pytest.mark.parametrize("recipe, fault", [pytest.param("compile", "stale", marks=NEEDS_CXX),
                                           ("cuda_graphs", "shuffled")])
def test_a_planted_serving_twin_that_answers_other_requests_fails_parity(tmp_path, recipe, fault):
    """Each serving pair, its fast twin planted to answer the previous batch or the wrong customers,
    fails parity through the real runner, on the trained weights both twins load."""
    from conftest import comparison_of, run_module

    proc = run_module("common.runners.compare", recipe, "--workloads", "churn_serving", "--smoke", "--device", "cpu",
                      "--data", "synthetic", "--reports-dir", str(tmp_path), "--", "--profile-steps", "0",
                      env={"COOKBOOK_FAULT": f"{fault}:fast"})
    assert proc.returncode == 1 and f"parity FAILED for {recipe}/churn_serving" in proc.stderr, proc.stderr
    par = comparison_of(tmp_path, recipe)["workloads"]["churn_serving"]["parity"]
    assert not par["ok"] and par["max_abs"] > 0.1 and par["answers_compared"] >= 64
