"""`make doctor FLAGS='--try'` on plain scripts (tests/plain/), on the CPU: each fix applied from
outside, proven to have taken effect, timed against the unchanged script over processes, its losses
compared; a fix the script overrides is not applied, a crash is a row, a broken fix fails parity, a
script that is not deterministic says so, and bad flags are one line."""
import json

import pytest

from conftest import REPO, run_module
from tests_helpers import headline_of

PLAIN = REPO / "tests" / "plain"
QUICK = ("--warmup", "1", "--steps", "5", "--time", "0.5", "--profile-steps", "1")


def doctor_try(tmp_path, script, *flags, env=None, script_args=()):
    proc = run_module("common.runners.doctor", str(script), "--reports-dir", str(tmp_path), *QUICK, *flags,
                      *(["--", *script_args] if script_args else []), env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (saved,) = (tmp_path / "results" / "doctor").rglob("trials.json")
    trials = json.loads(saved.read_text())
    (md,) = tmp_path.glob("doctor_*.md")
    return proc, {r["fix"]: r for r in trials["rows"]}, trials, md.read_text()


def test_a_loader_bound_script_measures_its_workers_faster_and_proves_them_applied(tmp_path):
    """With the budget sized from the doctor's own run (no --try-budget), said up front: the verdict decides."""
    proc, rows, trials, md = doctor_try(tmp_path, PLAIN / "loader_bound.py", "--try", "workers", "--steps", "24",
                                        "--time", "1")
    said = next(line for line in proc.stdout.splitlines() if line.startswith("doctor --try: a budget of"))
    assert "(1 fix(es) and the unchanged script, 5 rounds each, at about" in said and "--try-budget SECONDS" in said
    assert float(said.split()[5]) == pytest.approx(trials["budget_s"], abs=1)
    workers = rows["workers"]
    assert workers["verdict"] == "faster" and workers["speedup"]["low"] > 1, workers  # the interval excludes 1
    # 2 workers sleep in parallel: about 2x, read from each process's stretch, not from one mode of its
    # steps, which alternate as the two workers' batches arrive together (the median read 0.97-12.94)
    assert 1.4 <= workers["speedup"]["ratio"] <= 3.0, workers
    fixed = [json.loads(p.read_text()) for p in (tmp_path / "results" / "doctor").rglob("each/workers_r*.json")]
    patterns = [f["result"]["timing"].get("bursts") for f in fixed]
    # on a busy machine (the suite's other worker) a run's arrivals may blur; those that show a pattern name it
    found = [b for b in patterns if b]
    assert found and all(b["cause"] == "loader workers" for b in found), patterns
    assert any(b["period"] == 2 for b in found), patterns
    assert "; steps alternate " in proc.stdout  # each fixed run's progress line says it
    assert "loader workers handed out the batches" in workers["why"]  # the multi-process iterator
    assert workers["parity_ok"] and trials["deterministic"]
    from common.analysis import stats
    from common.analysis.results_compare import Speedup

    said = f"{workers['label']} {stats.describe(Speedup.from_json(workers['speedup']))}"  # a wide one in words
    assert headline_of(proc.stdout) == f"Headline: Measured on your script: {said} (CPU run)"
    assert said in md.splitlines()[2]
    assert "## Tried on your script" in md and "The lines to add to your script" in md
    assert "num_workers=workers,  # your cores but one" in md  # the recipe's lesson, in a user's loop
    assert "peak RSS" in md and "All times are CPU times" in md


def test_a_compute_bound_script_measures_a_foreach_optimizer_and_bf16_autocast_proven_applied(tmp_path):
    _, rows, _, md = doctor_try(tmp_path, PLAIN / "compute_bound.py", "--try", "fused,amp", "--try-budget", "28")
    fused, amp = rows["fused"], rows["amp"]
    assert fused["speedup"] and fused["why"] == "its step runs foreach ops" and fused["parity_ok"]
    assert amp["speedup"] and "in bf16" in amp["why"] and not amp["why"].startswith("0 of")
    assert amp["parity_ok"] is not None  # compared, by the amp recipe's rule
    for row in (fused, amp):
        assert row["verdict"] in ("faster", "slower", "no significant difference", "no meaningful difference")


def test_a_script_that_builds_its_own_workers_gets_not_applied_and_no_timing(tmp_path):
    _, rows, trials, md = doctor_try(tmp_path, PLAIN / "workers.py", "--step", "batch", "--try", "workers")
    assert rows["workers"]["verdict"] == "not applied" and rows["workers"]["speedup"] is None
    assert "builds its DataLoader with 2 workers itself" in rows["workers"]["why"]
    assert trials["rounds"] == 0 and not list((tmp_path / "results").rglob("try"))  # nothing was timed
    assert "| not applied |" in md


def test_a_crash_is_a_row_a_broken_fix_fails_parity_and_noise_is_labelled(tmp_path):
    _, rows, trials, md = doctor_try(tmp_path, PLAIN / "picky_loader.py", "--try", "workers,fused,zero_lr",
                                     "--try-budget", "30", env={"COOKBOOK_FAULT": "fix:zero_lr"})
    assert rows["workers"]["verdict"] == "crashed"
    assert "this dataset cannot be read from a worker process" in rows["workers"]["why"]
    assert rows["fused"]["speedup"] and rows["fused"]["parity_ok"]  # the others went on
    broken = rows["zero_lr"]
    assert broken["parity_ok"] is False and broken["verdict"].endswith("but parity FAILED"), broken
    assert trials["deterministic"] is False and "NOT deterministic" in md


@pytest.mark.parametrize("flags, words", [
    (["--try", "nonsense"], "--try: no fix nonsense; choose from workers, amp"),
    (["--try", "workers", "--try-budget", "0"], "--try-budget: must be more than 0"),
    (["--try-budget", "5"], "--try-budget: give --try as well"),
    (["--try", "zero_lr"], "--try: no fix zero_lr"),  # the tests' broken fix, outside its fault
])
def test_bad_try_flags_are_one_line_and_write_nothing(tmp_path, flags, words):
    proc = run_module("common.runners.doctor", str(PLAIN / "loader_bound.py"), "--reports-dir", str(tmp_path), *flags)
    assert proc.returncode == 2 and words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not any(tmp_path.iterdir())


def test_a_bare_try_gives_every_fix_a_row_and_times_none_that_does_not_apply(tmp_path):
    """Planned from a diagnosis where nothing applies (in-process: no run starts): each fix says why."""
    from common.analysis.results_doctor import Observation, OpsSeen
    from common.analysis.results_run import CompileStats
    from common.runners import trials

    from tests_helpers import run_result

    obs = Observation(script=str(PLAIN / "compute_bound.py"), argv=[], step="optimizer", steps_seen=9, ended="stopped",
                      stage="measured", optimizers=["AdamW"], zero_grad="set_to_none", models=["Sequential"],
                      result=run_result(), ops=OpsSeen(matmul_dtypes={"bfloat16": 3}, optimizer="foreach"))
    obs.result.compile = CompileStats(graphs=1)
    plan = trials.TrialPlan(script=PLAIN / "compute_bound.py", script_args=[], flags=[], profile_steps=1,
                       out_dir=tmp_path / "try", cpus=[0], budget_s=60)
    tried = trials.run(obs, None, plan)
    rows = {t.fix: t for t in tried.rows}
    assert list(rows) == ["workers", "amp", "tf32", "cudnn_benchmark", "channels_last", "fused", "compile",
                          "set_to_none"]
    assert rows["tf32"].verdict == rows["cudnn_benchmark"].verdict == "not tried"  # GPU fixes, on a CPU run
    assert rows["workers"].why == "no DataLoader seen" and rows["amp"].verdict == "not applicable"
    assert rows["fused"].why == "its optimizer runs foreach already" and rows["compile"].why.endswith("already")
    assert tried.rounds == 0 and not (tmp_path / "try").exists()
    assert tried.headline == "Measured on your script: no fix could be timed (each one's row says why) (CPU run)"


def test_host_syncs_in_the_loop_are_listed_as_lines_to_change_by_hand():
    """What no fix from outside can change: the script's own lines that read a tensor on the host during
    the measured steps (measure.syncs), whatever the profiled steps happened to see."""
    from common.analysis.doctor import host_reads
    from common.analysis.results_doctor import Observation

    from tests_helpers import run_result

    script = REPO / "baselines" / "churn_mlp.py"
    at = "churn_mlp.py:" + str(next(i for i, text in enumerate(script.read_text().splitlines(), 1)
                                    if "running_loss += loss.item()" in text))
    result = run_result()
    result.evidence = type("Evidence", (), {"syncs_per_step": 1.0})()
    obs = Observation(script=str(script), argv=[], step="optimizer", steps_seen=9,
                      ended="stopped", stage="measured", result=result, sync_lines={at: 1.0})
    (line,) = host_reads(obs)
    assert line.startswith(f"{at}: `running_loss += loss.item()")
    assert "1 per step" in line and "sync_removal" in line
    result.evidence.syncs_per_step = 0.0  # none in the profiled steps: the counted line stands
    obs.sync_lines = {at: 0.1}
    assert "(0.1 per step" in host_reads(obs)[0]


def test_only_the_lines_that_ran_in_the_step_are_named(tmp_path):
    """Not a read under a flag not given, nor one in the validation after training, nor int() of a CPU
    index (matched on the code's text, all three were named)."""
    proc = run_module("common.measure.observer", "--out",
                      str(tmp_path / "obs.json"), "--trace-dir", str(tmp_path / "t"), "--warmup", "2", "--steps", "5",
                      "--time", "0.1", "--profile-steps", "2", "--", str(PLAIN / "sync_lines.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = json.loads((tmp_path / "obs.json").read_text())["sync_lines"]
    source = (PLAIN / "sync_lines.py").read_text().splitlines()
    assert {k: source[int(k.split(":")[1]) - 1].strip() for k in lines} == {
        k: "running += loss.item()  # the read every step" for k in lines} and len(lines) == 1
    assert list(lines.values()) == [1.0]


def test_the_default_budget_is_capped_and_says_the_rounds_the_cap_holds(monkeypatch):
    """A script that takes a minute to start would plan most of an hour: the default is CAP_S at most,
    with the rounds that holds said; a budget too small to decide is said before anything runs."""
    from common.analysis.results_doctor import Observation
    from common.runners import trials

    monkeypatch.setattr(trials, "arms_of", lambda obs, names, test_fixes=False: ([("amp",), ("workers",)], {}))
    obs = Observation.__new__(Observation)
    obs.result = None
    seconds, how = trials.budget(obs, None, 60.0)
    assert seconds == trials.CAP_S
    assert f"capped at {trials.CAP_S} s, which holds about 2 rounds" in how  # 600 // (3 arms x 84 s)
    assert trials.too_small(obs, None, 60.0, seconds).startswith("a budget of 600 s holds about 2 round(s)")
    assert trials.budget(obs, None, 5.0)[0] == pytest.approx((3 * trials.PLANNED_ROUNDS + 6) * 7.0)  # uncapped
    assert trials.too_small(obs, None, 5.0, 600) is None


def test_amp_on_a_simulated_t4_runs_fp16_with_a_loss_scale_that_skips_a_planted_overflow(tmp_path):
    """A T4 has no bf16: the amp fix autocasts to fp16 and scales the loss from outside (torch's GradScaler at
    the script's backward and step). Its 3rd backward is planted to overflow: that step updates nothing, the
    scale backs off, the matmuls run in fp16, and the fix is proven applied, not "not applicable"."""
    from common.analysis import fixes
    from common.analysis.results import read_result
    from common.analysis.results_doctor import Observation

    out = tmp_path / "obs.json"
    proc = run_module("common.measure.observer", "--out", str(out), "--trace-dir", str(tmp_path / "t"), "--warmup", "2",
                      "--steps", "6", "--time", "0.2", "--profile-steps", "1", "--fix", "amp", "--",
                      str(PLAIN / "short.py"), "--steps", "40", env={"COOKBOOK_DEVICE_PROFILE": "T4",
                                                                     "COOKBOOK_FAULT": "overflow:3"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    obs = read_result(out, Observation)
    assert obs.fixes["amp"] == "applied" and obs.ops.matmul_dtypes.get("float16")
    ls = obs.loss_scaling
    assert ls.first == 65536.0 and ls.skipped >= 1 and ls.last <= ls.first / 2 and ls.steps >= 6
    took, said = fixes.took_effect(fixes.FIXES["amp"], obs)
    assert took and "in fp16" in said and f"{ls.skipped} skipped on overflow" in said
    obs.ops.matmul_dtypes = {"float32": 3}  # as the script runs unfixed on this T4 profile
    assert "T4" in obs.result.env.profile.name and fixes.applies(fixes.FIXES["amp"], obs) is None  # tried there


def _scaled_run(monkeypatch, steps, *, optimizers=1, clip=False, given=False, overflow=None):
    """The doctor's fp16 loss scale on a tiny model, driven as the observer drives it: each backward through
    Fixes.before_backward, each step between before_step and after_step. The parameters' movement per step."""
    import torch

    from common.measure.loss_scale import LossScale

    if overflow:
        monkeypatch.setenv("COOKBOOK_FAULT", f"overflow:{overflow}")
    models = [torch.nn.Linear(4, 1, bias=False) for _ in range(optimizers)]
    for m in models:
        torch.nn.init.zeros_(m.weight)
    opts = [torch.optim.SGD(m.parameters(), lr=1.0) for m in models]
    scale = LossScale("cpu")
    for _ in range(steps):
        loss = sum(m(torch.ones(1, 4)).sum() for m in models)  # d loss / d w = 1 for every weight
        if given:
            torch.autograd.backward(loss, *(scale.scale(torch.ones(())),))
        else:
            scale.scale(loss).backward()
        if clip:
            for o in opts:
                scale.unscale(o)  # as the wrapped clip_grad_norm_ does, before the step's own check
        for o in opts:
            scale.before_step(o, closure=False)
            o.step()
            scale.after_step(o)
            o.zero_grad()
    return [-m.weight.detach()[0, 0].item() for m in models], scale


def test_a_step_whose_scaled_gradients_overflowed_updates_nothing_and_the_next_one_does(monkeypatch):
    moved, scale = _scaled_run(monkeypatch, 2, overflow=1)
    assert moved == [1.0]  # the first step dropped, the second moved by the true gradient
    assert scale.record().skipped == 1 and scale.record().last == 32768.0


def test_two_optimizers_a_clip_and_given_gradients_are_each_unscaled_once_by_the_same_scale(monkeypatch):
    moved, scale = _scaled_run(monkeypatch, 3, optimizers=2, clip=True)
    assert moved == [3.0, 3.0] and scale.steps == 6 and not scale.refused
    moved, _ = _scaled_run(monkeypatch, 2, given=True)
    assert moved == [2.0]


def test_the_loss_scale_refuses_what_it_cannot_scale_right_and_says_why():
    import torch

    from common.measure.fixes import Fixes
    from common.measure.loss_scale import LossScale

    fixes = Fixes(["amp"])
    fixes.install()
    try:
        model = torch.nn.Linear(4, 1)
        fixes.built(torch.optim.SGD(model.parameters(), lr=0.1))
        fixes.loss_scale = LossScale("cpu")
        theirs = torch.amp.GradScaler("cpu")
        loss = theirs.scale(model(torch.ones(1, 4)).sum())  # the script scales its own loss
        (args, _) = fixes.before_backward((loss,), {})
        assert args[0] is loss  # not scaled a second time
        assert fixes.loss_scale.refused == "the script scales its own loss (a GradScaler of its own)"
    finally:
        fixes.uninstall()
    lbfgs_model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(lbfgs_model.parameters(), lr=0.1)
    scale = LossScale("cpu")
    scale.before_step(opt, closure=True)
    for _ in range(2):  # LBFGS calls its closure more than once per step
        scale.scale(lbfgs_model(torch.ones(1, 4)).sum()).backward()
        scale.after_closure(opt)
    assert "closure ran twice" in scale.refused and lbfgs_model.weight.grad is None  # that step updates nothing


def test_on_a_t4_a_framework_whose_optimizer_is_its_own_gets_amp_not_applied_with_the_reason(monkeypatch):
    import torch

    from common.measure.fixes import Fixes

    monkeypatch.setenv("COOKBOOK_DEVICE_PROFILE", "T4")
    fixes = Fixes(["amp"])
    model = torch.nn.Linear(4, 1)
    assert fixes.before_model(model, (torch.ones(1, 4),)) is None and fixes._autocast is None
    assert fixes.said["amp"].startswith("not applied: fp16 (this GPU has no bf16) needs a loss scale")


def test_a_clip_in_either_namespace_unscales_only_the_optimizers_holding_the_clipped_parameters():
    """torch.nn.utils.clip_grad_norm_ and torch.nn.utils.clip_grad.clip_grad_norm_ (the same function, two
    names) see true gradients; an optimizer over other parameters stays scaled until its own step."""
    import torch
    import torch.nn.utils.clip_grad as clip_grad
    from torch.amp.grad_scaler import OptState

    from common.measure.fixes import Fixes
    from common.measure.loss_scale import LossScale

    fixes = Fixes(["amp"])
    fixes.install()
    try:
        a, b = torch.nn.Linear(4, 1, bias=False), torch.nn.Linear(4, 1, bias=False)
        opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=1.0), torch.optim.SGD(b.parameters(), lr=1.0)
        fixes.built(opt_a)
        fixes.built(opt_b)
        fixes.loss_scale = LossScale("cpu")
        for clip in (torch.nn.utils.clip_grad_norm_, clip_grad.clip_grad_norm_):
            fixes.loss_scale.scaler._per_optimizer_states.clear()
            for p in (*a.parameters(), *b.parameters()):
                p.grad = None
            fixes.loss_scale.scale((a(torch.ones(1, 4)) + b(torch.ones(1, 4))).sum()).backward()
            norm = clip(a.parameters(), max_norm=100.0)
            assert norm.item() == pytest.approx(2.0)  # the true gradient's norm (four ones), not 65536 times it
            states = fixes.loss_scale.scaler._per_optimizer_states
            assert states[id(opt_a)]["stage"] is OptState.UNSCALED
            assert states[id(opt_b)]["stage"] is not OptState.UNSCALED
    finally:
        fixes.uninstall()
    assert torch.nn.utils.clip_grad_norm_ is clip_grad.clip_grad_norm_  # put back as torch has it
