"""The doctor on the scripts people run, as a new user meets it: a fresh clone with no data folder,
a step run through a closure (Lightning, LBFGS), batches that are Mappings or dataclasses (Hugging
Face's BatchEncoding), a script whose paths are relative to its own folder."""
import dataclasses
import json
from collections import OrderedDict

import torch

from common.measure import settings

from conftest import REPO, run_module

PLAIN = REPO / "tests" / "plain"
FEW = ["--warmup", "2", "--steps", "20", "--time", "1", "--profile-steps", "2"]


def _observe(tmp_path, script, *flags):
    """The doctor's child alone on a script (no runner): the observation it writes."""
    out = tmp_path / "obs.json"
    proc = run_module("common.measure.observer", "--out", str(out), "--trace-dir", str(tmp_path / "t"),
                      "--warmup", "1", "--steps", "5", "--time", "0.1", "--profile-steps", "0", *flags,
                      "--", str(script))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def _observation(reports):
    return json.loads(next(reports.glob("results/doctor/*/*/observation.json")).read_text())


def test_a_fresh_clones_first_doctor_run_writes_its_report(tmp_path):
    """The README's example with no data folder yet (a fresh clone): the ceilings' lock file is made
    with its folder, not opened in one that does not exist."""
    reports = tmp_path / "reports"
    proc = run_module("common.runners.doctor", str(PLAIN / "loader_bound.py"), "--reports-dir", str(reports),
                      env={"COOKBOOK_DATA_DIR": str(tmp_path / "fresh-clone" / "data")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(reports.glob("doctor_loader_bound_*.md"))


def test_a_step_through_a_closure_has_its_forward_backward_and_losses(tmp_path):
    """optimizer.step(closure): the forward and backward inside it are the step's, its loss is kept,
    and the clipping's foreach ops inside it do not make a for-loop optimizer look foreach."""
    proc = run_module("common.runners.doctor", str(PLAIN / "closure.py"), "--reports-dir", str(tmp_path), *FEW)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    obs = _observation(tmp_path)
    phases = obs["result"]["timing"]["phase_ms"]
    assert {"forward", "backward", "optimizer"} <= set(phases)
    assert phases["optimizer"]["median_ms"] < phases["forward"]["median_ms"] + phases["backward"]["median_ms"]
    assert len(obs["result"]["losses"]) >= 20 and obs["ops"]["optimizer"] == "for-loop"


@dataclasses.dataclass
class Batch:
    input_ids: torch.Tensor
    labels: torch.Tensor


class Encoding(OrderedDict):
    """A Mapping that is not a plain dict's type, as transformers' BatchEncoding and ModelOutput."""


def test_a_mapping_or_dataclass_batch_gives_its_size():
    ids = torch.zeros(8, 16, dtype=torch.long)
    assert settings.batch_size_of(Encoding(input_ids=ids, labels=ids[:, 0])) == 8
    assert settings.batch_size_of(Batch(ids, ids[:, 0])) == 8
    assert settings.batch_size_of([{"x": ids}, ids]) == 8 and settings.batch_size_of({"n": 3}) is None


def test_the_script_runs_in_its_own_folder_and_cwd_chooses_another(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "settings.txt").write_text("16\n")
    (folder / "train.py").write_text((PLAIN / "short.py").read_text().replace(
        "model = torch.nn.Linear(8, 1)", "model = torch.nn.Linear(int(open('settings.txt').read()) // 2, 1)"))
    proc = run_module("common.runners.doctor", str(folder / "train.py"), "--reports-dir", str(tmp_path / "r"),
                      "--warmup", "1", "--steps", "3", "--time", "0.1", "--profile-steps", "0", "--", "--steps", "40")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"in `{folder}`" in next((tmp_path / "r").glob("doctor_train_*.md")).read_text()
    proc = run_module("common.runners.doctor", str(folder / "train.py"), "--reports-dir", str(tmp_path / "r"),
                      "--cwd", str(tmp_path), "--warmup", "1", "--steps", "3", "--", "--steps", "40")
    assert proc.returncode != 0
    line = next(x for x in proc.stderr.splitlines() if "could not find a file" in x)
    assert f"ran in {tmp_path} " in line and "settings.txt" in line and "--cwd DIR" in line


def test_a_script_with_no_losses_is_not_called_deterministic():
    from common.analysis.results_doctor import Observation
    from common.runners import trials

    from tests_helpers import run_result

    def observed(losses):
        r = run_result(losses=losses)
        return Observation(script="t.py", argv=[], step="optimizer", steps_seen=9, ended="stopped",
                           stage="measured", result=r)

    plan = trials.TrialPlan(script=PLAIN / "short.py", script_args=[], flags=[], profile_steps=1, out_dir=REPO,
                            cpus=[0], budget_s=1)
    plan.observed = {((), 1): observed([]), ((), 2): observed([])}
    deterministic, *_, words = trials.noise(plan, {"early_steps": 5, "early_rtol": 0.03, "window": 10, "rtol": 0.05})
    assert deterministic is None and "unknown" in words


def test_compile_from_outside_works_on_a_script_that_never_names_torch(tmp_path):
    """The observer runs as its imported module, not as __main__, which the script takes over: else
    dynamo's guards on the doctor's hooks look `torch` up in the script's namespace and fail."""
    obs = _observe(tmp_path, PLAIN / "no_torch_name.py", "--fix", "compile", "--warmup", "3")
    assert obs["fixes"]["compile"] == "applied" and obs["result"]["compile"]["graphs"] >= 1


TQDM = " 20%|█▉        | 59/300 [00:00<00:03, 75.04it/s]\r 40%|███▉      | 120/300 [00:01<00:02, 75.1it/s]"


def test_a_crashed_fix_is_told_by_its_error_not_a_progress_bar():
    from common.runners.trials import crash_line

    tail = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
            "RuntimeError: DataLoader worker (pid 42) is killed by signal", "doctor: the script raised RuntimeError",
            TQDM]
    assert crash_line(tail) == "RuntimeError: DataLoader worker (pid 42) is killed by signal"
    assert crash_line(["epoch 1 done", TQDM]) == "epoch 1 done"


def test_the_doctors_words_are_not_glued_to_a_progress_bar():
    from common.runners.launch import readable_lines

    assert readable_lines(TQDM + "doctor: warm-up done (5 steps); timing 50 steps\n") == [
        " 40%|███▉      | 120/300 [00:01<00:02, 75.1it/s]", "doctor: warm-up done (5 steps); timing 50 steps"]
    assert readable_lines("step 3: loss 2.1\n") == ["step 3: loss 2.1"]


def test_an_interval_too_wide_to_mean_anything_is_said_in_words():
    from common.analysis import stats
    from common.analysis.results_compare import Speedup
    from common.analysis.results_doctor import Trial
    from common.runners.trials import headline

    wild = Speedup(ratio=0.56, low=1e-30, high=2.6e28, method="", verdict="undecided", processes=[2, 2], floor=0.03)
    said = stats.describe(wild, "amp")
    assert said.startswith("too noisy to decide: the processes' times disagree beyond what 2 processes each")
    assert "0.56" not in said and "e+28" not in said and "idle machine" in said  # no number that reads as a result
    fair = Speedup(ratio=0.96, low=0.73, high=1.29, method="", verdict="undecided", processes=[3, 3], floor=0.03)
    assert "0.73-1.29" in stats.describe(fair)
    won = Speedup(ratio=9.0, low=2.25, high=1e9, method="", verdict="faster", processes=[2, 2], floor=0.03)
    assert stats.describe(won, "workers").startswith("workers is 9.00x faster (95% interval from 2.25x up;")
    rows = [Trial(fix="amp", recipe="amp", how="", verdict=stats.verdict_words(wild), speedup=wild)]
    assert "too noisy to decide" in headline(rows, cpu=True)


def test_a_noisy_run_says_so_in_the_doctors_headline():
    from test_doctor_units import _observation

    from common.analysis import doctor

    obs = _observation(forward=0.9)
    quiet = doctor.read(obs).headline
    obs.result.timing.summary.cv = 0.77
    assert "CV 77%" not in quiet and "varied by CV 77%" in doctor.read(obs).headline


def test_the_try_budget_bounds_the_wall_time(tmp_path):
    """--try-budget 6 on a script whose runs take about 5 s each: no round starts that would not fit,
    a run still going when the budget ends is stopped, and the report says how it stopped."""
    proc = run_module("common.runners.doctor", str(PLAIN / "loader_bound.py"), "--reports-dir", str(tmp_path),
                      "--try", "workers", "--try-budget", "6")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tried = json.loads(next(tmp_path.glob("results/doctor/*/*/trials.json")).read_text())
    assert tried["spent_s"] <= 6 + 6  # the budget, plus at most the grace a stopped run is given
    assert "budget ended" in tried["stopped"]
    assert "3 rounds or more" not in proc.stdout and "within 6 s of wall time" in proc.stdout


def test_a_run_still_going_when_its_budget_ends_is_stopped_and_cut(tmp_path):
    from common.runners import launch

    script = tmp_path / "slow.py"
    script.write_text("import time\ntime.sleep(60)\n")
    outcome = launch.child([str(script)], [], tmp_path / "out.json", read=None, timeout=1.0)
    assert outcome.kind == "cut" and outcome.seconds < 10 and "budget ended" in outcome.describe()


def test_the_lines_to_add_fit_a_users_script_not_the_cookbooks_harness():
    from common.analysis import fixes
    from common.runners.trials import lines_to_add

    for name, fix in fixes.FIXES.items():
        lines = lines_to_add(fix)
        assert lines, name
        assert not any(word in line for line in lines for word in ("run.", "data.", "models.", "recipes.")), name
    amp = "\n".join(lines_to_add(fixes.FIXES["amp"]))
    assert "torch.autocast(device.type, dtype=amp_dtype)" in amp and "scaler.step(optimizer)" in amp


def test_torchs_warning_of_too_many_loader_workers_is_a_notice(tmp_path):
    notices = _observe(tmp_path, PLAIN / "too_many_workers.py")["result"]["notices"]
    assert any("worker processes, more than the" in n and "torch suggests" in n for n in notices), notices


def test_a_fused_optimizer_is_not_offered_fused():
    from test_doctor_units import _observation

    from common.analysis import doctor, fixes
    from common.analysis.results_doctor import OpsSeen

    obs = _observation(device="cuda", ops=OpsSeen(optimizer="for-loop"), flags={"AdamW": {"foreach": None,
                                                                                          "fused": True}})
    assert fixes.applies(fixes.FIXES["fused"], obs) == "its optimizer is built with fused=True already"
    assert "fused optimizer" not in {g.kind for g in doctor.gains_of(obs, {})}


# --- the frameworks people train with (in the test lock: transformers, accelerate, lightning) -----------
FRAMEWORKS = REPO / "tests" / "frameworks"


def _report(reports):
    return next(reports.glob("doctor_*.md")).read_text()


def test_the_doctor_on_a_hugging_face_trainer_script(tmp_path):
    """The Trainer steps accelerate's wrapped optimizer; its batches are BatchEncodings passed as
    model(**inputs)."""
    proc = run_module("common.runners.doctor", str(FRAMEWORKS / "hf_trainer.py"), "--reports-dir", str(tmp_path),
                      *FEW, "--", "--out", str(tmp_path / "hf_out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    obs = _observation(tmp_path)
    assert obs["result"]["config"]["batch_size"] == 32  # the BatchEncoding's, not 1
    assert obs["optimizers"] and {"forward", "backward", "optimizer"} <= set(obs["result"]["timing"]["phase_ms"])
    assert len(obs["result"]["losses"]) >= 20
    print(next(line for line in proc.stdout.splitlines() if line.startswith("Headline:")))


def test_the_doctor_and_its_try_amp_on_a_lightning_script(tmp_path):
    """Lightning steps through a closure: forward and backward are seen inside it, and --try amp
    casts the matmuls there to 16-bit (the hooks were muted inside the step) and compares its losses."""
    proc = run_module("common.runners.doctor", str(FRAMEWORKS / "lightning_closure.py"), "--reports-dir",
                      str(tmp_path), *FEW, "--try", "amp", "--try-budget", "30")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    obs = _observation(tmp_path)
    phases = obs["result"]["timing"]["phase_ms"]
    assert phases["forward"]["median_ms"] > 0 and phases["backward"]["median_ms"] > 0
    tried = json.loads(next(tmp_path.glob("results/doctor/*/*/trials.json")).read_text())
    amp = next(t for t in tried["rows"] if t["fix"] == "amp")
    assert "matmuls and convolutions per step in bf16" in amp["why"] and not amp["why"].startswith("0 of")
    assert amp["parity"] and "no losses" not in amp["parity"] and tried["deterministic"] is not None
    print(tried["headline"])


def test_the_doctor_on_a_nanogpt_style_script_in_its_own_folder(tmp_path):
    """exec(open('configurator.py')) and np.memmap('data/...'): relative paths, read from its folder."""
    import shutil
    import subprocess
    import sys

    folder = tmp_path / "nanogpt"
    shutil.copytree(FRAMEWORKS / "nanogpt", folder)
    subprocess.run([sys.executable, "prepare.py"], cwd=folder, check=True)
    proc = run_module("common.runners.doctor", str(folder / "train.py"), "--reports-dir", str(tmp_path / "r"), *FEW,
                      "--", "--eval_interval=1000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = _report(tmp_path / "r")
    assert f"in `{folder}`" in md
    assert "fused attention" not in md  # its attention is SDPA's (tests/plain/gpt_by_hand.py: the other branch)
    obs = _observation(tmp_path / "r")
    assert list(obs["sync_lines"]) == [f"train.py:{_line(folder / 'train.py', 'lossf = loss.item()')}"]
    print(next(line for line in proc.stdout.splitlines() if line.startswith("Headline:")))


def _line(path, text):
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_batch_given_as_keyword_arguments_gives_its_size(tmp_path):
    assert _observe(tmp_path, PLAIN / "keyword_batches.py")["result"]["config"]["batch_size"] == 24


def test_a_script_folder_with_its_own_common_package_runs(tmp_path):
    """The child starts in the cookbook's folder and moves into the script's, so `-m common...` is the
    cookbook's even beside a user's `common.py`."""
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "common.py").write_text("VALUE = 16\n")
    (folder / "train.py").write_text((PLAIN / "short.py").read_text().replace(
        "import torch\n", "import torch\nfrom common import VALUE\n", 1).replace("torch.nn.Linear(8, 1)",
                                                                            "torch.nn.Linear(VALUE // 2, 1)"))
    proc = run_module("common.runners.doctor", str(folder / "train.py"), "--reports-dir", str(tmp_path / "r"),
                      "--warmup", "1", "--steps", "3", "--time", "0.1", "--profile-steps", "0", "--", "--steps", "40")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_sync_counter_leaves_tensor_as_it_was_and_compiled_scripts_alone():
    from common.measure.syncs import READS, SyncLines

    before = {name: torch.Tensor.__dict__.get(name) for name in READS}
    lines = SyncLines(PLAIN / "short.py", cuda=False)
    lines.install()
    torch.ones(()).item()  # this file is not the script's folder: not counted
    lines.uninstall()
    assert {name: torch.Tensor.__dict__.get(name) for name in READS} == before and lines.counts == {}
    assert not lines._script_code(str(REPO / "common" / "harness.py"))
    assert not lines._script_code("/usr/lib/python3/dist-packages/x.py")


def test_every_try_row_says_one_verdict_in_its_cell_its_column_its_bullet_and_the_terminal():
    """A busy machine's rows read "too noisy to decide: 1.79x, but ..." in the cell and "no significant
    difference" in the verdict: one vocabulary now (stats.verdict_words), and no bare ratio where the
    interval does not decide."""
    from common.analysis import stats
    from common.analysis.results_compare import Speedup
    from common.analysis.results_doctor import Trial, Trials
    from common.render.doctor import trial_result, trials_section

    cases = {"workers": (1.74, 1.62, 1.85, "faster"), "amp": (11.04, 1e-3, 9e4, "undecided"),
             "fused": (1.01, 0.99, 1.02, "no meaningful difference"), "compile": (0.96, 0.73, 1.29, "undecided"),
             "set_to_none": (0.80, 0.70, 0.90, "slower"), "channels_last": (1.20, None, None, "undecided")}
    rows = []
    for fix, (ratio, low, high, verdict) in cases.items():
        s = Speedup(ratio=ratio, low=low, high=high, method="", verdict=verdict, processes=[3, 3], floor=0.03)
        rows.append(Trial(fix=fix, recipe=fix if fix != "fused" else "fused_optimizer", how="", why="x",
                          verdict=stats.verdict_words(s), speedup=s, parity_ok=True))
    tried = Trials(budget_s=60, spent_s=50, rounds=3, stopped="", deterministic=True, noise="", rows=rows,
                   manual=[], headline="")
    lines = trials_section(tried, cpu=True)
    table = [line.split(" | ") for line in lines if line.startswith("| [`")]
    assert len(table) == len(cases)
    said = set()
    for cells, t in zip(table, rows):
        cell, verdict = cells[2], cells[-1].rstrip(" |")
        assert verdict == t.verdict and verdict in cell.lower(), (cell, verdict)  # "SLOWER: 0.80x (...)"
        assert any(line.startswith(f"- **{t.fix}**: {verdict}.") for line in lines)
        assert trial_result(t) == cell  # what the terminal prints for it
        said.add(verdict)
    assert said == {"faster", "too noisy to decide", "no meaningful difference", "no significant difference",
                    "slower", "no interval"}
    noisy = trial_result(rows[1])
    assert "11.04" not in noisy and noisy.startswith("too noisy to decide")


def test_a_fastai_learner_is_read_with_no_flag_from_its_backward_and_its_own_dataloader(tmp_path):
    """fastai's optimizer is its own and its DataLoader is no torch DataLoader (it draws its batches
    through torch's iterators): a step is each backward, and its loader's batches are the data phase."""
    proc = run_module("common.runners.doctor", str(FRAMEWORKS / "fastai_learner.py"), "--reports-dir", str(tmp_path),
                      *FEW)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    obs = _observation(tmp_path)
    assert obs["step"] == "backward" and obs["optimizers"] == []
    assert {"data", "forward", "backward"} <= set(obs["result"]["timing"]["phase_ms"])
    assert [(ld["batch_size"], ld["num_workers"]) for ld in obs["loaders"]][:1] == [(32, 0)]
    assert obs["result"]["config"]["batch_size"] == 32 and len(obs["result"]["losses"]) >= 20
    md = next(tmp_path.glob("doctor_fastai_learner_*.md")).read_text()
    assert "each `loss.backward()` (the script built no torch.optim optimizer" in md


def test_a_keras_3_fit_on_torch_is_read_with_no_flag_from_its_backward(tmp_path):
    """Keras 3 on the PyTorch backend: its own optimizer, its fit's torch DataLoader over NumPy arrays."""
    obs = _observe(tmp_path, FRAMEWORKS / "keras_fit.py")  # the script sets KERAS_BACKEND=torch itself
    assert obs["step"] == "backward" and obs["optimizers"] == []
    assert {"data", "forward", "backward"} <= set(obs["result"]["timing"]["phase_ms"])
    assert obs["loaders"] and obs["loaders"][0]["batch_size"] == 32
    assert obs["result"]["config"]["batch_size"] == 32


def test_a_script_with_a_torch_optimizer_still_steps_at_it_not_at_each_backward(tmp_path):
    """Gradient accumulation: two backwards per optimizer step; the step is the optimizer's."""
    obs = _observe(tmp_path, PLAIN / "accumulation.py")
    assert obs["step"] == "optimizer"


def test_a_pytorch_geometric_gnn_and_a_skorch_estimator_are_read_with_no_flag(tmp_path):
    """PyG's DataLoader (a torch DataLoader collating graphs into one Batch) and skorch's fit, which builds the
    DataLoader and the torch.optim optimizer itself: a step at each optimizer step, their loaders read."""
    (tmp_path / "pyg").mkdir()
    (tmp_path / "skorch").mkdir()
    gnn = _observe(tmp_path / "pyg", FRAMEWORKS / "pyg_gcn.py")
    assert gnn["step"] == "optimizer" and gnn["models"][0] == "GCN"
    assert [(ld["batch_size"], ld["num_workers"]) for ld in gnn["loaders"]] == [(32, 0)]
    net = _observe(tmp_path / "skorch", FRAMEWORKS / "skorch_net.py")
    assert net["step"] == "optimizer" and net["optimizers"] == ["Adam"] and net["models"][0] == "MLP"
    assert net["loaders"][0]["batch_size"] == 32 and net["result"]["config"]["batch_size"] == 32
