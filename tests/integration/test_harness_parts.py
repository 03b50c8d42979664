"""The parts the harness's Run leans on, each on its own: what the environment plants from outside a run
(measure.rig), a serving run's answers (measure.answers) and the result's assembly (measure.outcome)."""
import json
import types

import pytest
import torch
import torch.nn.functional as F

from common import env, harness
from common.analysis.device import DeviceProfile
from common.analysis.results_run import ANSWERS_KEPT, Randomness
from common.measure.answers import ServedAnswers
from common.measure.rig import rig_from_env

from conftest import REPO
from tests_helpers import run_result

SERVING = str(REPO / "recipes" / "compile" / "churn_serving_slow.py")
TRAINING = str(REPO / "recipes" / "amp" / "churn_slow.py")


def _run(kind="cpu", simulated=False, device="cpu", variant="slow"):
    """What rig_from_env reads of a harness.Run, and the seams it hangs its hooks on."""
    return types.SimpleNamespace(
        profile=DeviceProfile(kind, "x", None, None, simulated=simulated), device=torch.device(device),
        variant=variant, pair="churn", workload="churn", seed=7, stage="setup",
        batch_filter=lambda batches: batches, answers=ServedAnswers(), after_shared=[])


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    for name in (env.FAULT_ENV, env.RUN_ENV, env.DEVICE_PROFILE_ENV):
        monkeypatch.delenv(name, raising=False)


def test_a_users_run_gets_nothing_planted():
    run, native = _run(), F.dropout
    unfiltered, answers = run.batch_filter, torch.ones(2)
    with rig_from_env(run):
        assert F.dropout is native and run.after_shared == [] and run.batch_filter is unfiltered
        assert run.answers.filter(answers) is answers
    assert F.dropout is native


def test_a_simulated_gpu_draws_dropout_per_dtype_on_a_cpu_until_the_run_closes():
    run, native = _run(kind="cuda", simulated=True), F.dropout
    with rig_from_env(run):
        assert F.dropout is not native  # dropout.DtypeMasks
        randomness = Randomness(calls=3, shared_steps=5)
        for hook in run.after_shared:
            hook(randomness)
        assert randomness.per_dtype and randomness.reseeded_at is None
    assert F.dropout is native
    with rig_from_env(_run(kind="cuda", simulated=True, device="cuda")):  # a real GPU draws its own
        assert F.dropout is native


@pytest.mark.parametrize("calls", [0, 4])
def test_an_aa_second_role_draws_its_own_dropout_stream_after_the_shared_stages(monkeypatch, calls):
    monkeypatch.setenv(env.RUN_ENV, "fast:2")  # the slow script playing the fast role
    run = _run(variant="slow")
    torch.manual_seed(0)
    with rig_from_env(run):
        randomness = Randomness(calls=calls, shared_steps=5 if calls else 0)
        for hook in run.after_shared:
            hook(randomness)
    assert torch.initial_seed() == (run.seed + 1 if calls else 0)  # no mask shared: nothing to draw apart from
    assert randomness.reseeded_at == (5 if calls else None) and not randomness.per_dtype
    monkeypatch.setenv(env.RUN_ENV, "slow:2")
    with rig_from_env(run2 := _run(variant="slow")):
        assert run2.after_shared == []


def test_planted_faults_hang_on_the_runs_seams_and_come_off_when_it_closes(monkeypatch):
    monkeypatch.setenv(env.FAULT_ENV, "frozen:slow")
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def moved() -> bool:
        before = model.weight.detach().clone()
        model(torch.ones(3, 2)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        return not torch.equal(before, model.weight)

    with rig_from_env(_run()):
        assert not moved()  # a frozen twin's step updates nothing
    optimizer.param_groups[0]["lr"] = 0.1
    assert moved()  # the hook is gone with the run

    monkeypatch.setenv(env.FAULT_ENV, "shuffled:slow")
    run = _run()
    with rig_from_env(run):
        answers = torch.arange(4.0).reshape(4, 1)
        assert run.answers.kept(answers).flatten().tolist() == [3.0, 0.0, 1.0, 2.0]

    monkeypatch.setenv(env.FAULT_ENV, "crash:slow")
    run = _run()
    with rig_from_env(run):
        batches = run.batch_filter(iter(range(10)))
        assert next(batches) == 0
        run.stage = "timed steps"
        with pytest.raises(RuntimeError, match="injected crash"):
            next(batches)


def test_served_answers_are_copies_kept_as_they_went_back_with_their_size():
    answers = ServedAnswers()
    assert not answers.serving
    out = torch.ones(4, 3)
    kept = answers.kept(out)
    out.zero_()  # a reused buffer, overwritten by the next batch
    assert answers.serving and answers.output_bytes == 4 * 3 * 4 and kept.sum() == 12
    result = run_result()
    result.probe_losses = [1.0]
    answers.settle(result, [kept] * (ANSWERS_KEPT + 2), batch_bytes=100)
    assert result.probe_losses == [] and len(result.answers) == ANSWERS_KEPT and result.answers[0] == [1.0] * 12
    assert result.bytes_per_step == 100 + 48


def _start(script, tmp_path, *flags):
    sizes = ["--warmup", "2", "--steps", "3", "--min-time", "0", "--profile-steps", "0"]
    return harness.start(script, None, ["--device", "cpu", "--data", "synthetic", *sizes,
                                        "--out", str(tmp_path / "r.json"), *flags])


def test_a_serving_run_keeps_its_answers_runs_no_probe_and_counts_both_ways(tmp_path):
    run = _start(SERVING, tmp_path, "--smoke")
    served = 0
    for x in run.loop(iter(lambda: torch.ones(5, 2), None)):
        run.log_output(x * 2)
        served += 1
    result = run.finish()
    assert served == 2 + 3 + 1  # warm-up, timed, counted: no learning probe
    assert result.probe_losses == [] and result.losses == [2.0] * 6 and result.probe_skipped == 0
    assert result.answers == [[2.0] * 10] * 4  # from the warm-up's end on
    assert result.bytes_per_step == 2 * 5 * 2 * 4
    assert json.loads((tmp_path / "r.json").read_text())["answers"] == result.answers


def test_a_training_run_keeps_its_probe_apart_and_out_of_memory_is_a_result(tmp_path):
    run = _start(TRAINING, tmp_path, "--smoke", "--probe-steps", "4")
    losses = iter(range(100))
    for _ in run.loop(iter(lambda: torch.ones(1), None)):
        run.log_loss(torch.tensor(float(next(losses))))
    result = run.finish()
    assert result.probe_losses == [2.0, 3.0, 4.0, 5.0] and result.losses == [0.0, 1.0, 6.0, 7.0, 8.0, 9.0]
    assert result.answers == [] and result.bytes_per_step is None and result.status == "ok"
    assert result.randomness == Randomness(per_dtype=False) and result.total_s > 0

    run = _start(TRAINING, tmp_path, "--smoke")
    try:
        run.stage = "warm-up"
        run.write_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore"))
    finally:
        run.close()
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["status"] == "oom" and written["oom"] == {
        "batch_size": run.batch_size, "stage": "warm-up", "message": "CUDA out of memory. Tried to allocate 2.00 GiB"}
