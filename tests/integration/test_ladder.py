"""`make ladder` in smoke mode on the churn ladder: every rung runs, keeps parity with the naive rung 0,
and changes what it says it changes against the rung below. The ResNet-18 ladder (12 rungs, four of them
compiled: minutes of a CPU) is checked as units: each rung switches on its own technique and no other,
and each technique makes the change its rung declares (its metrics are the recipes' own: see WHERE)."""
import re

import pytest

import ladder
from common.analysis import metrics
from common.analysis.results import read_result
from common.analysis.results_compare import LadderSummary
from common.analysis.results_run import Config
from ladder import techniques

from conftest import REPO, run_module

pytestmark = pytest.mark.xdist_group("ladder")  # one worker builds the module fixture once

CLIMBED = "churn"
# the test of tests/integration/test_recipes.py whose smoke run asserts each metric a ResNet-18 rung declares
WHERE = {"worker_cpu_ms_per_step": "test_loader_work_moves_out_of_the_training_process",
         "syncs_per_step": "test_host_reads_per_step_drop_to_zero",
         "optimizer_ops": "test_fused_adam_calls_far_fewer_ops",
         "forward_ops": "test_compiled_graph_calls_fewer_ops_and_pays_on_the_first_step"}


@pytest.fixture(scope="module")
def climbed(tmp_path_factory):
    reports = tmp_path_factory.mktemp("ladder")
    proc = run_module("common.runners.climb", CLIMBED, "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--reports-dir", str(reports), timeout=1500)
    return proc, reports


def summary(reports, workload) -> LadderSummary:
    return read_result(reports / "results" / "ladder" / f"{workload}.json", LadderSummary)


def test_every_rung_runs_and_passes_parity_against_the_naive_one(climbed):
    proc, reports = climbed
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spec = ladder.LADDERS[CLIMBED]
    rungs = summary(reports, CLIMBED).rungs
    assert [r.id for r in rungs] == spec.ids
    assert all(r.status == "ok" for r in rungs)
    assert rungs[0].parity is None and all(r.parity.ok for r in rungs[1:])
    md = (reports / f"ladder_{CLIMBED}.md").read_text()
    assert md.count("| ok") == len(rungs) - 1 and "not a GPU result" in md and "Not checked" in md
    assert "| samples/s (95% interval) |" in md  # the workload's own unit (a GPT's ladder says tokens/s)
    assert "| at the roofline |" in md and md.count(" ms (") >= len(rungs)  # each rung's distance to the limit
    assert all(f"(`{i}`)" in md for i in spec.ids)


def test_every_rung_changes_what_it_says_against_the_rung_below(climbed):
    """Each rung declares what its technique moves (ladder.RungSpec.changes): a metric, the config,
    or a fact the script observed. Checked against the rung below, on this CPU run."""
    _, reports = climbed
    checked = 0
    rungs = summary(reports, CLIMBED).rungs
    for below, rung, rs in zip(rungs, rungs[1:], ladder.LADDERS[CLIMBED].rungs[1:]):
        a, b = below.aggregate, rung.aggregate
        assert rs.changes, f"rung {rs.id} declares no change"
        for kind, key, want in rs.changes:
            if kind == "metric":
                x, y = metrics.get(key).value(a), metrics.get(key).value(b)
                assert x is not None and y is not None, (rs.id, key)
                assert (y < x) if want == "down" else (y > x), (rs.id, key, x, y)
            elif kind == "config":
                assert getattr(b.config, key) > getattr(a.config, key), (rs.id, key)
            else:
                assert b.extra["observed"][key] == want != a.extra["observed"].get(key), (rs.id, key)
            checked += 1
    assert checked >= 7


def test_the_same_requests_give_the_same_answers_on_every_rung(climbed):
    """Churn serves the same requests with the same weights on every rung: only the speed may differ."""
    _, reports = climbed
    for r in summary(reports, CLIMBED).rungs[1:]:
        assert r.parity.max_rel <= 1e-4, r.name


def test_syncs_leave_at_their_rung(climbed):
    _, reports = climbed
    syncs = [r.aggregate.evidence.syncs_per_step for r in summary(reports, CLIMBED).rungs]
    assert syncs[1] >= 1 and all(s == 0 for s in syncs[2:]), syncs


