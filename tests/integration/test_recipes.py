"""Every recipe end to end in smoke mode (`make recipe-<name> ARGS=--smoke`): one parametrized test that
each pair runs, keeps parity and writes its results and report; then, per recipe, what its technique
must show in the evidence. One smoke run per recipe serves all of its tests (conftest.smoke_run)."""
import json

import pytest

from common import catalog
from common.analysis import figures
from common.analysis.results import SCHEMA_VERSION
from recipes.grad_accumulation import ACCUMULATE

from conftest import NEEDS_CXX, comparison_of, run_module, suite_pairs

WORKLOADS = ("churn", "resnet18")
ACROSS_NODES = {"fsdp"}  # run end to end as two nodes instead (tests/integration/test_nodes.py)


@pytest.mark.parametrize("recipe", [pytest.param(r, marks=[pytest.mark.recipe(r)] + ([NEEDS_CXX] if catalog.compiles(r)
                                                                                   else []))
                                    for r in catalog.stepped() if r not in ACROSS_NODES])
def test_every_recipe_runs_end_to_end_and_keeps_parity(recipe, smoke_run):
    proc, reports = smoke_run(recipe)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = comparison_of(reports, recipe)
    assert comparison["schema_version"] == SCHEMA_VERSION and not comparison["failures"]
    assert list(comparison["workloads"]) == suite_pairs(recipe)
    for pair, entry in comparison["workloads"].items():
        assert entry["parity"]["ok"], (pair, entry["parity"])
        assert entry["slow"]["process_ms"] and entry["fast"]["process_ms"]
    md = (reports / f"{recipe}.md").read_text()
    assert "not a GPU result" in md and all(f"## {pair}" in md for pair in comparison["workloads"])
    assert "parity FAILED" not in proc.stdout + proc.stderr
    facts = figures.facts_of(md)  # the line the doctor quotes the recipe from
    assert facts["recipe"] == recipe and facts["device_type"] == "cpu" and facts["smoke"]
    assert {p: f["ratio"] for p, f in facts["pairs"].items()} == {
        p: e["speedup"]["ratio"] for p, e in comparison["workloads"].items()}



@pytest.mark.recipe("amp")
def test_comparison_succeeds_with_parity(amp_smoke):
    proc, reports = amp_smoke
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = json.loads((reports / "results" / "amp" / "comparison.json").read_text())
    assert comparison["schema_version"] == SCHEMA_VERSION
    for w in WORKLOADS:
        entry = comparison["workloads"][w]
        assert entry["parity"]["ok"] and entry["parity"]["max_rel"] <= entry["parity"]["rtol"]
        assert entry["speedup"]["ratio"] > 0 and entry["speedup"]["verdict"] == "undecided"  # one process each
        assert entry["speedup"]["low"] is None and entry["slow"]["process_ms"]
    assert "parity ok" in proc.stdout and "FAILED" not in proc.stdout


@pytest.mark.recipe("amp")
def test_each_run_writes_a_complete_result(amp_smoke):
    _, reports = amp_smoke
    comparison = json.loads((reports / "results" / "amp" / "comparison.json").read_text())
    folder = reports / "results" / "amp" / comparison["results_dir"].rsplit("/", 1)[-1]
    assert folder.is_dir()
    assert not list(folder.glob("*.tmp")) and not list(folder.glob(".*"))  # atomic writes leave nothing behind
    for w in WORKLOADS:
        for v in ("slow", "fast"):
            r = json.loads((folder / f"{w}_{v}_r1.json").read_text())
            assert r["status"] == "ok" and r["warnings"] == []
            assert r["schema_version"] == SCHEMA_VERSION and (r["recipe"], r["workload"], r["variant"]) == ("amp", w, v)
            t = r["timing"]
            assert t["summary"]["n"] == r["config"]["steps"] == len(t["step_ms"]) and t["summary"]["median_ms"] > 0
            assert {"mean_ms", "std_ms", "cv", "p95_ms", "p99_ms", "min_ms", "throughput_per_s"} <= set(t["summary"])
            assert t["warmup_s"] > 0 and 0 <= t["data_wait_share"] <= 1
            assert r["memory"]["peak_mb"] > 0 and r["memory"]["kind"] == "cpu_peak_rss"
            assert r["type"] == "RunResult" and r["pair"] == w
            assert r["data_source"]["kind"] == "synthetic"
            # warm-up, timed, profiled (+1 profiler warm-up step), and the FLOP-counted step
            steps = r["config"]["warmup"] + r["config"]["steps"] + r["config"]["profile_steps"] + 1 + 1
            assert len(r["losses"]) == steps
            assert r["flops_per_step"] > 0
            assert r["env"]["device_type"] == "cpu"
            ev = r["evidence"]
            assert ev["profiled_steps"] == r["config"]["profile_steps"] and ev["ops_per_step"] > 0
            assert set(ev["views"]) == {"device_time", "self_memory", "cpu_time", "calls", "by_kind"}
            assert all(ev["views"][k]["rows"] for k in ev["views"])


