"""`make doctor` on plain PyTorch scripts that know nothing of the harness (tests/plain/), on the CPU:
the headline names what the script's step really spends, the report links the recipes, and the
faults (a missing script, one that raises, one that ends early, one with no optimizer step, Ctrl-C)
give one clear result and no half-written report."""
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import REPO, run_module
from tests_helpers import headline_of

PLAIN = REPO / "tests" / "plain"
QUICK = ("--warmup", "2", "--steps", "8", "--time", "2", "--profile-steps", "2")


def doctor(tmp_path, script, *flags, script_args=(), ok=True):
    proc = run_module("common.runners.doctor", str(script), "--reports-dir", str(tmp_path), *flags,
                      *(["--", *script_args] if script_args else []))
    if ok:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def headline(proc) -> str:
    """The headline's diagnosis (what a busy machine adds before and after it aside: tests_helpers.headline_of)."""
    return headline_of(proc.stdout)


def report(tmp_path) -> str:
    (md,) = tmp_path.glob("doctor_*.md")
    return md.read_text()


def test_a_loader_bound_script_headlines_its_data_loading(tmp_path):
    proc = doctor(tmp_path, PLAIN / "loader_bound.py", *QUICK)
    assert headline(proc).startswith("Headline: Data loading costs ")
    assert headline(proc).endswith("(CPU run)")
    md = report(tmp_path)
    assert md.splitlines()[2] == headline(proc)  # the report starts with the same line
    share = int(md.split("**data loading, ")[1].split("%")[0])
    assert share >= 50  # 32 ms of sleep per batch against well under 1 ms of compute
    assert "[`dataloader`](../recipes/dataloader/README.md): measured " in md  # with a measured figure
    assert "| DataLoader 1 | batch 16, 0 workers, pin_memory=False, persistent_workers=False |" in md
    assert "- **DataLoader settings**: data loading costs" in md
    assert "Blind spot: No GPU" in md
    for section in ("## Phase 1: baseline", "## Phase 2: bottleneck type", "## Phase 3: component",
                    "## Phase 4: operations", "## Memory and traces", "### How far each op is from the limit"):
        assert section in md
    (trace,) = (tmp_path / "traces" / "doctor").rglob("*.pt.trace.json")
    assert str(trace) in md
    page = trace.parent / trace.name.replace(".pt.trace.json", ".html")
    assert page.is_file() and f"in one page that needs no network: `{page}`" in md


def test_a_compute_bound_script_headlines_its_compute_and_the_settings_it_leaves(tmp_path):
    proc = doctor(tmp_path, PLAIN / "compute_bound.py", *QUICK)
    assert headline(proc).startswith("Headline: Compute on the CPU costs ")
    md = report(tmp_path)
    assert "| matmuls per step, by dtype | float32 " in md
    # AdamW on a CPU defaults to a for-loop, on CUDA to foreach: said, and not offered as a gain
    assert "| optimizer implementation (its ops) | for-loop: torch's default on a CPU" in md
    assert "| optimizers, as built | AdamW: foreach=None, fused=None |" in md
    assert "| zero_grad | set_to_none |" in md
    assert "- **16-bit**: " in md and "- **fused optimizer**: " not in md
    assert "| DataLoader | none seen |" in md


def test_a_gpt_written_as_nanogpt_writes_it_without_flash_is_told_of_fused_attention(tmp_path):
    """tests/plain/gpt_by_hand.py: nanoGPT's attention branch for a torch without flash, two blocks of 64
    tokens. Its SDPA branch is never counted (tests/unit/test_doctor_units.py reads SDPA's own softmax)."""
    proc = doctor(tmp_path, PLAIN / "gpt_by_hand.py", *QUICK)
    assert "could gain: fused attention -> recipes: attention" in proc.stdout
    md = report(tmp_path)
    assert "- **fused attention**: 2 softmaxes per step over 64 x 64 scores between batched matmuls" in md
    assert "[`attention`](../recipes/attention/README.md)" in md


