"""Every run a test starts names its device, so the suite asserts the same things on a GPU machine
(where `--device auto` would pick CUDA) as on a CPU."""
import ast

from conftest import REPO

RUNNERS = ("common.runners.compare", "common.runners.sweep", "common.runners.climb", "common.runners.diagnose")


def _strings(call: ast.Call) -> list[str]:
    return [n.value for n in ast.walk(call) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_every_smoke_run_started_by_a_test_passes_a_device():
    missing = []
    for path in sorted((REPO / "tests").glob("test_*.py")) + [REPO / "tests" / "conftest.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Call, ast.List)):
                words = _strings(node) if isinstance(node, ast.Call) else [
                    e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                runs = "--smoke" in words and any(r in words for r in RUNNERS)
                if runs and "--device" not in words:
                    missing.append(f"{path.name}:{node.lineno}")
    assert not missing, f"runs without --device: {missing}"