def test_speedups_are_against_rung_0_and_the_rung_below(climbed):
    _, reports = climbed
    rungs = summary(reports, CLIMBED).rungs
    assert rungs[-1].cumulative == pytest.approx(
        rungs[-1].aggregate.throughput_per_s / rungs[0].aggregate.throughput_per_s)
    per_sample = lambda r: r.aggregate.step_ms / r.aggregate.config.batch_size  # noqa: E731
    for below, rung in zip(rungs, rungs[1:]):
        assert rung.incremental.ratio == pytest.approx(per_sample(below) / per_sample(rung))


# --- every ladder, as units --------------------------------------------------------------------
@pytest.mark.parametrize("workload", list(ladder.LADDERS))
def test_each_rung_switches_on_its_own_technique_and_no_other(workload):
    ids = ladder.LADDERS[workload].ids
    for i in range(1, len(ids)):
        now, below = ladder.switches(workload, i), ladder.switches(workload, i - 1)
        assert [t for t in ids[1:] if now(t) != below(t)] == [ids[i]], (workload, ids[i])


@pytest.mark.parametrize("workload", list(ladder.LADDERS))
def test_each_rung_declares_a_change_that_can_be_checked(workload):
    """A metric the registry has, a config field, or a fact the script records in run.extra["observed"]."""
    spec = ladder.LADDERS[workload]
    script = (REPO / (spec.script.replace(".", "/") + ".py")).read_text()
    observed = set(re.findall(r'"(\w+)":', script[script.index('run.extra["observed"]'):]))
    for rs in spec.rungs[1:]:
        assert rs.changes, f"{workload} rung {rs.id} declares no change"
        for kind, key, _ in rs.changes:
            if kind == "metric":
                assert metrics.get(key), (rs.id, key)
            elif kind == "config":
                assert key in Config.__dataclass_fields__, (rs.id, key)
            else:
                assert kind == "observed" and key in observed, (rs.id, key, observed)


def test_each_resnet18_technique_makes_its_declared_change():
    """In this process, on a CPU: what each rung observes once its technique is on, and for a declared
    metric, the recipe whose smoke run asserts that metric moves."""
    import torch

    from recipes.dataloader import workers

    declared = {key: want for rs in ladder.LADDERS["resnet18"].rungs for kind, key, want in rs.changes
                if kind == "observed"}
    import types

    from common.analysis import device

    cpu = torch.device("cpu")
    model = techniques.apply_channels_last(torch.nn.Conv2d(3, 4, 3))
    x = techniques.channels_last_input(torch.randn(2, 3, 8, 8))
    assert x.is_contiguous(memory_format=torch.channels_last) == declared["channels_last"]
    for profile in (device.cpu("test"), device.SIMULATED["T4"]):  # bf16 here, fp16 as a T4 chooses
        run = types.SimpleNamespace(device=cpu, profile=profile)
        with techniques.autocast(run, True):
            assert (model(x).dtype != torch.float32) == declared["autocast_16bit"]
            assert str(model(x).dtype) == f"torch.{profile.amp_dtype}"
        with techniques.autocast(run, False):
            assert model(x).dtype == torch.float32
    saved = torch.backends.cudnn.benchmark
    try:
        techniques.apply_cudnn_benchmark(True)
        assert torch.backends.cudnn.benchmark == declared["cudnn_benchmark"]
    finally:
        torch.backends.cudnn.benchmark = saved
    compiled = techniques.apply_compile(model, declared["compile_mode"])  # compiles lazily: nothing runs here
    assert (compiled is not model) == declared["compiled"]
    assert declared["loader_workers"] == 0 < workers()
    fused = techniques.adam(model.parameters(), cpu, fused=True, lr=1e-4)
    assert fused.defaults["foreach"] and not techniques.adam(model.parameters(), cpu, fused=False,
                                                             lr=1e-4).defaults["foreach"]
    recipe_tests = (REPO / "tests" / "integration" / "test_recipes.py").read_text()
    for rs in ladder.LADDERS["resnet18"].rungs:
        for kind, key, _ in rs.changes:
            if kind == "metric":
                assert f"def {WHERE[key]}(" in recipe_tests, (rs.id, key)


