import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_itemcollected(item):
    """For `pytest -n auto --dist loadgroup`: the tests that share a fixture share a worker, so that it
    is built once: a recipe's smoke run for the tests marked recipe(name), a module's fixtures otherwise.
    Marked as each item is collected: pytest-xdist reads the groups in its collection_modifyitems."""
    marker = item.get_closest_marker("recipe")
    item.add_marker(pytest.mark.xdist_group(f"recipe-{marker.args[0]}" if marker else item.module.__name__))


@pytest.fixture(scope="session", autouse=True)
def isolated_data(tmp_path_factory):
    """Synthetic data in a temporary cache, no network: every subprocess inherits this."""
    os.environ["COOKBOOK_DATA_DIR"] = str(tmp_path_factory.mktemp("data"))
    os.environ["COOKBOOK_OFFLINE"] = "1"
    yield


def run_module(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """smoke_run(recipe): `python -m common.runners.compare <recipe> --smoke` once per session and recipe,
    as (process, reports folder)."""
    done = {}

    def run(recipe):
        if recipe not in done:
            reports = tmp_path_factory.mktemp(f"reports-{recipe}")
            proc = run_module("common.runners.compare", recipe, "--smoke", "--device", "cpu", "--data", "synthetic",
                              "--reports-dir", str(reports))
            done[recipe] = proc, reports
        return done[recipe]

    return run


@pytest.fixture(scope="session")
def amp_smoke(smoke_run):
    return smoke_run("amp")


def comparison_of(reports, recipe):
    import json

    return json.loads((reports / "results" / recipe / "comparison.json").read_text())
