"""A fourth workload is one module and one pair: planted into a copy of the checkout (this one's code,
committed there), it runs through the tour (each leg a `compare`), finalize and a sweep, and nothing
else in the copy is edited. docs/developing.md's "adding a workload" list is what this test does."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

from conftest import REPO

# the workload: its spec in literals (a runner reads it without importing the module), its data read with
# numpy and its model built where torch is already imported, as the recipes' children have it
WORKLOAD = '''
"""A sine regression: a small MLP fits y = sin(sum of 8 features). A step's samples are rows."""
from common.workload_specs import WorkloadSpec
from common.workloads import host_arrays

WORKLOAD = WorkloadSpec(
    title="a sine regression",
    order=9,
    sizes={
        "cuda": {"batch_size": 64, "steps": 50, "warmup": 5, "profile_steps": 2, "min_time": 1.0},
        "cpu": {"batch_size": 32, "steps": 20, "warmup": 3, "profile_steps": 1, "min_time": 0.0},
        "smoke": {"batch_size": 16, "steps": 4, "warmup": 2, "profile_steps": 1, "min_time": 0.0},
    },
    load="common.workloads.wave:load",
    check="common.workloads.wave:check",
    data_help="FILE.npy",
)


def load(data_arg):
    import numpy as np

    from common.workloads import datasource

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 8)).astype(np.float32)
    return x, np.sin(x.sum(1)).astype(np.float32), datasource.source("synthetic", None, "a sine (not real data)")


def check(path):
    import numpy as np

    np.load(path)


def train_tensors(run):
    import torch

    x, y, source = host_arrays("wave", run.data)
    run.record_data_source(source)
    return torch.from_numpy(x).to(run.device), torch.from_numpy(y).to(run.device)


def model():
    import torch.nn as nn

    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
'''

SPEC = '''
"""Adam's update over all tensors at once (foreach) rather than one tensor at a time."""
from common.spec import LossParity, RecipeSpec, Sweep

RECIPE = RecipeSpec(
    title="A planted recipe",
    parity=LossParity(what="training loss", early_steps=2, early_rtol=0.001, window=2, rtol=0.02),
    sweep=Sweep(pair="wave", flag="--batch-size", knob="batch_size",
                values={"cuda": (64, 256), "cpu": (16, 32), "smoke": (8, 16)}),
)
'''

TWIN = '''
"""Planted recipe, wave, {variant} twin."""
import torch

from common import data, harness
from common.workloads import wave

run = harness.start(__file__, __doc__)
features, targets = wave.train_tensors(run)
model = wave.model().to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach={foreach})
batches = data.device_batches(run, features, targets)

for x, y in run.loop(batches):
    with run.phase("forward"):
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
'''


def _copy(tree):
    """This checkout's code as a fresh clone has it (tracked and new files), committed in `tree`."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "common", "recipes",
                             "ladder", "baselines", ".gitignore"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout
    for name in listed.split():
        if (REPO / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, tree / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run([*git, *cmd], cwd=tree, check=True, capture_output=True)


def test_a_planted_fourth_workload_runs_through_the_tour_finalize_and_a_sweep(tmp_path):
    tree = tmp_path / "tree"
    _copy(tree)
    (tree / "common" / "workloads" / "wave.py").write_text(textwrap.dedent(WORKLOAD).lstrip())
    (tree / "recipes" / "planted").mkdir()
    (tree / "recipes" / "planted" / "__init__.py").write_text(SPEC.lstrip())
    for variant, foreach in (("slow", False), ("fast", True)):
        (tree / "recipes" / "planted" / f"wave_{variant}.py").write_text(TWIN.format(variant=variant,
                                                                                    foreach=foreach).lstrip())
    # the copy's code, its children forked from a fork server of its own (which imports the planted module too)
    env = {**os.environ, "PYTHONPATH": str(tree), "COOKBOOK_ZYGOTE": "0"}
    socket = tmp_path / "zygote"
    server = subprocess.Popen([sys.executable, "-m", "common.measure.zygote", "--socket", str(socket),
                               "--no-cpu-inductor"], cwd=tree, stdout=subprocess.PIPE, text=True, env=env)
    if server.stdout.readline().strip() == "ready":
        env["COOKBOOK_ZYGOTE"] = str(socket)

    def run(*args):
        proc = subprocess.run([sys.executable, "-m", *args], cwd=tree, capture_output=True, text=True, timeout=400,
                              env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    try:
        _through_every_runner(tree, tmp_path, run)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _through_every_runner(tree, tmp_path, run):
    bundle, reports = tmp_path / "bundle", tmp_path / "reports"
    said = run("common.runners.tour", "--smoke", "--rounds", "1", "--only", "planted", "--device", "cpu",
               "--data", "synthetic", "--bundle", str(bundle))
    assert "planted/wave" in said
    assert list(json.loads((bundle / "tour.json").read_text())["legs"]) == ["planted"]
    run("common.runners.finalize", str(bundle), "--reports-dir", str(reports))
    md = (reports / "planted.md").read_text()
    assert "Parity of the training loss (passed)" in md and "wave" in md
    run("common.runners.sweep", "planted", "--smoke", "--rounds", "1", "--device", "cpu", "--reports-dir",
        str(reports))
    assert (reports / "sweep_planted.md").is_file()
    # nothing of the copy's own was edited: its tree is the commit's, plus the two planted paths
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True).stdout
    assert sorted(line[3:] for line in status.splitlines()) == ["common/workloads/wave.py", "recipes/planted/"]
