"""The GPU-only choices, made on a CPU through simulated device profiles (a T4, sm_75, 16 GB: no bf16 or
TF32; a P100, sm_60: no tensor cores, no Triton; an A100, sm_80, 40 GB; an H100, sm_90, 80 GB): the
dtype and flags each recipe, ladder rung and doctor fix would choose, what is "not applicable", which
ceilings are measured, and what the doctor suggests. Each test fails with the defect it pins put
back: a choice resting on torch.cuda.is_bf16_supported()'s emulation, TF32 offered below sm_80, the
legacy TF32 flags read after a script set fp32_precision, a GPU's ceilings measured inside a run."""
import os
import re
import subprocess
import sys
import types

import pytest
import torch

from common import catalog
from common.analysis import ceiling as ceiling_rules
from common.analysis import device, fixes, metrics
from common.analysis.results_run import Ceilings
from common.measure import device as device_profile

from conftest import REPO, run_module
from tests_helpers import run_result

T4, P100, A100, H100 = (device.SIMULATED[n] for n in ("T4", "P100", "A100", "H100"))
CPU = device.cpu("test CPU")


# --- the rules, per GPU --------------------------------------------------------------------------------
@pytest.mark.parametrize("profile, amp, scaler, tf32, inductor, ceilings", [
    (T4, "float16", True, False, True, ["float16", "float32"]),
    (P100, "float16", True, False, False, ["float16", "float32"]),
    (A100, "bfloat16", False, True, True, ["bfloat16", "float16", "tf32", "float32"]),
    (H100, "bfloat16", False, True, True, ["bfloat16", "float16", "tf32", "float32"]),
    (CPU, "bfloat16", False, False, True, ["bfloat16", "float32"]),
], ids=["T4", "P100", "A100", "H100", "CPU"])
def test_what_each_device_gets(profile, amp, scaler, tf32, inductor, ceilings):
    assert (profile.amp_dtype, profile.grad_scaler) == (amp, scaler)
    assert (profile.has("tf32"), profile.has("inductor")) == (tf32, inductor)
    assert profile.ceiling_dtypes == ceilings
    line = profile.summary()
    assert f"AMP in {amp}" in line and ("GradScaler" in line) == scaler and f"TF32 {'yes' if tf32 else 'no'}" in line


def test_not_applicable_names_the_gpu_its_capability_and_what_it_lacks():
    assert T4.not_applicable(("tf32",)) == ("not applicable on Tesla T4 (sm_75, simulated): no TF32 (Ampere, sm_80, "
                                            "and newer)")
    assert "no Triton" in P100.not_applicable(("inductor",)) and A100.not_applicable(("tf32", "inductor")) is None
    assert CPU.not_applicable(("tf32",)).startswith("not applicable on CPU (test CPU): no TF32")


@pytest.mark.parametrize("recipe, lacking", [("precision", {"T4", "P100"}), ("compile", {"P100"}), ("amp", set()),
                                             ("channels_last", {"T4", "P100"}),
                                             ("float8", {"T4", "P100", "A100"}), ("flex_attention", {"P100"})])
def test_a_recipe_is_not_applicable_exactly_where_its_technique_is_missing(recipe, lacking):
    found = {name for name, p in device.SIMULATED.items() if catalog.not_applicable(recipe, p)}
    assert found == lacking
    # a CPU runs the others
    assert catalog.not_applicable(recipe, CPU) is None or recipe in ("precision", "float8", "flex_attention")


def test_channels_last_on_a_t4_says_why_its_fp32_pair_shows_nothing():
    """A T4's fp32 convolutions run on CUDA cores, where the layout changes nothing: the pair is not
    applicable there, with the reason, rather than a report of no difference."""
    why = catalog.not_applicable("channels_last", T4)
    assert why.startswith("not applicable on Tesla T4 (sm_75, simulated): fp32 convolutions run on CUDA cores")


