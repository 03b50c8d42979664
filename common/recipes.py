"""The recipes on disk: recipes/<recipe>/<workload>_{slow,fast}.py plus recipes/<recipe>/__init__.py
holding the recipe's settings (TITLE, PARITY tolerance, DEFAULTS overrides)."""
import importlib
from pathlib import Path

from common.env import REPO_ROOT
from common.errors import CookbookError
from common.presets import WORKLOADS

RECIPES_DIR = REPO_ROOT / "recipes"
VARIANTS = ("slow", "fast")


def available() -> list[str]:
    return sorted(d.name for d in RECIPES_DIR.iterdir()
                  if (d / "__init__.py").exists() and any(d.glob("*_slow.py")))


def check(recipe: str) -> str:
    names = available()
    if recipe not in names:
        raise CookbookError(f"unknown recipe {recipe!r}; choose one of: {', '.join(names)}")
    return recipe


def workloads(recipe: str) -> list[str]:
    folder = RECIPES_DIR / recipe
    return [w for w in WORKLOADS if all((folder / f"{w}_{v}.py").exists() for v in VARIANTS)]


def script(recipe: str, workload: str, variant: str) -> Path:
    return RECIPES_DIR / recipe / f"{workload}_{variant}.py"


def settings(recipe: str):
    return importlib.import_module(f"recipes.{recipe}")


def identify(script_file: str) -> tuple[str, str, str]:
    """recipes/amp/resnet18_fast.py -> ('amp', 'resnet18', 'fast')."""
    path = Path(script_file).resolve()
    workload, _, variant = path.stem.rpartition("_")
    if workload not in WORKLOADS or variant not in VARIANTS:
        raise CookbookError(f"{path.name}: a recipe script is named <workload>_<slow|fast>.py, "
                            f"workload one of {', '.join(WORKLOADS)}")
    return path.parent.name, workload, variant
