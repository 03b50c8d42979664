import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def isolated_data(tmp_path_factory):
    """Synthetic data in a temporary cache, no network: every subprocess inherits this."""
    os.environ["COOKBOOK_DATA_DIR"] = str(tmp_path_factory.mktemp("data"))
    os.environ["COOKBOOK_OFFLINE"] = "1"
    yield


def run_module(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def amp_smoke(tmp_path_factory):
    """`python -m common.compare amp --smoke` once for the session: (process, reports folder)."""
    reports = tmp_path_factory.mktemp("reports")
    proc = run_module("common.compare", "amp", "--smoke", "--data", "synthetic", "--reports-dir", str(reports))
    return proc, reports
