"""reports/README.md: one row per recipe and workload, regenerated after every recipe run."""
import json

import pytest

from common.render import index


@pytest.mark.recipe("sync_removal")
def test_recipe_run_regenerates_the_index(smoke_run):
    _, reports = smoke_run("sync_removal")
    md = (reports / "README.md").read_text()
    for w in ("churn", "resnet18"):
        row = next(line for line in md.splitlines() if line.startswith(f"| [sync_removal](sync_removal.md) | {w} |"))
        assert "CPU" in row and "smoke" in row and "| ok |" in row  # device labelled, parity shown
        assert ".item() calls per step (CPU proxy for syncs): 2.0 -> 0.0" in row
    assert "Rows marked CPU are CPU runs" in md
    assert (reports / "overview.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_index_survives_an_unreadable_result_and_an_empty_folder(tmp_path):
    assert "No recipe has been run here yet" in (index.render(tmp_path)[0]).read_text()
    folder = tmp_path / "results" / "amp"
    folder.mkdir(parents=True)
    (folder / "comparison.json").write_text(json.dumps({"schema_version": 1, "workloads": {"churn": {"speedup": 2.0}}}))
    md = index.render(tmp_path)[0].read_text()
    assert "| [amp](amp.md) | ? | unreadable results: re-run make recipe-amp (" in md