def test_an_item_per_step_is_found_and_costed_as_next_to_nothing_on_a_cpu(tmp_path):
    proc = doctor(tmp_path, PLAIN / "item_per_step.py", *QUICK)
    assert "host syncs" not in headline(proc)  # on a CPU a scalar read costs microseconds: honest, not headlined
    md = report(tmp_path)
    syncs = float(md.split("**host syncs, ")[1].split("%**: ")[1].split(" .item()")[0])
    assert syncs == 1.0
    assert "[`sync_removal`](../recipes/sync_removal/README.md)" in md


def test_an_inference_script_is_told_how_to_name_its_step_then_measured_with_it(tmp_path):
    proc = doctor(tmp_path, PLAIN / "inference.py", ok=False)
    assert proc.returncode == 1
    assert "never called optimizer.step()" in proc.stderr and "--step forward" in proc.stderr
    assert not list(tmp_path.glob("doctor_*.md"))
    proc = doctor(tmp_path, PLAIN / "inference.py", "--step", "forward", *QUICK)
    md = report(tmp_path)
    assert "| what a step is | each call of the top-level model (--step forward) |" in md
    assert "Batch 32, 8 timed steps" in md  # the batch size read from the DataLoader


def test_a_script_that_raises_shows_its_own_traceback_and_writes_no_report(tmp_path):
    proc = doctor(tmp_path, PLAIN / "raises.py", ok=False)
    assert proc.returncode == 1
    out = proc.stdout
    assert "Traceback (most recent call last):" in out
    first = out.split("Traceback (most recent call last):")[1].splitlines()[1]
    assert "raises.py" in first  # the user's frames first, not the doctor's
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in out
    assert "no report written" in proc.stderr
    assert not list(tmp_path.glob("doctor_*.md"))


def test_a_script_that_ends_in_the_warm_up_of_its_forward_steps_is_said_too_short_not_a_crash(tmp_path):
    """--step forward on a script that ends before the timed steps (a Keras fit of one short epoch): the
    doctor's end of its measurement once crashed in its own code and called it the script's failure."""
    proc = doctor(tmp_path, PLAIN / "short.py", "--step", "forward", ok=False, script_args=("--steps", "3"))
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert "ended after 3 steps, in the warm-up: too few to time" in proc.stderr