def test_each_gpt_technique_makes_its_declared_change(dynamo_counters_kept):
    """In this process, on a CPU: the GPT ladder's techniques, each against the rung below. Its climb compiles a
    GPT (a minute of a CPU), so it is checked as units; `make ladder` climbs it (ladder/gpt_training.py)."""
    import types

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from common.analysis import device
    from common.workloads import gpt

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            self.count += 1
            return func(*args, **(kwargs or {}))

    def forward_ops(attention):
        torch.manual_seed(0)
        net = gpt.GPT(65, 64, 2, 2, 32, attention)
        with Ops() as ops:
            net(torch.randint(65, (2, 64)))
        return ops.count

    declared = {key: want for rs in ladder.LADDERS["gpt"].rungs for kind, key, want in rs.changes
                if kind == "observed"}
    assert forward_ops(gpt.causal_attention) < forward_ops(techniques.attention_by_hand)  # the sdpa rung
    from common.measure import tf32

    saved = tf32.state()
    try:
        techniques.apply_tf32(True)
        assert tf32.state()[0] == declared["tf32"]
        assert torch.get_float32_matmul_precision() == "high"  # the old API reads it too, and does not raise
        techniques.apply_tf32(False)
        assert tf32.state()[0] is False and torch.get_float32_matmul_precision() == "highest"
    finally:
        tf32.set_tf32(saved[0])
    net = gpt.GPT(65, 16, 2, 2, 16)
    for profile in (device.cpu("test"), device.SIMULATED["T4"]):  # bf16 here; fp16 and a loss scale on a T4
        run = types.SimpleNamespace(device=torch.device("cpu"), profile=profile)
        with techniques.autocast(run, True):
            logits = net(torch.randint(65, (1, 16)))
        assert (logits.dtype != torch.float32) == declared["autocast_16bit"]
        assert str(logits.dtype) == f"torch.{profile.amp_dtype}"
        assert techniques.grad_scaler(run, enabled=True).is_enabled() == (profile.amp_dtype == "float16")
    # what each GPU class climbs: no TF32 below sm_80, no Inductor below sm_70 (common.analysis.device)
    assert ladder.skipped("gpt", device.SIMULATED["T4"]).keys() == {"tf32"}
    assert ladder.skipped("gpt", device.SIMULATED["P100"]).keys() == {"tf32", "compile"}
    assert ladder.skipped("gpt", device.SIMULATED["H100"]) == {}
    assert ladder.skipped("gpt", device.cpu("test")).keys() == {"tf32"}
    before = techniques.graphs_compiled()
    techniques.compile_blocks(net.blocks)  # compiles lazily: nothing is captured until a block runs
    assert techniques.graphs_compiled() == before
    with torch.compiler.set_stance("force_eager"):  # the stance the counted step runs under: still nothing
        net(torch.randint(65, (1, 16)))
    assert techniques.graphs_compiled() == before
    torch.compile(lambda t: t + 1, backend="eager")(torch.ones(2))  # a captured graph counts (eager: no C++)
    assert techniques.graphs_compiled() == before + 1
    cpu = torch.device("cpu")
    assert techniques.adamw(net.parameters(), cpu, fused=True, lr=1e-3).defaults["foreach"]
    assert not techniques.adamw(net.parameters(), cpu, fused=False, lr=1e-3).defaults["foreach"]
    # the rung's CUDA branch: one fused kernel, no foreach (torch also builds a fused AdamW over CPU tensors)
    on_gpu = techniques.adamw(net.parameters(), torch.device("cuda"), fused=True, lr=1e-3).defaults
    assert on_gpu["fused"] and not on_gpu["foreach"]
    script = (REPO / "ladder" / "gpt_training.py").read_text()
    assert '"compiled": graphs_compiled() >= 1' in script  # the script observes what Dynamo captured


def test_incremental_speedup_is_against_the_rung_below_even_after_a_failure():
    """Not against the last rung that ran: after a failed rung, that is two below."""
    from common.runners.climb import summarize

    from tests_helpers import run_result

    runs = {0: [run_result(ms=10.0)], 2: [run_result(ms=5.0)]}  # rung 1 failed
    table = summarize("churn", runs, [], 1, "cpu", "test").rungs
    assert table[1].status == "failed" and table[2].incremental is None and table[2].cumulative == 2.0


def test_unknown_ladder_and_rung_are_one_line():
    proc = run_module("common.runners.climb", "gpt2")
    assert proc.returncode == 2 and "no ladder for gpt2" in proc.stderr and proc.stderr.count("\n") == 1
    proc = run_module("ladder.churn_serving", "--rung", "warp_drive", "--smoke")
    assert proc.returncode == 2 and "no rung 'warp_drive'" in proc.stderr and proc.stderr.count("\n") == 1