def test_a_torch_build_without_kernels_for_the_gpu_is_said():
    built = device.DeviceProfile("cuda", "Tesla P100-PCIE-16GB", [6, 0], 17.1, archs=["sm_75", "sm_80", "sm_90"])
    assert not built.built_for() and "no kernels for sm_60" in built.summary()
    ptx = device.DeviceProfile("cuda", "NVIDIA H200", [9, 0], 150, archs=["sm_80", "compute_80"])
    assert ptx.built_for()  # PTX of an older capability compiles for it
    l4 = device.DeviceProfile("cuda", "NVIDIA L4", [8, 9], 24, archs=["sm_75", "sm_80", "sm_86", "sm_90"])
    assert l4.built_for()  # sm_86's cubins run on sm_89: the same major, an older minor
    v100 = device.DeviceProfile("cuda", "Tesla V100", [7, 0], 16, archs=["sm_75", "sm_80", "sm_90", "sm_100a"])
    assert not v100.built_for()  # sm_75's do not run on sm_70


# --- read from torch's inputs, never from emulation ----------------------------------------------------
@pytest.mark.parametrize("name, major, minor, amp", [("Tesla T4", 7, 5, torch.float16),
                                                     ("NVIDIA A100-SXM4-40GB", 8, 0, torch.bfloat16)])
