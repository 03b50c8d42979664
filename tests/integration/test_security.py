"""Security: loopback by default, no stray unpickling, safe torch.load, no credentials in output."""
import json
import os
import re
import subprocess
import sys

from common.render import tensorboard

from conftest import REPO

SOURCES = [p for folder in ("common", "recipes", "baselines") for p in (REPO / folder).rglob("*.py")]


def test_tensorboard_binds_loopback_unless_asked():
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^HOST \?= 127\.0\.0\.1$", makefile, re.M)
    assert tensorboard.DEFAULT_HOST == "127.0.0.1"  # and test_tensorboard checks the bound address


def test_no_pickle_loading_outside_the_cifar10_reader():
    for path in SOURCES:
        text = path.read_text()
        if path.name != "cifar10.py":
            assert not re.search(r"pickle\.loads?\(", text), f"{path} unpickles data"
        for call in re.findall(r"torch\.load\([^)]*\)", text):
            assert "weights_only=True" in call, f"{path}: {call}"


def test_kaggle_credentials_never_reach_output(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COOKBOOK_OFFLINE"}  # let kagglehub try (and fail)
    env.update(KAGGLE_USERNAME="sentinel-user-4931", KAGGLE_KEY="sentinel-key-8f2a77")
    proc = subprocess.run([sys.executable, "-m", "common.runners.compare", "amp", "--smoke", "--device", "cpu",
                           "--workloads", "churn",
                           "--reports-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    written = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".png"]
    for text in [proc.stdout, proc.stderr, *written]:
        assert "sentinel-user-4931" not in text and "sentinel-key-8f2a77" not in text
    comparison = json.loads((tmp_path / "results" / "amp" / "comparison.json").read_text())
    assert comparison["workloads"]["churn"]["slow"]["data_source"]["kind"] in ("real", "synthetic")