def test_a_failure_of_the_doctors_own_reading_after_the_script_is_said_as_the_cookbooks(tmp_path, monkeypatch,
                                                                                        capsys):
    from common.errors import EXIT_COOKBOOK_FAULT
    from common.measure import observer

    def broken(self, how):
        raise AttributeError("planted")

    monkeypatch.setattr(observer.Observer, "finish", broken)
    monkeypatch.setattr(observer, "interrupt_on_sigterm", lambda: None)  # the suite's own signals stay
    monkeypatch.setenv("COOKBOOK_PLAIN", "1")  # main() sets it; restored after
    monkeypatch.setattr("sys.path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["observer"])
    code = observer.main(["--out", str(tmp_path / "obs.json"), "--trace-dir", str(tmp_path), "--",
                          str(PLAIN / "short.py"), "--steps", "2"])
    assert code == EXIT_COOKBOOK_FAULT and not (tmp_path / "obs.json").exists()
    said = capsys.readouterr().err
    assert "the cookbook's own code failed (reading what it measured: AttributeError: planted), not your script" in said


def test_a_script_that_ends_early_is_reported_from_the_steps_it_ran_or_said_too_short(tmp_path):
    proc = doctor(tmp_path, PLAIN / "short.py", ok=False)  # 6 steps: 5 warm-up, 1 timed
    assert proc.returncode == 1
    assert "ended after 6 steps, in the timed steps: too few to time" in proc.stderr
    assert not list(tmp_path.glob("doctor_*.md"))
    proc = doctor(tmp_path, PLAIN / "short.py", "--warmup", "1", script_args=("--steps", "7"))
    md = report(tmp_path)
    assert "the script ended after 6 of 50 timed steps: no profiled steps" in md
    assert "Blind spot: No profiled steps" in md
    assert "then the script ended by itself." in md


def test_bad_input_is_one_line(tmp_path):
    proc = doctor(tmp_path, tmp_path / "missing.py", ok=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "missing.py: no such file" in proc.stderr
    proc = run_module("common.runners.doctor", "--reports-dir", str(tmp_path))
    assert proc.returncode == 2 and "give the script: make doctor SCRIPT=" in proc.stderr
    assert not (tmp_path / "results").exists()


def test_ctrl_c_stops_the_script_and_writes_no_report(tmp_path):
    cmd = [sys.executable, "-m", "common.runners.doctor", str(PLAIN / "loader_bound.py"), "--reports-dir",
           str(tmp_path), "--steps", "2000", "--time", "600"]
    # as a terminal's foreground job has it: SIGINT not ignored (a shell's background job inherits it
    # ignored, and the whole run would go on), the child a plain process in the group (no zygote)
    plain = {k: v for k, v in os.environ.items() if k != "COOKBOOK_ZYGOTE"}
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=plain,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stdout:  # wait for the timed steps to begin
        if "timing" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends to the whole group on Ctrl-C
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 130, rest
    assert "interrupted: no report written" in rest
    assert not list(tmp_path.glob("doctor_*.md"))
    assert not list(tmp_path.rglob("observation.json"))


@pytest.mark.parametrize("script", ["churn_mlp", "resnet18_cifar10"])
def test_a_baseline_run_as_a_plain_script_gets_the_headline_of_make_diagnose(tmp_path, script):
    workload = script.split("_")[0]
    args = ("--smoke", "--device", "cpu", "--data", "synthetic")
    proc = doctor(tmp_path / "doctor", REPO / "baselines" / f"{script}.py", "--warmup", "2", "--steps", "6",
                  "--profile-steps", "2", script_args=args)
    assert "the loop ended" not in proc.stdout  # the doctor stopped it after its own steps
    diagnosed = run_module("common.runners.diagnose", workload, *args, "--reports-dir", str(tmp_path / "diagnose"))
    assert diagnosed.returncode == 0, diagnosed.stderr
    verdict = json.loads(next((tmp_path / "diagnose" / "results").rglob("analysis.json")).read_text())
    ours = json.loads(next((tmp_path / "doctor" / "results").rglob("verdict.json")).read_text())
    assert ours["diagnosis"]["findings"][0]["kind"] == verdict["findings"][0]["kind"]
    md = report(tmp_path / "doctor")
    assert "| setting | seen |" in md and "syncs" in md
    assert ours["diagnosis"]["bottleneck"]["syncs_per_step"] == verdict["bottleneck"]["syncs_per_step"]


def test_a_compiled_model_is_measured_without_a_recompilation(tmp_path):
    doctor(tmp_path, PLAIN / "compiled.py", *QUICK)
    obs = json.loads(next((tmp_path / "results").rglob("observation.json")).read_text())
    assert obs["result"]["compile"]["graphs"] == 1 and obs["result"]["compile"]["recompiles"] == 0
    assert "| torch.compile | 1 graphs, 0 breaks, 0 recompiles |" in report(tmp_path)


def test_on_a_gpu_the_image_baseline_is_headlined_as_make_diagnose_does(tmp_path):
    """The lab's program on its GPU presets (batch 32, 224 px, no loader workers), both ways."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (make gpu-check runs it)")
    doctor(tmp_path / "doctor", REPO / "baselines" / "resnet18_cifar10.py", "--warmup", "5", "--steps", "30",
           "--time", "5")
    diagnosed = run_module("common.runners.diagnose", "resnet18", "--reports-dir", str(tmp_path / "diagnose"),
                           "--", "--steps", "30", "--warmup", "5")
    assert diagnosed.returncode == 0, diagnosed.stderr
    verdict = json.loads(next((tmp_path / "diagnose" / "results").rglob("analysis.json")).read_text())
    ours = json.loads(next((tmp_path / "doctor" / "results").rglob("verdict.json")).read_text())
    assert ours["diagnosis"]["findings"][0]["kind"] == verdict["findings"][0]["kind"], (ours["headline"],
                                                                                     verdict["verdict"])
    assert "(CPU run)" not in ours["headline"] and "GPU idle share" in report(tmp_path / "doctor")


def test_loader_workers_epoch_restarts_and_a_batch_step_are_measured_as_such(tmp_path):
    doctor(tmp_path, PLAIN / "workers.py", "--step", "batch", *QUICK)
    obs = json.loads(next((tmp_path / "results").rglob("observation.json")).read_text())
    assert obs["models"] == ["Linear"]  # the transform runs in the workers, whose hooks stay out of it
    assert obs["steps_seen"] == obs["batches"]  # one step per batch: an epoch's end is no step of its own
    verdict = json.loads(next((tmp_path / "results").rglob("verdict.json")).read_text())
    data = next(c for c in verdict["diagnosis"]["components"] if c["phase"] == "data")
    assert data["share"] >= 0.5  # the workers' start at every epoch is data time, not the script's own
    md = report(tmp_path)
    assert "| DataLoader 1 | batch 16, 2 workers, pin_memory=False, persistent_workers=False, prefetch_factor=2 |" in md
    assert "| zero_grad | set_to_none |" in md  # model.zero_grad() counts too


def test_gradient_accumulation_counts_every_batch_of_a_step(tmp_path):
    doctor(tmp_path, PLAIN / "accumulation.py", *QUICK)
    md = report(tmp_path)
    assert ("4.0 DataLoader batches per step (gradient accumulation?): a step's samples count all of them, "
            "batch 32") in md
    assert "Batch 32, " in md
    assert "| zero_grad | zeroes |" in md and "- **set_to_none**: " in md


def test_a_read_every_10th_step_is_counted_at_a_tenth_and_no_loader_gets_no_loading_advice(tmp_path):
    """27 timed steps and 3 profiled (+1 profiler warm-up): 31 measured, 3 or 4 of them reads. Counted over
    all of them, not extrapolated from 3 profiled steps (0 or 0.33); and with batches made in the loop,
    no data-loading finding nor the dataloader recipe."""
    proc = doctor(tmp_path, PLAIN / "periodic_item.py", "--warmup", "3", "--steps", "27", "--time", "60",
                  "--profile-steps", "3")
    md = report(tmp_path)
    said = next(line for line in md.splitlines() if "periodic_item.py:" in line and "per step" in line)
    rate = float(said.split("` (")[1].split(" per step")[0])
    assert 3 / 31 <= rate <= 4 / 31, said
    assert "data loading" not in proc.stdout and "**data loading" not in md and "(recipes/dataloader" not in md


def test_the_timed_stretch_ends_at_its_time_bound_when_the_steps_slow_down(tmp_path):
    """The warm-up's 2 ms steps plan 50 timed steps; at 200 ms each they would take 10 s against --time 0.5."""
    doctor(tmp_path, PLAIN / "slows_down.py", "--warmup", "3", "--steps", "50", "--time", "0.5",
           "--profile-steps", "1")
    (obs,) = (tmp_path / "results" / "doctor").rglob("observation.json")
    timing = json.loads(obs.read_text())["result"]["timing"]
    assert timing["timed_wall_s"] < 1.2 and len(timing["step_ms"]) < 10, timing["timed_wall_s"]
    assert "the timed steps ended at --time (0.5 s)" in report(tmp_path)


def test_a_busy_machine_is_said_above_the_headline_not_diagnosed(tmp_path):
    """Two processes spinning on every core this run may use: the step's times are the machine's, said
    first, with the threads, the cores and the load under "Settings seen"."""
    cores = sorted(os.sched_getaffinity(0))
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in cores]
    try:  # a short run (the spinners slow the rest of the suite too), its timed steps sized from the second
        # warm-up step (from the first alone, slow on a loaded machine, it timed 3: a window under the 0.5 s the
        # kernel's ticks need) and lasting about a second
        proc = doctor(tmp_path, PLAIN / "compute_bound.py", "--warmup", "2", "--steps", "8", "--time", "1.2",
                      "--profile-steps", "1")
    finally:
        for p in spin:
            p.kill()
    line = next(line for line in proc.stdout.splitlines() if line.startswith("Headline: "))
    assert line.startswith("Headline: The machine was busy: other processes used ") and "; as measured: " in line
    md = report(tmp_path)
    assert "| torch threads; cores this run could use | " in md
    assert "| other processes on those cores, timed steps | " in md and "a busy machine (see the headline)" in md