@pytest.mark.recipe("amp")
def test_report_has_environment_tables_evidence_and_diffs(amp_smoke):
    _, reports = amp_smoke
    md = (reports / "amp.md").read_text()
    assert "CPU" in md and "not a GPU result" in md and "smoke" in md
    assert "synthetic" in md and "not real data" in md
    for w in catalog.workloads("amp"):
        assert f"## {w}" in md
        assert f"[side by side](amp_{w}_diff.html)" in md
        assert (reports / f"amp_{w}_diff.html").read_text().count("<table") >= 1
        assert f"+++ {w}_fast.py" in md
    for title in ("self memory", "CPU time", "call count"):
        assert md.count(title) >= 2
    pairs = len(catalog.workloads("amp"))  # churn, resnet18 and gpt
    assert md.count(": per-process mean steps ") == 2 * pairs
    assert md.count("Parity of the training loss (passed)") == pairs
    assert md.count("no interval (1 process each") == pairs and "nothing to read: HTA reads GPU traces" in md
    assert "make tensorboard" in md and "127.0.0.1:6006" in md
    assert (reports / "amp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # each twin's ops under this CPU's measured ceilings, and what the technique changed in the trace
    assert md.count("### How far each op is from the limit (roofline)") == pairs and "memory " in md
    assert md.count("- slow: at the roofline its modelled ops would take") == pairs
    assert "| `aten::mm` | bfloat16 |" in md and "| `aten::convolution` | float32 |" in md
    assert md.count("### What the technique changed in the trace") == pairs


@pytest.mark.recipe("amp")
def test_traces_written_per_variant(amp_smoke):
    _, reports = amp_smoke
    for w in WORKLOADS:
        for v in ("slow", "fast"):
            trace = reports / "traces" / "amp" / f"{w}_{v}" / f"{w}_{v}.pt.trace.json"
            events = json.loads(trace.read_text())["traceEvents"]
            assert any(str(e.get("name", "")).startswith("ProfilerStep#") for e in events)
            assert any(e.get("name") == "forward" for e in events)  # the harness's phase ranges
            assert "<svg class=breakdown" in trace.with_name(f"{w}_{v}.html").read_text()  # the run's own page
    md = (reports / "amp.md").read_text()
    for w in WORKLOADS:  # each pair's page of its two traces, linked from the report, drawn from them
        link = f"[{w}.html](traces/amp/{w}.html)"
        assert f"- {w}, slow and fast side by side in one page that needs no network: {link}" in md
        assert f"{w}_fast.pt.trace.json`, its page `" in md and f"traces/amp/{w}_fast/{w}_fast.html`" in md
        page = (reports / "traces" / "amp" / f"{w}.html").read_text()
        assert page.count("<div class=col>") == 2 and "aten::" in page and "<svg class=breakdown" in page


@pytest.mark.recipe("amp")
def test_amp_changes_precision_not_the_arithmetic(amp_smoke):
    """The same FLOPs per step in both twins: AMP makes each one cheaper, not fewer."""
    _, reports = amp_smoke
    comparison = json.loads((reports / "results" / "amp" / "comparison.json").read_text())
    for w in WORKLOADS:
        entry = comparison["workloads"][w]
        assert entry["fast"]["flops_per_step"] == entry["slow"]["flops_per_step"] > 0


@pytest.mark.recipe("channels_last")
def test_channels_last_pair_passes_parity_on_resnet18_only(smoke_run):
    proc, reports = smoke_run("channels_last")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workloads = comparison_of(reports, "channels_last")["workloads"]
    assert list(workloads) == ["resnet18"]  # the MLP has no convolutions
    assert workloads["resnet18"]["parity"]["ok"]


@pytest.mark.recipe("checkpointing")
def test_checkpointing_pairs_pass_parity(smoke_run):
    proc, reports = smoke_run("checkpointing")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = comparison_of(reports, "checkpointing")
    for w in WORKLOADS:
        par = comparison["workloads"][w]["parity"]
        assert par["ok"] and par["early_max_rel"] <= 0.001  # the same arithmetic, replayed
    md = (reports / "checkpointing.md").read_text()
    # each twin asked for its allocator snapshot (MEMORY_SNAPSHOT): on a CPU, one line that says it needs CUDA
    assert "- Notice: --memory-snapshot: the allocator's snapshot needs CUDA" in md
    assert md.count("**GFLOP per step (FlopCounterMode)**") == 2 and "checkpoint" in md


@pytest.mark.recipe("checkpointing")
def test_checkpointing_recomputes_what_it_drops(smoke_run):
    """FlopCounterMode over one training step. Churn checkpoints whole segments, so its forward runs
    twice: a training step is about 3 forwards' worth (the backward costs two), +20-40%. ResNet-18
    saves its convolutions' outputs and recomputes only BatchNorm, ReLU and pooling, which count
    almost no FLOPs: its cost is memory traffic, not arithmetic."""
    _, reports = smoke_run("checkpointing")
    workloads = comparison_of(reports, "checkpointing")["workloads"]
    ratio = {w: e["fast"]["flops_per_step"] / e["slow"]["flops_per_step"] for w, e in workloads.items()}
    assert 1.2 < ratio["churn"] < 1.4 and 1.0 <= ratio["resnet18"] < 1.05, ratio


@pytest.mark.recipe("checkpointing")
def test_the_memory_budget_needs_cuda_and_the_report_says_so(smoke_run):
    _, reports = smoke_run("checkpointing")
    budget = comparison_of(reports, "checkpointing")["budget"]
    assert budget["pair"] == "resnet18" and budget["budget_gb"] == 16
    assert "needs CUDA" in budget["note"] or "smoke" in budget["note"]
    assert "## Under a memory budget" in (reports / "checkpointing.md").read_text()


@pytest.mark.recipe("selective_checkpointing")
def test_the_selective_policy_recomputes_no_matmul_and_full_checkpointing_recomputes_the_blocks(smoke_run):
    """FlopCounterMode over one training step: checkpointing a block whole runs its forward again, about a
    third more arithmetic for the blocks; the selective policy saves every matmul's and attention's output
    and recomputes only LayerNorm, GELU, casts and adds, which count no FLOPs: the same count as no
    checkpointing at all."""
    _, reports = smoke_run("selective_checkpointing")
    pairs = comparison_of(reports, "selective_checkpointing")["workloads"]
    flops = {(p, v): pairs[p][v]["flops_per_step"] for p in ("gpt", "gpt_plain") for v in ("slow", "fast")}
    assert flops[("gpt_plain", "fast")] == pytest.approx(flops[("gpt_plain", "slow")], rel=0.001), flops
    assert flops[("gpt", "fast")] == pytest.approx(flops[("gpt_plain", "fast")], rel=0.001), flops
    assert 1.1 < flops[("gpt", "slow")] / flops[("gpt", "fast")] < 1.35, flops
    for pair in pairs.values():
        assert pair["parity"]["ok"] and pair["parity"]["early_max_rel"] <= 0.001  # the same arithmetic, replayed


@pytest.mark.recipe("compile")
@NEEDS_CXX
def test_compile_pairs_pass_parity(smoke_run):
    proc, reports = smoke_run("compile")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workloads = comparison_of(reports, "compile")["workloads"]
    churn, resnet = workloads["churn_serving"]["parity"], workloads["resnet18_fusion"]["parity"]
    assert churn["ok"] and churn["what"] == "churn probability per request"
    assert churn["max_abs"] <= 1e-4 and churn["answers_compared"] >= 64  # serving: the same function, compiled
    assert resnet["ok"] and resnet["what"] == "training loss"
    gpt = workloads["gpt"]  # regional: every block compiled in place, one graph for all of them
    assert gpt["parity"]["ok"] and gpt["fast"]["compile"]["graphs"] == 1 and gpt["fast"]["compile"]["recompiles"] == 0


@pytest.mark.recipe("compile")
@NEEDS_CXX
def test_a_planted_compiled_twin_whose_steps_update_nothing_fails_parity(tmp_path):
    """tests/integration/test_parity.py's planted frozen twin, for compile: in the smoke run's worker, so that it
    finds ResNet-18's compiled step in Inductor's cache."""
    from test_frozen import frozen_fails

    frozen_fails(tmp_path, "compile", "resnet18_fusion")


@pytest.mark.recipe("compile")
@NEEDS_CXX
def test_compiled_graph_calls_fewer_ops_and_pays_on_the_first_step(smoke_run):
    """Eager runs one aten op per layer op; the compiled forward calls a few generated kernels
    (each a fused chain). Compiling happens in the first step, which the report shows apart."""
    _, reports = smoke_run("compile")
    for w, entry in comparison_of(reports, "compile")["workloads"].items():
        slow, fast = entry["slow"], entry["fast"]
        # the GPT compiles its blocks only (regional): its embeddings, output layer and loss stay eager ops
        share = 1 / 2 if w == "gpt" else 1 / 3
        assert fast["evidence"]["phases"]["forward"]["ops"] < slow["evidence"]["phases"]["forward"]["ops"] * share, w
        assert fast["host"]["first_step_s"] > slow["host"]["first_step_s"], w
    md = (reports / "compile.md").read_text()
    assert "first step, s (compilation, autotuning)" in md
    for entry in comparison_of(reports, "compile")["workloads"].values():
        c = entry["fast"]["compile"]  # fullgraph=True: one graph per compiled callable, no break
        assert c["graph_breaks"] == 0 and c["graphs"] >= 1 and entry["slow"]["compile"] is None
    assert md.count("graph break(s)") == len(suite_pairs("compile"))  # each compiled pair the suite runs


@pytest.mark.recipe("cuda_graphs")
def test_cuda_graphs_pairs_pass_parity_and_say_a_cpu_cannot_graph(smoke_run):
    proc, reports = smoke_run("cuda_graphs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workloads = comparison_of(reports, "cuda_graphs")["workloads"]
    assert set(workloads) == {"churn", "churn_serving"}
    for pair, entry in workloads.items():
        assert entry["parity"]["ok"], (pair, entry["parity"])
    serving = workloads["churn_serving"]["parity"]
    assert serving["what"] == "churn probability per request" and serving["max_abs"] <= 1e-6
    assert "CUDA graphs need CUDA" in " ".join(workloads["churn"]["fast"]["notices"])
    md = (reports / "cuda_graphs.md").read_text()
    assert "## churn_serving" in md and "[side by side](cuda_graphs_churn_serving_diff.html)" in md


@pytest.mark.recipe("dataloader")
def test_dataloader_pairs_pass_parity_with_the_same_batches(smoke_run):
    proc, reports = smoke_run("dataloader")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w, entry in comparison_of(reports, "dataloader")["workloads"].items():
        par = entry["parity"]
        assert par["ok"] and par["early_max_rel"] <= 1e-6, (w, par)  # same samples, same crops


@pytest.mark.recipe("dataloader")
def test_loader_work_moves_out_of_the_training_process(smoke_run):
    """Churn: row-by-row gathering (about 2 ops per row) becomes a couple of gathers per batch.
    ResNet-18: the augmentation leaves the training process for a worker, which burns the CPU."""
    _, reports = smoke_run("dataloader")
    workloads = comparison_of(reports, "dataloader")["workloads"]
    data_ops = lambda v: v["evidence"]["phases"]["data"]["ops"]  # noqa: E731
    churn, resnet = workloads["churn"], workloads["resnet18"]
    assert data_ops(churn["slow"]) >= 10 * max(data_ops(churn["fast"]), 1)
    assert data_ops(resnet["slow"]) > 5 * max(data_ops(resnet["fast"]), 1)
    assert resnet["slow"]["host"]["worker_cpu_ms_per_step"] == 0
    assert resnet["fast"]["host"]["worker_cpu_ms_per_step"] > 0
    assert 0 <= resnet["slow"]["host"]["data_wait_share"] <= 1


@pytest.mark.recipe("folded_ops")
def test_folded_ops_pair_passes_parity_exactly(smoke_run):
    proc, reports = smoke_run("folded_ops")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    par = comparison_of(reports, "folded_ops")["workloads"]["churn"]["parity"]
    assert par["ok"] and par["early_max_rel"] <= 1e-6  # the folded data are the same numbers


@pytest.mark.recipe("folded_ops")
def test_folded_ops_leave_the_forward(smoke_run):
    """The churn forward loses the add, the multiply and the unread mean: 3 ops fewer per step."""
    _, reports = smoke_run("folded_ops")
    churn = comparison_of(reports, "folded_ops")["workloads"]["churn"]
    slow = churn["slow"]["evidence"]["phases"]["forward"]["ops"]
    fast = churn["fast"]["evidence"]["phases"]["forward"]["ops"]
    assert slow - fast >= 3, (slow, fast)


@pytest.mark.recipe("fused_ops")
def test_fused_ops_pairs_pass_parity(smoke_run):
    proc, reports = smoke_run("fused_ops")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = comparison_of(reports, "fused_ops")
    for w in (*WORKLOADS, "gpt"):
        par = comparison["workloads"][w]["parity"]
        assert par["ok"] and par["early_max_rel"] <= 1e-3, (w, par)


@pytest.mark.recipe("fused_ops")
def test_fused_adam_calls_far_fewer_ops(smoke_run):
    """On a CPU the slow twin is PyTorch's default there, the for-loop Adam: about 9 ops per parameter
    tensor (12 in the MLP, 62 in ResNet-18, 16 in the smoke GPT's one block); the fused one a few per step
    for all of them."""
    _, reports = smoke_run("fused_ops")
    comparison = comparison_of(reports, "fused_ops")
    for w, tensors in (("churn", 12), ("resnet18", 62), ("gpt", 16)):
        slow = comparison["workloads"][w]["slow"]["evidence"]["phases"]["optimizer"]["ops"]
        fast = comparison["workloads"][w]["fast"]["evidence"]["phases"]["optimizer"]["ops"]
        assert slow >= 8 * tensors and fast < slow / 2, (w, slow, fast)


@pytest.mark.recipe("grad_accumulation")
def test_grad_accumulation_pairs_keep_parity_with_the_full_batch(smoke_run):
    proc, reports = smoke_run("grad_accumulation")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w, entry in comparison_of(reports, "grad_accumulation")["workloads"].items():
        assert entry["parity"]["ok"], (w, entry["parity"])
        # k forward and backward passes of a k-th of the batch: about the same FLOPs per step
        slow, fast = entry["slow"]["flops_per_step"], entry["fast"]["flops_per_step"]
        assert 0.95 < fast / slow < 1.05, (w, slow, fast)
        # ... in k times as many forward calls
        assert entry["fast"]["evidence"]["phases"]["forward"]["ops"] > (ACCUMULATE - 1) * \
            entry["slow"]["evidence"]["phases"]["forward"]["ops"], w


@pytest.mark.recipe("precision")
def test_precision_pairs_pass_parity_and_the_stamps_record_the_settings(smoke_run):
    proc, reports = smoke_run("precision")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w, entry in comparison_of(reports, "precision")["workloads"].items():
        assert entry["parity"]["ok"], (w, entry["parity"])
        assert (entry["slow"]["env"]["tf32_matmul"], entry["slow"]["env"]["tf32_cudnn"]) == (False, False)
        assert (entry["fast"]["env"]["tf32_matmul"], entry["fast"]["env"]["tf32_cudnn"]) == (True, True)
        assert entry["fast"]["env"]["float32_matmul_precision"] == "high"


@pytest.mark.recipe("set_to_none")
def test_set_to_none_pairs_pass_parity(smoke_run):
    proc, reports = smoke_run("set_to_none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w in WORKLOADS:
        par = comparison_of(reports, "set_to_none")["workloads"][w]["parity"]
        assert par["ok"] and par["early_max_rel"] <= 1e-6, (w, par)  # zero + gradient == gradient


@pytest.mark.recipe("set_to_none")
def test_the_zeroing_ops_are_gone(smoke_run):
    """zero_grad(set_to_none=False) zeroes every gradient in place (12 tensors in the MLP, 62 in
    ResNet-18); the fast twin runs none of it, so the step calls fewer ops."""
    _, reports = smoke_run("set_to_none")
    for w in WORKLOADS:
        entry = comparison_of(reports, "set_to_none")["workloads"][w]
        slow, fast = entry["slow"]["evidence"]["ops_per_step"], entry["fast"]["evidence"]["ops_per_step"]
        assert slow > fast, (w, slow, fast)


@pytest.mark.recipe("sync_removal")
def test_sync_removal_pairs_pass_parity(smoke_run):
    proc, reports = smoke_run("sync_removal")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = comparison_of(reports, "sync_removal")
    for w in WORKLOADS:
        par = comparison["workloads"][w]["parity"]
        assert par["ok"] and par["early_max_rel"] <= 1e-6  # when the host reads a number changes nothing else


@pytest.mark.recipe("sync_removal")
def test_host_reads_per_step_drop_to_zero(smoke_run):
    """The slow twins read two numbers per step (churn: the forward's mean and the loss; ResNet-18:
    the loss and the correct count); the fast twins read none inside the step."""
    _, reports = smoke_run("sync_removal")
    comparison = comparison_of(reports, "sync_removal")
    for w in WORKLOADS:
        slow = comparison["workloads"][w]["slow"]["evidence"]["syncs_per_step"]
        fast = comparison["workloads"][w]["fast"]["evidence"]["syncs_per_step"]
        assert (slow, fast) == (2.0, 0.0), (w, slow, fast)
    md = (reports / "sync_removal.md").read_text()
    assert md.count("; mechanism: .item() calls per step (CPU proxy for syncs) 2.0 -> 0.0") == 2  # each opening


@pytest.mark.recipe("amp")
def test_parity_failure_exits_nonzero_and_says_by_how_much(tmp_path):
    proc = run_module("common.runners.compare", "amp", "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--workloads", "churn", "--parity-rtol", "1e-9", "--reports-dir", str(tmp_path))
    assert proc.returncode == 1
    assert "parity FAILED for amp/churn: the 10-step mean loss differs by" in proc.stderr
    assert "mean loss differs by" in proc.stderr and "(tolerance 1e-07%)" in proc.stderr
    md = (tmp_path / "amp.md").read_text()  # the report is written all the same, the failure at its top
    assert md.index("> **Parity FAILED for churn**: the 10-step mean loss differs by") < md.index("## churn")



@pytest.mark.recipe("cold_start")
@NEEDS_CXX
def test_the_cache_pair_loads_what_its_priming_process_saved_and_reports_its_cold_start(smoke_run):
    """The fast twin's processes load the artefacts the priming run saved (a process before them); the
    report gives each twin's time to first step, the steady steps beside it and the break-even. (The suite
    shares Inductor's caches, so its first steps are no cold start, which the report says.)"""
    _, reports = smoke_run("cold_start")
    entry = comparison_of(reports, "cold_start")["workloads"]["resnet18_cache"]
    assert entry["measure"] == "first step" and entry["steps"]["ratio"] > 0
    cold = entry["cold"]
    assert cold["fresh"] is False  # forked from the suite's zygote: said, not taken for a fresh interpreter
    assert cold["cache"]["loaded"] and cold["cache"]["bytes"] > 0 and cold["break_even"]["case"]
    assert entry["speedup"]["ratio"] == pytest.approx(cold["slow_first_s"][0] / cold["fast_first_s"][0])
    prime = json.loads(next((reports / "results" / "cold_start").glob("*/resnet18_cache_fast_prime.json")).read_text())
    assert prime["extra"]["compile_cache"]["saved_bytes"] == cold["cache"]["bytes"]
    md = (reports / "cold_start.md").read_text()
    assert "**Time to first step: " in md and "- Cold start, from each process's start (forked" in md
    assert "- Break-even: " in md and "- Compiled artefacts (fast twin): " in md and "not a cold start" in md


@pytest.mark.recipe("attention")
def test_the_attention_report_names_each_twins_attention_from_its_trace(smoke_run):
    """Read from the profiled steps (common.analysis.attention): the hand-written twin's softmax over T x T
    scores between batched matmuls, the fused twin's SDPA backend; peak memory leads the report."""
    from common.analysis import attention

    proc, reports = smoke_run("attention")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (reports / "attention.md").read_text()
    assert f"- Attention (slow): {attention.BY_HAND}" in md
    assert "- Attention (fast): the CPU's fused flash kernel" in md
    verdict = next(line for line in md.splitlines() if line.startswith("**") and "x" in line.split(";")[0])
    assert "; peak memory " in verdict and " MB (" in verdict  # the memory change, in the verdict's line