def test_the_profile_comes_from_the_compute_capability_not_is_bf16_supported(monkeypatch, name, major, minor, amp):
    """torch.cuda.is_bf16_supported() is True on a T4 (including_emulation defaults to True): AMP must
    still be fp16 with a GradScaler there."""
    props = types.SimpleNamespace(name=name, major=major, minor=minor, total_memory=16e9)
    monkeypatch.delenv("COOKBOOK_DEVICE_PROFILE", raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_75", "sm_80", "sm_90"])
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    p = device_profile.profile(torch.device("cuda"))
    assert (p.name, p.capability, p.simulated, p.built_for()) == (name, [major, minor], False, True)
    assert device_profile.amp_dtype(p) == amp


def test_no_half_precision_choice_rests_on_is_bf16_supported():
    """Anywhere the cookbook chooses a dtype, it asks the device profile."""
    users = [p.relative_to(REPO) for folder in ("recipes", "ladder", "common", "baselines")
             for p in (REPO / folder).rglob("*.py") if "is_bf16_supported" in p.read_text()
             and p != REPO / "common" / "analysis" / "device.py"]  # whose docstring says why not
    assert users == []
    for script in ("recipes/amp/churn_fast.py", "recipes/amp/resnet18_fast.py", "recipes/compile/resnet18_slow.py",
                   "recipes/compile/resnet18_fast.py", "recipes/compile/resnet18_fusion_slow.py",
                   "recipes/compile/resnet18_fusion_fast.py",
                   *(f"recipes/cold_start/resnet18_{p}_{v}.py" for p in ("regional", "cache") for v in ("slow",
                                                                                                      "fast"))):
        text = (REPO / script).read_text()
        assert "run.profile.amp_dtype" in text and "dtype=torch.bfloat16" not in text, script


def test_a_simulated_profile_is_named_in_the_environment():
    env = {**os.environ, "COOKBOOK_DEVICE_PROFILE": "T4"}
    out = subprocess.run([sys.executable, "-m", "common.measure.device", "--device", "cpu"], cwd=REPO,
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0 and '"simulated": true' in out.stdout and '"capability": [7, 5]' in out.stdout
    env["COOKBOOK_DEVICE_PROFILE"] = "K80"
    out = subprocess.run([sys.executable, "-m", "common.measure.device", "--device", "cpu"], cwd=REPO,
                         capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "choose one of T4, P100, A100, H100" in out.stderr


# --- the ladder ----------------------------------------------------------------------------------------
def test_the_ladder_skips_what_the_gpu_lacks_and_never_switches_it_on():
    import ladder

    assert ladder.skipped("resnet18", H100) == {} and ladder.skipped("resnet18", T4) == {}
    assert set(ladder.skipped("resnet18", P100)) == {"compile", "cuda_graphs"}
    assert set(ladder.skipped("churn", P100)) == {"cuda_graphs"}
    top = len(ladder.LADDERS["resnet18"].rungs) - 1
    on = ladder.switches("resnet18", top, P100)
    assert not on("compile") and not on("cuda_graphs") and on("amp") and on("fused_adam")
    assert ladder.switches("resnet18", top, H100)("compile")


def test_a_skipped_rung_is_passed_over_and_its_reason_kept():
    from common.runners.climb import summarize

    runs = {i: [run_result(ms=10.0 - i * 0.1)] for i in range(12) if i not in (8, 9)}
    table = summarize("resnet18", runs, [], 1, "cpu", "test", skip=ladder_skip()).rungs
    assert table[8].status == table[9].status == "skipped" and "no Triton" in table[8].skipped
    assert table[10].incremental is not None  # against rung 7, the one below that ran


def ladder_skip():
    import ladder

    return ladder.skipped("resnet18", P100)


# --- the doctor's fixes and suggestions ----------------------------------------------------------------
def _obs(profile, dev="cuda"):
    from common.analysis.results_doctor import Observation, OpsSeen

    r = run_result(device=dev)
    r.env.profile = profile
    return Observation(script="/x/train.py", argv=[], step="optimizer", steps_seen=20, ended="stopped",
                       stage="measured", optimizers=["Adam"], models=["Net"], result=r,
                       ops=OpsSeen(matmul_dtypes={"float32": 6.0}, conv_dtypes={"float32": 4.0},
                                   conv_layouts={"NCHW": 4.0}, optimizer="for-loop"))


def test_the_doctor_says_not_applicable_for_what_the_gpu_lacks():
    amp, tf32, compile_ = fixes.FIXES["amp"], fixes.FIXES["tf32"], fixes.FIXES["compile"]
    t4 = _obs(T4)
    assert fixes.applies(tf32, t4).startswith("not applicable on Tesla T4 (sm_75, simulated): no TF32")
    assert fixes.applies(amp, t4) is None  # fp16 there, with a loss scale put at the script's backward and step
    assert fixes.applies(compile_, t4) is None
    assert fixes.applies(compile_, _obs(P100)).startswith("not applicable on Tesla P100")
    for gpu in (A100, H100):
        assert fixes.applies(tf32, _obs(gpu)) is None and fixes.applies(amp, _obs(gpu)) is None


def test_the_doctor_suggests_tf32_only_where_it_exists():
    from common.analysis import doctor

    def kinds(profile):
        obs = _obs(profile)
        return {g.kind: g.says for g in doctor.gains_of(obs, {})}

    assert "TF32" not in kinds(T4) and "TF32" in kinds(A100)
    assert "float16 with a GradScaler" in kinds(T4)["16-bit"] and "to bfloat16" in kinds(H100)["16-bit"]


@pytest.mark.parametrize("name, dtype, scaled", [("T4", torch.float16, True), ("A100", torch.bfloat16, False)])
def test_the_amp_fix_casts_to_what_the_profile_says(monkeypatch, name, dtype, scaled):
    """The dtype from the compute capability (a T4 has no bf16, whatever torch emulates): fp16 there, with
    the loss scale (common.measure.loss_scale) that fp16's range needs."""
    from common.measure.fixes import Fixes

    monkeypatch.setenv("COOKBOOK_DEVICE_PROFILE", name)
    f = Fixes(["amp"])
    model = torch.nn.Linear(4, 2)
    f.built(torch.optim.SGD(model.parameters(), lr=0.1))
    f.before_model(model, (torch.zeros(1, 4),))
    try:
        assert f.said["amp"] == "applied" and (f.loss_scale is not None) == scaled
        assert torch.get_autocast_dtype("cpu") == dtype and torch.is_autocast_enabled("cpu")
    finally:
        f.after_model(model, model(torch.zeros(1, 4)))


# --- ceilings and MFU ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, simulated", [("T4", None), ("A100", None), ("H100", None), ("H100", "T4")])
def test_the_ceilings_measured_are_the_gpus_native_dtypes(monkeypatch, tmp_path, name, simulated):
    """Read from the card's own capability: a simulated profile changes a run's choices, never what
    its hardware is measured for (an H100 with COOKBOOK_DEVICE_PROFILE=T4 set would otherwise cache
    no bf16 ceiling under the H100's name)."""
    from common.measure import ceiling

    from tests_helpers import stamp

    gpu = device.SIMULATED[name]
    measured = []
    if simulated:
        monkeypatch.setenv("COOKBOOK_DEVICE_PROFILE", simulated)
    else:
        monkeypatch.delenv("COOKBOOK_DEVICE_PROFILE", raising=False)
    props = types.SimpleNamespace(name=gpu.name, major=gpu.capability[0], minor=gpu.capability[1], total_memory=16e9)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_75", "sm_80", "sm_90"])
    monkeypatch.setenv("COOKBOOK_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(ceiling, "_matmul_tflops", lambda dev, dtype, tf32: measured.append((dtype, tf32)) or 1.0)
    monkeypatch.setattr(ceiling, "_copy_gbs", lambda dev: 100.0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: device.SIMULATED[name].name)
    monkeypatch.setattr(ceiling.stamp, "take", lambda dev: stamp("cuda"))
    found = ceiling.measure(torch.device("cuda"))
    want = {"T4": [(torch.float16, False), (torch.float32, False)],
            "A100": [(torch.bfloat16, False), (torch.float16, False), (torch.float32, True), (torch.float32, False)]}
    assert measured == want.get(name, want["A100"])
    assert (found.bf16_tflops is None) == (name == "T4") and found.fp16_tflops == 1.0


def test_mfu_divides_by_the_ceiling_of_the_dtype_the_math_ran_in():
    from common.analysis.aggregate import aggregate
    from common.analysis.results_run import Evidence, OpRoof, Roofline

    t4 = Ceilings(gpu="Tesla T4", fp16_tflops=50.0, fp32_tflops=8.0)
    assert ceiling_rules.peak_tflops(t4, "float16") == 50.0
    assert ceiling_rules.peak_tflops(t4, "bfloat16") == 8.0  # emulated bf16 runs at fp32's rate, not a tensor core's
    assert ceiling_rules.peak_tflops(Ceilings(tf32_tflops=400.0, fp32_tflops=60.0), "float32", tf32=True) == 400.0

    r = run_result(device="cuda")
    r.flops_per_step = 20e9  # 20 GFLOP in 10 ms: 2 TFLOP/s
    roof = Roofline(ops=[OpRoof("aten::mm", "matmul", "float16", 1, 19e9, 1e6, 9.0, None, None),
                         OpRoof("aten::add", "elementwise", "float32", 1, 1e9, 1e6, 1.0, None, None)],
                    busy_ms=10, modelled_ms=10, roof_ms=None)
    r.evidence = Evidence(trace="t", profiled_steps=1, ops_per_step=1, syncs_per_step=0, sync_ops_per_step={},
                          sync_ms_per_step=0, kernels_per_step=1, gpu_idle_share=0, gpu_busy_ms_per_step=10,
                          launch_ms_per_step=None, idle_host_busy_ms_per_step=None, profiled_step_ms=10,
                          sync_apis_per_step=None, memcpy_per_step=None, phases={}, views=None, roofline=roof)
    v = aggregate([r])
    v.ceiling = t4
    assert metrics.get("mfu").value(v) == pytest.approx(2.0 / 50.0)  # the add is not tensor-core math

    # an fp32 ResNet on an H100: its convolutions run TF32 (cuDNN's default), its classifier matmul not
    h100 = Ceilings(gpu="H100", bf16_tflops=800.0, fp16_tflops=800.0, tf32_tflops=400.0, fp32_tflops=60.0)
    roof.ops = [OpRoof("aten::convolution", "convolution", "float32", 1, 18e9, 1e6, 9.0, None, None),
                OpRoof("aten::addmm", "matmul", "float32", 1, 2e9, 1e6, 1.0, None, None)]
    v = aggregate([r])
    v.ceiling = h100
    v.env.tf32_matmul, v.env.tf32_cudnn = False, True
    assert metrics.peak_tflops(v) == pytest.approx(20 / (18 / 400 + 2 / 60))
    assert metrics.get("mfu").value(v) == pytest.approx(2.0 / metrics.peak_tflops(v))
    roof.ops = []  # a replayed CUDA graph: no op in the trace, no ceiling guessed
    v = aggregate([r])
    v.ceiling = h100
    assert metrics.get("mfu").value(v) is None


def test_a_gpus_ceilings_are_never_measured_inside_a_run(monkeypatch):
    from common.measure import ceiling, stages

    from tests_helpers import stamp

    monkeypatch.setattr(ceiling, "measure", lambda dev: pytest.fail("measured inside the run"))
    monkeypatch.setattr(ceiling.stamp, "take", lambda dev: stamp("cuda"))
    monkeypatch.setattr(ceiling.ceiling, "cached", lambda s, cpu=False: None)
    assert ceiling.for_run(torch.device("cuda")) is None
    source = open(stages.__file__).read()
    assert "ceiling.for_run(device)" in source and "ceiling.ensure(" not in source
    for runner in ("diagnose", "doctor"):
        assert "launch.ensure_ceiling(" in (REPO / "common" / "runners" / f"{runner}.py").read_text(), runner


# --- TF32 through torch's current API ------------------------------------------------------------------
TF32_CHILD = """
import torch
from common.measure import stamp, tf32
torch.backends.cuda.matmul.fp32_precision = "tf32"   # the script's own choice, in torch 2.9's API
try:
    torch.backends.cuda.matmul.allow_tf32
    legacy = "read"
except RuntimeError:
    legacy = "raises"
s = stamp.take(torch.device("cpu"))
print(legacy, s.tf32_matmul, s.tf32_cudnn, s.float32_matmul_precision)
tf32.set_tf32(False)
print(torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision(),
      torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision, tf32.state())
"""


def test_the_stamp_reads_tf32_after_a_script_set_fp32_precision():
    out = subprocess.run([sys.executable, "-c", TF32_CHILD], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first == "raises True True high"  # the legacy read would have raised in the user's script
    assert second == "False highest ieee ieee (False, False)"  # set: both APIs agree, neither raises


def test_the_cookbook_never_reads_the_legacy_tf32_flags():
    legacy = re.compile(r"(?:matmul|cudnn)\.allow_tf32(?!\s*=)|get_float32_matmul_precision\(\)")
    readers = [p.relative_to(REPO) for p in (REPO / "common").rglob("*.py")
               if p.name != "tf32.py" and legacy.search(p.read_text())]
    assert readers == []


def test_the_doctor_reports_on_a_script_that_uses_the_current_tf32_api(tmp_path):
    proc = run_module("common.runners.doctor", str(REPO / "tests" / "plain" / "tf32_current_api.py"),
                      "--reports-dir", str(tmp_path), "--warmup", "2", "--steps", "20", "--time", "1",
                      "--profile-steps", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| TF32 matmul / cuDNN; float32 matmul precision | True / True; high |" in next(
        tmp_path.glob("doctor_tf32_current_api_*.md")).read_text()


def test_the_cookbooks_own_error_inside_a_script_is_the_cookbooks():
    from common.measure.observer import CookbookFault, doctor_work

    with pytest.raises(CookbookFault, match="reading: RuntimeError: legacy"), doctor_work("reading"):
        raise RuntimeError("legacy")
    with pytest.raises(RuntimeError, match="CUDA error: device-side assert"), doctor_work("reading"):
        raise RuntimeError("CUDA error: device-side assert triggered")  # the script's, surfacing at our sync


# --- the runners ---------------------------------------------------------------------------------------
def test_a_recipe_the_gpu_cannot_run_is_reported_not_timed(tmp_path):
    proc = run_module("common.runners.compare", "precision", "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--reports-dir", str(tmp_path), env={"COOKBOOK_DEVICE_PROFILE": "T4"})
    assert proc.returncode == 0, proc.stderr
    assert "precision: not applicable on Tesla T4 (sm_75, simulated): no TF32" in proc.stdout
    md = (tmp_path / "precision.md").read_text()
    assert "**Not applicable on Tesla T4 (sm_75, simulated): no TF32" in md and "nothing was timed" in md
    assert not list(tmp_path.glob("results/precision/*/*_r1.json"))  # no twin ran


def test_a_sweep_the_gpu_cannot_run_is_reported_not_timed(tmp_path):
    proc = run_module("common.runners.sweep", "compile", "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--reports-dir", str(tmp_path), env={"COOKBOOK_DEVICE_PROFILE": "P100"})
    assert proc.returncode == 0, proc.stderr
    assert "no Triton" in (tmp_path / "sweep_compile.md").read_text()
    assert not list(tmp_path.glob("results/sweep/compile/*/*_r1.json"))


# --- fp16's loss scale on a T4 -------------------------------------------------------------------------
@pytest.mark.parametrize("fused", [False, True])
def test_the_steps_a_grad_scaler_skipped_are_its_own_verdict(fused):
    """Not a count of optimizer.step() calls: a fused optimizer is always stepped (it skips inside its
    kernel), and a step captured in a CUDA graph replays with no Python step at all, which counted
    that way read as every step skipped."""
    from common.measure import trainstate

    logged = []
    skips = trainstate.ScalerSkips(lambda: len(logged))
    try:
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused)
        scaler = torch.amp.GradScaler("cpu")
        for scale in (1e35, 1.0, 1e35, 1.0, 1.0):  # an overflow at steps 0 and 2
            loss = model(torch.randn(8, 4)).pow(2).mean() * scale
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            logged.append(loss)
        assert skips.steps() == [0, 2]
        plain = torch.amp.GradScaler("cpu", enabled=False)  # bf16 or fp32: a disabled scaler skips nothing
        plain.step(optimizer)
        assert skips.steps() == [0, 2]
    finally:
        skips.close()
    assert torch.amp.GradScaler.step.__qualname__ == "GradScaler.step"


def _twins(fast_losses, skipped, probe_skipped=0):
    slow = run_result(losses=[2.3 - 0.01 * i for i in range(40)], batch_size=256)
    fast = run_result(losses=fast_losses, variant="fast", batch_size=256)
    fast.skipped_steps, fast.probe_skipped = skipped, probe_skipped
    return slow, fast


RULE = {"what": "training loss", "early_steps": 5, "early_rtol": 0.03, "at_batch": 16, "window": 10, "rtol": 0.05}


def test_a_loss_scale_calibrating_is_compared_by_update_count():
    from common.analysis.aggregate import by_updates, parity

    behind = [2.3, 2.3, 2.3] + [2.3 - 0.01 * i for i in range(1, 38)]  # steps 0, 1 made no update
    assert by_updates(behind, [0, 1]) == [2.3 - 0.01 * i for i in range(38)]
    par = parity(*_twins(behind, [0, 1]), RULE)
    assert par.ok and par.early_skipped and par.skipped_steps == [0, 1] and par.early_steps == 0
    assert par.max_rel == pytest.approx(0.0, abs=1e-9) and par.probe_max_rel is None


@pytest.mark.parametrize("skipped", [list(range(20)), [0, 40]], ids=["too many", "too late"])
def test_a_loss_scale_that_never_settles_fails_parity(skipped):
    from common.analysis.aggregate import parity, parity_failure

    par = parity(*_twins([2.3] * 40, skipped), RULE)
    assert not par.ok and "never settles" in parity_failure(par)


@pytest.mark.parametrize("workload, sizes", [("churn", ()), ("resnet18", ("--image-size", "32", "--batch-size", "2")),
                                             ("gpt", ())])
def test_the_amp_pairs_as_a_t4_runs_them_fp16_with_a_grad_scaler(tmp_path, workload, sizes):
    """The branch the seeds' GPU takes, which no bf16 machine runs: fp16 autocast, GradScaler (its inf
    check a host sync per step), its first updates skipped while the scale calibrates, parity kept.
    ResNet-18 at its smallest: a CPU has no fast fp16 convolution (7 s a step at the smoke size)."""
    proc = run_module("common.runners.compare", "amp", "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--workloads", workload, "--reports-dir", str(tmp_path), *(("--", *sizes) if sizes else ()),
                      env={"COOKBOOK_DEVICE_PROFILE": "T4"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    comparison = json.loads((tmp_path / "results" / "amp" / "comparison.json").read_text())
    assert list(comparison["workloads"]) == [workload]
    for pair, entry in comparison["workloads"].items():
        fast = entry["fast"]
        assert entry["parity"]["ok"], (pair, entry["parity"])
        assert fast["env"]["profile"]["name"] == "Tesla T4" and fast["env"]["profile"]["simulated"]
        mm = {op["dtype"] for op in fast["evidence"]["roofline"]["ops"] if op["kind"] in ("matmul", "convolution")}
        assert "float16" in mm and "bfloat16" not in mm, (pair, mm)
        assert fast["evidence"]["syncs_per_step"] >= 1 > entry["slow"]["evidence"]["syncs_per_step"]
    assert "Tesla T4 (sm_75, simulated)" in (tmp_path / "amp.md").read_text()
