"""The goals, one table per GPU class (an H100's, a T4's from the seeds): declared per pair, judged
from the interval, shown in the report and on the overview page for the class the run was on."""
import pytest

from common import catalog
from common.analysis import aggregate, goals, stats
from common.analysis.results_compare import Comparison, WorkloadComparison
from common.render import report

from tests_helpers import run_result

KEYS = {"min_speedup", "max_slowdown", "lower_memory", "max_memory_share"}


def _entry(slow_ms, fast_ms, device="cuda", fast_mb=50.0) -> WorkloadComparison:
    slow = [run_result(ms=m, device=device) for m in slow_ms]
    fast = [run_result(ms=m, device=device, variant="fast") for m in fast_ms]
    for r in fast:
        r.memory.peak_mb = fast_mb  # the slow twin's is 100 MB
    entry = WorkloadComparison(slow=aggregate.aggregate(slow), fast=aggregate.aggregate(fast))
    entry.speedup = stats.speedup(entry.slow.process_ms, entry.fast.process_ms)
    return entry


def test_every_goal_names_a_real_pair_and_known_keys():
    assert set(goals.TABLES) == set(goals.SOURCES) == set(goals.NAMES)
    for cls, table in goals.TABLES.items():
        for (recipe, pair), goal in table.items():
            assert pair in catalog.workloads(recipe) and goal and set(goal) <= KEYS, (cls, recipe, pair)


def test_goals_read_as_the_issue_set_them():
    assert goals.describe(goals.goal_of("amp", "resnet18")) == ">= 1.4x with lower peak memory"
    assert goals.describe(goals.goal_of("checkpointing", "resnet18")) == \
        "at most 1.35x slower with peak memory <= 60% of the slow twin's"
    assert goals.goal_of("amp", "churn") == {}


def test_a_t4_is_judged_by_the_seeds_figures_and_an_unknown_gpu_by_none():
    """The T4's table holds the ResNet-18 lab's expected results, each its range's floor."""
    assert goals.describe(goals.goal_of("amp", "resnet18", "T4")) == \
        ">= 1.5x with peak memory <= 70% of the slow twin's"  # "1.5-2.5x speedup, 30-40% memory reduction"
    assert goals.goal_of("dataloader", "resnet18", "T4") == {"min_speedup": 1.3}  # "1.3-1.8x"
    assert goals.goal_of("cuda_graphs", "churn", "T4") == {}  # the seeds quote no figure for it
    assert [goals.gpu_class(n) for n in ("Tesla T4", "NVIDIA H100 80GB HBM3", "NVIDIA L4", "NVIDIA T400", None)] == \
        ["T4", "H100", None, None, None]
    entry = _entry([16.0, 16.2, 15.9], [10.0, 10.1, 9.9], fast_mb=60.0)
    for r in (entry.slow, entry.fast):
        r.env.gpu_name = "Tesla T4"
    assert goals.goal_line("amp", "resnet18", entry) == (
        "Goal on a T4 (the ResNet-18 lab's expected results, on Colab or Kaggle): >= 1.5x with peak memory "
        "<= 70% of the slow twin's: **met**")
    for r in (entry.slow, entry.fast):
        r.env.gpu_name = "NVIDIA L4"
    assert goals.goal_line("amp", "resnet18", entry) == "No goal set for NVIDIA L4 (goals exist on an H100, a T4)"
    cpu = _entry([15.0, 15.2, 14.9], [10.0, 10.1, 9.9], device="cpu")
    assert goals.goal_line("amp", "resnet18", cpu) == ("Goals (on an H100: >= 1.4x with lower peak memory; on a T4: "
                                                  ">= 1.5x with peak memory <= 70% of the slow twin's): "
                                                  "**not judged (a CPU run)**")


@pytest.mark.parametrize("slow, fast, said", [
    ([15.0, 15.2, 14.9], [10.0, 10.1, 9.9], "met"),  # 1.5x, tight: the whole interval clears 1.4x
    ([11.0, 11.1, 10.9], [10.0, 10.1, 9.9], "missed"),  # 1.1x, tight: the whole interval falls short
    ([14.0, 9.0, 20.0], [10.0, 10.1, 9.9], "undecided"),  # wide: it straddles 1.4x
])
def test_a_speedup_goal_is_met_only_when_its_whole_interval_clears_it(slow, fast, said):
    assert goals.judge({"min_speedup": 1.4}, _entry(slow, fast)) == said


def test_a_speedup_goal_without_an_interval_is_undecided_whatever_the_point_estimate():
    """One process a twin gives a ratio and no interval: neither met nor missed, however far the ratio
    is from the goal (a memory goal, measured exactly, is still judged)."""
    for slow in ([30.0], [10.5]):  # 3x and 1.05x against a 1.4x goal
        assert goals.judge({"min_speedup": 1.4}, _entry(slow, [10.0])) == "undecided (no interval)"
    assert goals.judge({"min_speedup": 1.4, "lower_memory": True}, _entry([30.0], [10.0], fast_mb=120.0)) == "missed"


def test_memory_goals_and_a_cpu_run():
    faster = _entry([15.0, 15.2, 14.9], [10.0, 10.1, 9.9], fast_mb=120.0)
    assert goals.judge({"min_speedup": 1.4, "lower_memory": True}, faster) == "missed"
    slower = _entry([10.0, 10.1, 9.9], [12.0, 12.1, 11.9], fast_mb=55.0)  # 1.2x slower, 55% of the memory
    assert goals.judge({"max_slowdown": 1.35, "max_memory_share": 0.60}, slower) == "met"
    assert goals.judge({"max_slowdown": 1.35, "max_memory_share": 0.50}, slower) == "missed"
    cpu = _entry([15.0, 15.2, 14.9], [10.0, 10.1, 9.9], device="cpu")
    assert goals.judge({"min_speedup": 1.4}, cpu) == "not judged (a CPU run)"


def test_the_report_and_the_overview_show_the_goal(tmp_path):
    entry = _entry([15.0, 15.2, 14.9], [10.0, 10.1, 9.9])
    run = run_result()
    entry.parity = aggregate.parity(run, run, {"early_steps": 5, "early_rtol": 0.01, "window": 10, "rtol": 0.05})
    c = Comparison(recipe="amp", title="AMP", evidence_keys=["peak_mb"], smoke=False, device="cuda", command="x",
                   results_dir="r", workloads={"resnet18": entry}, failures=[])
    md = report.render_markdown(c, tmp_path)
    assert ("- Goal on an H100 (this version's goals, against the first H100 run's reference points): >= 1.4x "
            "with lower peak memory: **met**") in md
    from common.render import index

    row = index.rows({"amp": c})[0]
    assert row.goal == ">= 1.4x with lower peak memory: met"