def test_techniques_are_switched_by_id_and_an_unknown_id_raises():
    on = ladder.switches("resnet18", ladder.rung_index("resnet18", "channels_last"))
    assert on("loader_workers") and on("channels_last") and not on("amp")
    with pytest.raises(KeyError, match="no technique 'warp_drive'"):
        on("warp_drive")
    assert ladder.rung_index("resnet18", "3") == 3


def test_fp16_gets_a_grad_scaler_bf16_does_not(monkeypatch):
    import types

    import torch

    from common.analysis import device

    made = []
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device, enabled: made.append((device, enabled)))
    cpu = types.SimpleNamespace(device=torch.device("cpu"), profile=device.cpu("test"))
    t4 = types.SimpleNamespace(device=torch.device("cuda"), profile=device.SIMULATED["T4"])
    h100 = types.SimpleNamespace(device=torch.device("cuda"), profile=device.SIMULATED["H100"])
    techniques.grad_scaler(cpu, True)  # the CPU autocasts to bf16
    techniques.grad_scaler(t4, True)  # sm_75: fp16
    techniques.grad_scaler(t4, False)  # a rung below AMP
    techniques.grad_scaler(h100, True)  # sm_90: bf16
    assert made == [("cpu", False), ("cuda", True), ("cuda", False), ("cuda", False)]
    assert [techniques.amp_dtype(r) for r in (cpu, t4, h100)] == [torch.bfloat16, torch.float16, torch.bfloat16]


def test_targets_are_checked_only_on_a_gpu_run_and_say_by_how_much():
    from common.analysis.aggregate import aggregate
    from common.analysis.results_compare import Rung
    from common.render.ladder import _targets

    from tests_helpers import run_result

    def rung(i, median_ms, batch, cumulative, rid=None):
        agg = aggregate([run_result(ms=median_ms, batch_size=batch)])
        return Rung(index=i, id=rid or f"r{i}", name="x", adds="", status="ok", aggregate=agg, cumulative=cumulative)

    gpu = LadderSummary(workload="resnet18", what="", mode="cuda", command="", failures=[],
                        rungs=[rung(0, 64.0, 32, 1.0), rung(1, 32.0, 256, 16.0)])
    text = "\n".join(_targets(gpu))
    assert "8,000 images/s: missed (2.25x short)" in text and "cumulative speedup 16.0x: missed (36x wanted)" in text
    churn = LadderSummary(workload="churn", what="", mode="cuda", command="", failures=[],
                          rungs=[rung(0, 2.0, 512, 1.0), rung(1, 0.3, 512, 6.7, "cuda_graphs"),
                                 rung(2, 0.1, 512, 20.0, "hand_graph")])
    text = "\n".join(_targets(churn))
    assert "p99/median 1.01: met" in text and "3.00x: missed (1.2x wanted)" in text and "20.0x: met" in text
    gpu.mode = "cpu"
    assert "Not checked" in "\n".join(_targets(gpu))


def test_a_rung_throughput_has_an_interval_over_processes():
    from common.analysis import stats

    lo, hi = stats.level_interval([1000.0, 1100.0, 1050.0])
    assert lo < 1048 < hi and stats.level_interval([1000.0]) is None


def test_the_gpt_target_is_llm_c_s_rate_of_model_flops_for_the_gpus_class():
    import types

    def rows(gpu, tokens_s, per_token=5e8):
        env = types.SimpleNamespace(gpu_name=gpu)
        agg = types.SimpleNamespace(throughput_per_s=tokens_s, extra={"flops_per_token": {"total": per_token}}, env=env)
        return [types.SimpleNamespace(aggregate=agg)]

    judge = ladder.LADDERS["gpt"].judge
    assert round(ladder.GPT_TFLOPS["H100"]) == 396 and round(ladder.GPT_TFLOPS["A100"]) == 198
    assert judge(rows("NVIDIA H200", 800_000)) == [
        "  - last rung: 800,000 tokens/s, 400 TFLOP/s of model FLOPs: met"]
    assert judge(rows("NVIDIA A100-SXM4-80GB", 200_000))[0].endswith("missed (1.98x short of llm.c's 198 on an A100)")
    assert judge(rows("Tesla T4", 20_000))[0].endswith("no published figure for Tesla T4; not judged")
