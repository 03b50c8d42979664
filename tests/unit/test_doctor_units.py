"""The doctor's parts without a child process: its reading of settings from a trace, its verdict and
gains on hand-made observations, its report's name, and the recipe figures it quotes."""
import torch

from common.analysis import doctor, figures
from common.analysis.results_doctor import LoaderSettings, Observation, OpsSeen
from common.analysis.results_run import Evidence, PhaseEvidence
from common.measure import settings
from common.measure.profiling import profiler
from common.render import doctor as render

from conftest import REPO
from tests_helpers import run_result


def _traced(tmp_path, step, steps=2):
    with profiler(tmp_path, "t", torch.device("cpu"), steps) as prof:
        for _ in range(steps + 1):
            step()
            prof.step()
    return prof.trace_path


def test_settings_are_read_from_the_ops_a_step_runs(tmp_path):
    conv, head = torch.nn.Conv2d(3, 8, 3), torch.nn.Linear(8 * 6 * 6, 4)
    params = [*conv.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, foreach=False)
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = head(conv(x).flatten(1)).float().pow(2).mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()

    seen = settings.read(_traced(tmp_path, step))
    assert seen.matmul_dtypes == {"bfloat16": 3.0}  # addmm read past its bias; backward's two mm
    assert seen.conv_dtypes == {"bfloat16": 1.0}
    assert seen.conv_layouts == {"channels_last": 1.0}
    assert seen.optimizer == "for-loop" and seen.zero_grad == "zeroes"

    opt = torch.optim.Adam(params, foreach=True)

    def plain():
        loss = head(conv(x.contiguous()).flatten(1)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    seen = settings.read(_traced(tmp_path, plain))
    assert seen.matmul_dtypes == {"float32": 3.0} and seen.conv_layouts == {"NCHW": 1.0}
    assert seen.optimizer == "foreach" and seen.zero_grad == "set_to_none"


def test_attention_by_hand_is_a_softmax_over_t_by_t_scores_between_batched_matmuls_and_sdpa_is_not(tmp_path):
    q = torch.randn(2, 4, 32, 8, requires_grad=True)

    def by_hand():  # nanoGPT's fallback: scores, causal mask, softmax, weighted sum
        scores = (q @ q.transpose(-2, -1)) * 8 ** -0.5
        future = torch.ones(32, 32, dtype=torch.bool).triu(1)
        (torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ q).sum().backward()

    def fused():
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()

    def math():  # SDPA's unfused fallback (float64, a mask no fused kernel takes): its _softmax is SDPA's
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()

    def classifier():  # batched matmuls, then a softmax over (batch, classes): no T x T scores, no attention
        (torch.softmax((q @ q.transpose(-2, -1)).flatten(1) @ torch.ones(4096, 10), dim=-1)).sum().backward()

    seen = settings.read(_traced(tmp_path, by_hand))
    assert (seen.hand_attention, seen.hand_attention_t) == (1.0, 32)
    for step in (fused, math, classifier):
        seen = settings.read(_traced(tmp_path, step))
        assert (seen.hand_attention, seen.hand_attention_t) == (None, None), step.__name__
    gains = doctor.read(_observation(data=0.01, forward=0.95, ops=OpsSeen(
        matmul_dtypes={"bfloat16": 6.0}, optimizer="fused", hand_attention=12.0, hand_attention_t=1024))).gains
    assert [(g.kind, g.recipes) for g in gains] == [("fused attention", ["attention"])]
    assert "12 softmaxes per step over 1024 x 1024 scores" in gains[0].says


def test_the_batch_size_is_the_first_dimension_of_the_first_tensor():
    assert settings.batch_size_of((torch.zeros(7, 3), torch.zeros(7))) == 7
    assert settings.batch_size_of({"ids": [torch.zeros(5, 2)]}) == 5
    assert settings.batch_size_of(("text", 3)) is None


def _observation(device="cpu", data=0.0, forward=0.5, idle_busy=None, ops=None, loaders=(), flags=None):
    from common.analysis import stats

    r = run_result(ms=10.0, device=device)
    r.timing.phase_ms = {"data": stats.summarize([data * 10.0], 1), "forward": stats.summarize([forward * 10.0], 1)}
    r.evidence = Evidence(trace="t", profiled_steps=3, ops_per_step=100, syncs_per_step=0.0, sync_ops_per_step={},
                          sync_ms_per_step=0.0, kernels_per_step=70 if device == "cuda" else None,
                          gpu_idle_share=0.9 if device == "cuda" else None,
                          gpu_busy_ms_per_step=1.0 if device == "cuda" else None, launch_ms_per_step=None,
                          idle_host_busy_ms_per_step=idle_busy, profiled_step_ms=10.0, sync_apis_per_step=None,
                          memcpy_per_step=None, phases={"forward": PhaseEvidence(1.0, 10, None, None)}, views=None)
    return Observation(script="/x/train.py", argv=[], step="optimizer", steps_seen=20, ended="stopped",
                       stage="measured", optimizers=["Adam"], loaders=list(loaders), result=r, ops=ops,
                       optimizer_flags=flags or {"Adam": {"foreach": None, "fused": None}})


def test_time_outside_the_phases_is_a_finding_when_it_is_large():
    v = doctor.read(_observation(data=0.1, forward=0.3))  # 60% of the step in the script's own code
    assert v.diagnosis.findings[0].kind == "outside the phases"
    assert v.headline.startswith("60% of the step") and v.headline.endswith("(CPU run)")
    assert v.diagnosis.components[-1].phase == "rest of the step"
    assert doctor.rest_finding(_observation(data=0.1, forward=0.85)) is None


def test_a_headline_over_uneven_steps_says_its_shares_are_unsure_and_why():
    from common.analysis import stats

    steady = _observation(data=0.1, forward=0.3)
    assert "varied by CV" not in doctor.read(steady).headline
    uneven = _observation(data=0.1, forward=0.3)
    uneven.result.timing.summary = stats.summarize([1.0, 19.0] * 10, 20)  # CV 0.9, mean 10 ms as before
    said = doctor.read(uneven).headline
    assert said.startswith("60% of the step") and "(CPU run); but its step times varied by CV 9" in said
    assert said.endswith("(loader stalls, work every N steps)")


def test_the_gains_come_from_the_settings_seen_and_say_when_they_are_gpu_gains():
    ops = OpsSeen(matmul_dtypes={"float32": 6.0}, conv_dtypes={"float32": 20.0}, conv_layouts={"NCHW": 20.0},
                  optimizer="for-loop", zero_grad="zeroes")
    loader = LoaderSettings(batch_size=32, num_workers=0, pin_memory=False, persistent_workers=False)
    cpu = doctor.read(_observation(data=0.5, forward=0.5, ops=ops, loaders=[loader]))
    kinds = [g.kind for g in cpu.gains]
    # a for-loop on a CPU is torch's default there, and the same code runs foreach on CUDA: no gain
    assert kinds == ["16-bit", "channels_last", "set_to_none", "DataLoader settings"]
    built = doctor.read(_observation(data=0.5, forward=0.5, ops=ops, flags={"Adam": {"foreach": False}}))
    assert "fused optimizer" in [g.kind for g in built.gains]  # built for-loop: a GPU would run it so too
    assert "a GPU gain" in cpu.gains[0].says and "TF32" not in kinds  # TF32 needs CUDA to matter
    gpu = doctor.read(_observation(device="cuda", data=0.02, forward=0.9, idle_busy=5.0, ops=ops))
    kinds = [g.kind for g in gpu.gains]
    assert "TF32" in kinds and "compile / CUDA graphs" in kinds  # host-bound: launch overhead 50%
    assert gpu.diagnosis.findings[0].kind == "launch overhead" and "(CPU run)" not in gpu.headline
    assert not any("a GPU gain" in g.says for g in gpu.gains)
    assert not gpu.blind or "No GPU" not in gpu.blind[0]
    clean = doctor.read(_observation(data=0.01, forward=0.95, ops=OpsSeen(matmul_dtypes={"bfloat16": 6.0},
                                                                          optimizer="fused")))
    assert clean.gains == []


def test_two_scripts_of_one_name_in_two_folders_get_two_reports(tmp_path):
    a, b = tmp_path / "a" / "main.py", tmp_path / "b" / "main.py"
    assert render.report_name(a) != render.report_name(b)
    assert render.report_name(a) == render.report_name(tmp_path / "a" / ".." / "a" / "main.py")
    assert render.report_name(a).startswith("doctor_main_")
    # inside the repository, by its path there: the same name on every machine (the committed example)
    import hashlib

    key = hashlib.sha256(b"baselines/resnet18_cifar10.py").hexdigest()[:6]
    assert render.report_name(REPO / "baselines" / "resnet18_cifar10.py") == f"doctor_resnet18_cifar10_{key}"


def test_the_report_renders_a_gpu_observation_with_recipe_figures(tmp_path):
    from common.analysis.results_run import KindView, OpView, OpViews

    obs = _observation(device="cuda", data=0.02, forward=0.9, idle_busy=5.0, ops=OpsSeen(optimizer="fused"))
    empty = OpView(key="self_device_us", rows=[])
    obs.result.evidence.views = OpViews(device_time=empty, self_memory=empty, cpu_time=empty, calls=empty,
                                        by_kind=KindView(key="self_device_us", rows=[]))
    v = doctor.read(obs)
    found = {"cuda_graphs": figures.Figure(recipe="cuda_graphs", source="cuda_graphs.md", device="H100",
                                           device_type="cuda", date="2026-12-01", commit="abc",
                                           pairs={"churn": {"ratio": 3.2, "low": 3.0, "high": 3.4,
                                                            "verdict": "faster"}},
                                           regimes={"churn": ("batch", "pays off from batch 64 up", "cuda")})}
    md = render.render_markdown(obs, v, found, "make doctor SCRIPT=x")
    assert md.splitlines()[2] == f"Headline: {v.headline}"
    assert ("[`cuda_graphs`](../recipes/cuda_graphs/README.md): measured churn: 3.20x faster (95% interval 3.00-3.40) "
            "([report](cuda_graphs.md): H100, 2026-12-01; this version); churn: pays off from batch 64 up "
            "([sweep](sweep_cuda_graphs.md))") in md
    assert "[`compile`](../recipes/compile/README.md): not measured on a GPU yet (`make recipe-compile`)" in md


def test_recipe_figures_are_read_back_from_the_reports_facts_line_else_the_archive(tmp_path):
    facts = {"kind": "recipe", "recipe": "amp", "smoke": False, "device": "NVIDIA H100", "device_type": "cuda",
             "date": "2026-12-01", "commit": "abc",
             "pairs": {"resnet18": {"ratio": 1.5, "low": 1.4, "high": 1.6, "verdict": "faster", "batch_size": 256}}}
    (tmp_path / "amp.md").write_text("# amp\n\ntext\n" + figures.comment(facts) + "\n")
    sweep = {"kind": "sweep", "recipe": "amp", "pair": "resnet18", "knob": "batch", "smoke": False,
             "regime": "pays off from batch 128 up", "device": "CPU (x)", "device_type": "cpu", "date": "2026-12-01",
             "commit": "abc"}
    (tmp_path / "sweep_amp.md").write_text(figures.comment(sweep) + "\n")
    archive = tmp_path / figures.ARCHIVE
    archive.mkdir(parents=True)
    for name in ("dataloader.md", "amp.md", "fused_ops.md"):
        (archive / name).write_text((REPO / "reports" / figures.ARCHIVE / name).read_text())
    found = figures.read(tmp_path, ["amp", "dataloader", "compile", "fused_ops"])
    assert found["amp"].pairs["resnet18"]["ratio"] == 1.5 and not found["amp"].older_version  # not the archive
    assert found["amp"].regimes == {"resnet18": ("batch", "pays off from batch 128 up", "cpu")}
    old = found["dataloader"]
    assert old.older_version and old.pairs["resnet18"]["ratio"] == 4.83 and old.pairs["churn"]["ratio"] == 1.23
    assert "older version" in old.label()
    assert "compile" not in found
    assert "fused_ops" not in found  # its archived pair changed three techniques at once: not this one's figure


def test_every_recipe_and_sweep_report_ends_with_its_facts_line(tmp_path):
    """The renderers write the line the doctor reads: a recipe's speedups, a sweep's regime."""
    from common.analysis.results_compare import Speedup, VariantAggregate
    from common.analysis.results_run import Memory
    from common.analysis.results_sweep import Point, SweepResult
    from common.render import sweep

    v = VariantAggregate(status="ok", config=run_result().config, env=run_result().env, data_source=None,
                         notices=[], warnings=[], step_ms=2.0, memory=Memory(kind="cpu_peak_rss", peak_mb=9.0))
    s = Speedup(ratio=1.3, low=1.2, high=1.4, method="t", processes=[3, 3], verdict="faster", floor=0.03)
    r = SweepResult(recipe="amp", title="AMP", pair="resnet18", knob="batch", flag="--batch-size", mode="cpu",
                    rounds=1, command="make sweep-amp", points=[Point(value=8, slow=v, fast=v, speedup=s)],
                    crossover="pays off over the whole range measured (batch 8 to 8)")
    sweep.render(r, tmp_path)
    facts = figures.facts_of((tmp_path / "sweep_amp.md").read_text())
    assert facts["regime"] == r.crossover and facts["device_type"] == "cpu" and facts["pair"] == "resnet18"
