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
    """recipes/amp/resnet18_fast.py -> ('amp', 'resnet18', 'fast'); outside recipes/ the name only
    has to start with a workload: baselines/churn_mlp.py -> ('baselines', 'churn', 'mlp')."""
    path = Path(script_file).resolve()
    workload = next((w for w in WORKLOADS if path.stem.startswith(w + "_")), None)
    variant = path.stem[len(workload) + 1:] if workload else ""
    in_recipes = path.parent.parent == RECIPES_DIR
    if workload is None or not variant or (in_recipes and variant not in VARIANTS):
        shape = "<workload>_<slow|fast>.py" if in_recipes else "<workload>_<name>.py"
        raise CookbookError(f"{path.name}: a script here is named {shape}, workload one of {', '.join(WORKLOADS)}")
    return path.parent.name, workload, variant


def script_settings(script_file: str):
    """The settings module of a script's folder (recipes/<recipe>/__init__.py, baselines/__init__.py),
    or None for a folder that is not a package."""
    folder = Path(script_file).resolve().parent
    try:
        dotted = ".".join(folder.relative_to(REPO_ROOT).parts)
        return importlib.import_module(dotted) if dotted else None
    except (ValueError, ImportError):
        return None
