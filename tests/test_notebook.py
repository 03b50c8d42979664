"""notebooks/cookbook.ipynb, as a reader runs it: executed top to bottom in a fresh kernel on this CPU
(the notebook chooses the CPU sizes itself), every make target it calls for real; a cell's error or
a report not written fails. It is committed without outputs."""
import os

import nbformat
import pytest

from conftest import REPO

NOTEBOOK = REPO / "notebooks" / "cookbook.ipynb"


def _execute(nb, cwd, timeout=900):
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        out.append(o.get("text", ""))
        out += [str(v) for k, v in o.get("data", {}).items() if k in ("text/plain", "text/markdown", "text/html")]
    return "\n".join(out)


def test_the_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    assert nb.metadata["kernelspec"]["name"] == "python3"


def test_the_notebook_runs_top_to_bottom_on_a_cpu(tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    monkeypatch.setenv("COOKBOOK_REPORTS_DIR", str(reports))
    scratch = [REPO / "notebooks" / "my_train.py", REPO / "notebooks" / "cookbook-reports.zip"]
    try:
        nb = _execute(nbformat.read(NOTEBOOK, as_version=4), REPO / "notebooks")
    finally:
        found = {p.name: p.exists() for p in scratch}
        for p in scratch:
            p.unlink(missing_ok=True)
    assert found == {"my_train.py": True, "cookbook-reports.zip": True}
    code = [c for c in nb.cells if c.cell_type == "code"]
    said = [_text(c) for c in code]
    assert "installed: nothing (all present)" in said[0]
    assert "NO GPU: running the CPU sizes" in said[1] and '"simulated": false' in said[1]
    assert "make tour needs a GPU" in said[2] and "make gpu-check needs a GPU" in said[3]
    amp = (reports / "amp.md").read_text()
    assert amp.splitlines()[0] in said[5] and 'class="diff"' in said[5]  # the report and its side-by-side diff
    assert "image/png" in {k for o in code[5].outputs for k in o.get("data", {})}  # its plot
    assert "trace(s) under" in said[6] and ".pt.trace.json" in said[6]
    assert "<iframe srcdoc=" in said[6] and "Step time by what filled it" in said[6]  # the pair's page, inline
    doctor = next(reports.glob("doctor_my_train*.md")).read_text()
    assert doctor.splitlines()[0] in said[8]
    assert "make recipe-ddp needs 2" in said[9] and "cookbook-reports.zip" in said[10]


def test_a_make_target_that_fails_stops_the_notebook(tmp_path):
    """The notebook's cells run the targets through sh(), which raises on a failure: a broken target
    cannot pass unseen."""
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells = [nb.cells[1], nbformat.v4.new_code_cell('sh(f"{MAKE} recipe-no-such-recipe")')]
    with pytest.raises(CellExecutionError, match="failed \\(exit status 2\\)"):
        _execute(nb, REPO / "notebooks", timeout=120)
    assert not os.path.exists(REPO / "notebooks" / "my_train.py")


def test_the_notebooks_reports_go_under_reports_local_never_over_the_committed_ones():
    import json

    cells = json.loads((REPO / "notebooks" / "cookbook.ipynb").read_text())["cells"]
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    (line,) = [x for x in code.splitlines() if x.startswith("REPORTS = ")]
    assert 'repo / "reports" / "local"' in line and "COOKBOOK_REPORTS_DIR" in line
