"""`make sweep-<recipe>`: the regime map writes its report and plot, and names the crossover."""
import json

from common.analysis.results_compare import Speedup
from common.runners import sweep

from conftest import run_module


def test_a_smoke_sweep_writes_its_report_and_plot(tmp_path):
    # no profile and no learning probe: the sweep's own work is under test here; both are the recipe
    # runner's, which tests/integration/test_recipes.py runs for every pair
    proc = run_module("common.runners.sweep", "amp", "--smoke", "--device", "cpu", "--data", "synthetic",
                      "--reports-dir", str(tmp_path), "--", "--profile-steps", "0", "--probe-steps", "0", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (tmp_path / "sweep_amp.md").read_text()
    assert "# Sweep: Automatic mixed precision (AMP) (`amp`, resnet18) across batch size" in md
    assert "**Regime: " in md and "| 2 |" in md and "| 4 |" in md and "not a GPU result" in md
    assert (tmp_path / "sweep_amp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tmp_path / "results" / "sweep" / "amp" / "sweep.json").read_text())
    assert [p["value"] for p in saved["points"]] == [2, 4]
    assert all(p["speedup"]["processes"] == [2, 2] and p["speedup"]["low"] is not None for p in saved["points"])
    assert "- [Sweep: amp](sweep_amp.md): " in (tmp_path / "README.md").read_text()  # the overview links it


def _point(value, verdict):
    return sweep.Point(value=value, speedup=Speedup(ratio=1.0, low=0.9, high=1.1, method="", processes=[3, 3],
                                                    verdict=verdict, floor=0.03))


def test_the_crossover_is_where_the_speedup_starts_to_hold():
    v = lambda *vs: [_point(x, verdict) for x, verdict in zip((16, 32, 64, 128), vs)]  # noqa: E731
    assert sweep.crossover(v("undecided", "slower", "faster", "faster"), "batch size") == \
        "pays off from batch size 64 up (not at 32)"
    assert sweep.crossover(v("faster", "faster", "faster", "faster"), "batch size").startswith(
        "pays off over the whole")
    assert sweep.crossover(v("slower", "undecided", "undecided", "slower"), "batch size") == \
        "does not pay off anywhere in the range measured (batch size 16 to 128); slower at 16, 128"
    assert "only" in sweep.crossover(v("faster", "undecided", "faster", "undecided"), "batch size")


def test_a_recipe_without_a_sweep_is_one_line():
    proc = run_module("common.runners.sweep", "set_to_none")
    assert proc.returncode == 2 and "has no sweep" in proc.stderr and proc.stderr.count("\n") == 1
