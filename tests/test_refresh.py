"""`make refresh`: the real targets, missing or oldest report first, within a budget, with a tarball."""
import tarfile

import pytest

from common import catalog
from common.runners import refresh

from conftest import run_module


def test_every_recipe_sweep_ladder_and_diagnosis_is_a_target_with_its_report():
    by_name = {t.name: t for t in refresh.targets()}
    for r in catalog.available():
        assert by_name[f"recipe-{r}"].report == f"{r}.md"
    assert by_name["sweep-amp"].report == "sweep_amp.md" and "sweep-set_to_none" not in by_name  # no sweep there
    assert by_name["ladder-resnet18"].cmd[-1] == "resnet18" and by_name["diagnose-churn"].report == "baseline_churn.md"
    assert by_name["doctor-resnet18"].report.startswith("doctor_resnet18_cifar10_")  # the README's doctor example
    assert by_name["ncu-amp"].report == "ncu_amp.md" and by_name["ncu-amp"].cmd == ["-m", "common.runners.ncu", "amp"]
    assert refresh.needs_gpus(by_name["recipe-ddp"]) and not refresh.needs_gpus(by_name["recipe-amp"])


def test_a_target_this_machine_cannot_report_is_skipped_with_the_reason():
    by_name = {t.name: t for t in refresh.targets()}
    assert "2 or more GPUs" in refresh.why_not_here(by_name["recipe-ddp"], gpus=1, ncu_found=True)
    assert refresh.why_not_here(by_name["recipe-ddp"], gpus=2, ncu_found=False) is None
    assert "not on PATH" in refresh.why_not_here(by_name["ncu-amp"], gpus=1, ncu_found=False)
    assert refresh.why_not_here(by_name["ncu-amp"], gpus=1, ncu_found=True) is None
    assert refresh.why_not_here(by_name["recipe-amp"], gpus=1, ncu_found=False) is None


def test_missing_reports_come_first_then_the_oldest():
    found = refresh.targets()[:4]
    ages = {found[0].report: 300, found[1].report: 0, found[2].report: 100, found[3].report: 0}
    assert [t.name for t in refresh.order(found, age=ages.get)] == [found[1].name, found[3].name, found[2].name,
                                                                    found[0].name]


def test_the_expected_time_is_the_last_one_measured_else_the_kind_default():
    t = refresh.targets()[0]
    assert refresh.expected_s(t, {}) == refresh.DEFAULT_S["recipe"]
    assert refresh.expected_s(t, {t.name: 61.5}) == 61.5


def test_the_tarball_holds_only_what_a_gpu_run_commits(tmp_path):
    reports = tmp_path / "reports"
    (reports / "results" / "amp").mkdir(parents=True)
    (reports / "traces").mkdir()
    for name in ("amp.md", "amp.png", "amp_churn_diff.html", "README.md", "overview.png"):
        (reports / name).write_text("x")
    (reports / "results" / "amp" / "comparison.json").write_text("{}")
    (reports / "notes.txt").write_text("x")
    out = tmp_path / "reports.tar.gz"
    refresh.write_tar(out, reports)
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == ["reports/README.md", "reports/amp.md", "reports/amp.png",
                                          "reports/amp_churn_diff.html", "reports/overview.png"]


def test_a_dry_run_lists_every_target_and_runs_nothing():
    proc = run_module("common.runners.refresh", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines()]
    assert sorted(listed) == sorted(t.name for t in refresh.targets())


def test_bad_input_and_a_machine_without_cuda_are_one_line():
    import torch

    proc = run_module("common.runners.refresh", "--only", "recipe-turbo")
    assert proc.returncode == 2 and "no target recipe-turbo" in proc.stderr and proc.stderr.count("\n") == 1
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = run_module("common.runners.refresh", "--only", "recipe-amp")
    assert proc.returncode == 2 and "no CUDA device here" in proc.stderr and proc.stderr.count("\n") == 1
