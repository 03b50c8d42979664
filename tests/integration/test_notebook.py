"""notebooks/cookbook.ipynb, as a reader runs it: executed top to bottom in a fresh kernel on this CPU
(the notebook chooses the CPU sizes itself), every make target it calls for real; a cell's error or
a report not written fails. It is committed without outputs."""
import os

import pytest

from conftest import REPO

NOTEBOOK = REPO / "notebooks" / "cookbook.ipynb"


def nbformat():
    """nbformat, imported where a test runs: its JSON schema's import costs 3.5 s, which every worker paid
    collecting this module, where one runs its tests."""
    import nbformat

    return nbformat


def read_notebook():
    return nbformat().read(NOTEBOOK, as_version=4)


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
    nb = read_notebook()
    nbformat().validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    assert nb.metadata["kernelspec"]["name"] == "python3"


def supplied(nb, **fields):
    """The notebook with its form fields set as a user sets them (SCRIPT = "...", in the cell that has it)."""
    for cell in nb.cells:
        for name, value in fields.items():
            if cell.cell_type == "code" and f'{name} = ""  # @param' in cell.source:
                cell.source = cell.source.replace(f'{name} = ""  # @param', f"{name} = {value!r}  # @param", 1)
    return nb


def timings(nb) -> list[float]:
    """Each code cell's seconds, from the execution timestamps nbclient records."""
    from datetime import datetime

    out = []
    for c in nb.cells:
        if c.cell_type == "code":
            t = c.metadata.get("execution", {})
            a, b = t.get("iopub.execute_input"), t.get("shell.execute_reply")
            out.append((datetime.fromisoformat(b.rstrip("Z")) - datetime.fromisoformat(a.rstrip("Z"))).total_seconds()
                       if a and b else float("nan"))
    return out


def test_the_notebook_runs_top_to_bottom_on_a_cpu_on_the_users_own_script(tmp_path, monkeypatch):
    """As a user runs it: their script given in its form field (a project of theirs, with an argument),
    never the demo; every report it shows is one it wrote; nothing tracked changes."""
    import subprocess

    reports = tmp_path / "reports"
    monkeypatch.setenv("COOKBOOK_REPORTS_DIR", str(reports))
    project = tmp_path / "their project"
    project.mkdir()
    script = project / "train.py"
    script.write_text((REPO / "tests" / "plain" / "short.py").read_text())
    tracked = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                             text=True).stdout
    scratch = [REPO / "notebooks" / "my_train.py", REPO / "notebooks" / "cookbook-reports.zip"]
    try:
        nb = _execute(supplied(read_notebook(), SCRIPT=str(script), ARGS="--steps 60"),
                      REPO / "notebooks")
    finally:
        found = {p.name: p.exists() for p in scratch}
        for p in scratch:
            p.unlink(missing_ok=True)
    assert found == {"my_train.py": False, "cookbook-reports.zip": True}  # their script, not the demo
    assert subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                          text=True).stdout == tracked
    code = [c for c in nb.cells if c.cell_type == "code"]
    said = [_text(c) for c in code]
    print("cell seconds:", [round(t, 1) for t in timings(nb)])
    assert "installed: nothing (all present)" in said[0]
    assert "NO GPU: running the CPU sizes" in said[1] and '"simulated": false' in said[1]
    assert "| [`amp`](recipes/amp/README.md) |" in said[2] and "NVIDIA H200" in said[2]  # the committed results first
    assert f"your script: {script} --steps 60, in its own folder" in said[4] and "the demo" not in said[4]
    doctor = next(reports.glob("doctor_train_*.md")).read_text()
    assert doctor.splitlines()[0] in said[5] and "--steps 60" in doctor
    amp = (reports / "amp.md").read_text()
    assert amp.splitlines()[0] in said[7] and 'class="diff"' in said[7]  # the report and its side-by-side diff
    assert "image/png" in {k for o in code[7].outputs for k in o.get("data", {})}  # its plot
    assert "trace(s) under" in said[8] and ".pt.trace.json" in said[8]
    assert "<iframe srcdoc=" in said[8] and "Step time by what filled it" in said[8]  # the pair's page, inline
    assert "make recipe-ddp needs 2" in said[9] and "cookbook-reports.zip" in said[10]


def test_the_notebook_says_each_cells_time_and_leaves_the_developer_tools_out():
    nb = read_notebook()
    text = "\n".join(c.source for c in nb.cells)
    assert "gpu-check" not in text and "@T" not in text
    for c in nb.cells:
        if c.cell_type == "code" and not c.source.startswith("DEMO = "):
            assert "CPU VM" in c.source.splitlines()[0] + c.source.splitlines()[1], c.source[:120]


def test_the_notebook_outside_a_clone_without_an_address_stops_in_one_line(tmp_path):
    """No clone address is guessed: a notebook opened on its own asks for the repository to clone."""
    from nbclient.exceptions import CellExecutionError

    nb = read_notebook()
    nb.cells = [nb.cells[1]]
    with pytest.raises(CellExecutionError, match="not inside a clone of the cookbook: set REPO_URL"):
        _execute(nb, tmp_path, timeout=120)
    nb = supplied(nb, REPO_URL=str(tmp_path / "no-such-repository"))  # a clone that fails: git's own last line
    with pytest.raises(CellExecutionError, match="git clone .*no-such-repository failed: fatal: "):
        _execute(nb, tmp_path, timeout=120)
    assert not (tmp_path / "cookbook").exists()


def test_a_make_target_that_fails_stops_the_notebook(tmp_path):
    """The notebook's cells run the targets through sh(), which raises on a failure: a broken target
    cannot pass unseen."""
    from nbclient.exceptions import CellExecutionError

    nb = read_notebook()
    nb.cells = [nb.cells[1], nbformat().v4.new_code_cell('sh(f"{MAKE} recipe-no-such-recipe")')]
    with pytest.raises(CellExecutionError, match="failed \\(exit status 2\\)"):
        _execute(nb, REPO / "notebooks", timeout=120)
    assert not os.path.exists(REPO / "notebooks" / "my_train.py")


def test_the_notebooks_reports_go_under_reports_local_never_over_the_committed_ones():
    import json

    cells = json.loads((REPO / "notebooks" / "cookbook.ipynb").read_text())["cells"]
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    (line,) = [x for x in code.splitlines() if x.startswith("REPORTS = ")]
    assert 'repo / "reports" / "local"' in line and "COOKBOOK_REPORTS_DIR" in line
