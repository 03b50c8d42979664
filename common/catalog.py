"""The recipes on disk: recipes/<recipe>/<pair>_{slow,fast}.py plus recipes/<recipe>/__init__.py
holding the recipe's settings (TITLE, PARITY tolerance, EVIDENCE, DEFAULTS overrides).

A pair is named after its workload (`churn`, `resnet18`), or after its workload and a scenario
when a recipe has two pairs on one workload (`churn_serving` beside `churn`, which trains)."""
import importlib
from pathlib import Path

from common.env import REPO_ROOT
from common.errors import CookbookError
from common.presets import WORKLOADS

RECIPES_DIR = REPO_ROOT / "recipes"
VARIANTS = ("slow", "fast")
MEASURES = ("step", "first step")  # what a recipe's headline speedup is of (MEASURE in its settings)


def available() -> list[str]:
    return sorted(d.name for d in RECIPES_DIR.iterdir()
                  if (d / "__init__.py").exists() and any(d.glob("*_slow.py")))


def check(recipe: str) -> str:
    names = available()
    if recipe not in names:
        raise CookbookError(f"unknown recipe {recipe!r}; choose one of: {', '.join(names)}")
    return recipe


def served(recipe: str) -> bool:
    """Whether the recipe's twins are servers (SERVER in its settings), measured under load by
    common.runners.serve rather than step by step by the harness."""
    return recipe in available() and bool(getattr(settings(recipe), "SERVER", False))


def check_stepped(recipe: str, what: str) -> str:
    """check(), and a served recipe refused with what to run instead: `what` runs step-harness twins."""
    check(recipe)
    if served(recipe):
        raise CookbookError(f"{recipe}: its twins are servers, measured under load by `make recipe-{recipe}` (its "
                            f"report holds a profiled window and reports/traces/{recipe}/); {what} is for the step "
                            "harness's recipes")
    return recipe


def compiles(recipe: str) -> bool:
    """Whether any of the recipe's scripts calls torch.compile (on a CPU its children then want
    Inductor's C++ backend warmed once: launch.warm_server)."""
    return any(".compile(" in p.read_text() for p in (RECIPES_DIR / recipe).glob("*.py"))


def measure(recipe: str) -> str:
    """What the recipe's headline speedup is of (MEASURE in its settings): "step", the steady step
    time, or "first step", the time from a process's start to its first finished step."""
    found = getattr(settings(recipe), "MEASURE", "step")
    if found not in MEASURES:
        raise CookbookError(f"recipes/{recipe}/__init__.py: MEASURE {found!r} is none of {', '.join(MEASURES)}")
    return found


def stepped() -> list[str]:
    """The recipes the step harness runs: every one but the served."""
    return [r for r in available() if not served(r)]


def swept() -> list[str]:
    """The recipes with a regime map (SWEEP in their settings: `make sweep-<recipe>`)."""
    return [r for r in available() if getattr(settings(r), "SWEEP", None)]


def workloads(recipe: str) -> list[str]:
    """The recipe's pairs, workload by workload: churn, churn_serving, resnet18."""
    folder = RECIPES_DIR / recipe
    stems = {p.stem[:-len("_slow")] for p in folder.glob("*_slow.py")}
    pairs = [s for s in stems if (folder / f"{s}_fast.py").exists() and workload_of(s)]
    return sorted(pairs, key=lambda s: (WORKLOADS.index(workload_of(s)), s))


def main_pair(recipe: str) -> str:
    """The pair a recipe's README headlines (MAIN in its settings; a recipe of one pair: that one),
    the one `make tour` measures."""
    pairs = workloads(recipe)
    main = getattr(settings(recipe), "MAIN", None)
    if main is None and len(pairs) == 1:
        return pairs[0]
    if main not in pairs:
        raise CookbookError(f"recipes/{recipe}/__init__.py: MAIN {main!r} is none of its pairs ({', '.join(pairs)})")
    return main


def workload_of(pair: str) -> str | None:
    """churn_serving -> churn; resnet18 -> resnet18; anything else -> None."""
    return next((w for w in WORKLOADS if pair == w or pair.startswith(w + "_")), None)


def script(recipe: str, workload: str, variant: str) -> Path:
    return RECIPES_DIR / recipe / f"{workload}_{variant}.py"


def module(recipe: str, workload: str, variant: str) -> str:
    """The same script as `python -m` runs it."""
    return f"recipes.{recipe}.{workload}_{variant}"


def settings(recipe: str):
    return importlib.import_module(f"recipes.{recipe}")


def not_applicable(recipe: str, profile) -> str | None:
    """Why the recipe's technique does not exist on this device (its settings' NEEDS against the
    device profile, common.analysis.device), or None."""
    return profile.not_applicable(getattr(settings(recipe), "NEEDS", ()))


def parity_rule(recipe: str, pair: str) -> dict:
    """The recipe's PARITY rule for one pair: PARITY["workloads"][pair] overrides its keys."""
    rule = dict(settings(recipe).PARITY)
    overrides = rule.pop("workloads", {})
    return {**rule, **overrides.get(pair, {})}


def identify(script_file: str) -> tuple[str, str, str, str]:
    """recipes/amp/resnet18_fast.py -> ('amp', 'resnet18', 'resnet18', 'fast') as (recipe, pair,
    workload, variant); recipes/cuda_graphs/churn_serving_slow.py -> (..., 'churn_serving', 'churn',
    'slow'); outside recipes/ the name only has to start with a workload: baselines/churn_mlp.py ->
    ('baselines', 'churn', 'churn', 'mlp')."""
    path = Path(script_file).resolve()
    in_recipes = path.parent.parent == RECIPES_DIR
    if in_recipes:
        pair, _, variant = path.stem.rpartition("_")
        workload = workload_of(pair)
        if workload is None or variant not in VARIANTS:
            raise CookbookError(f"{path.name}: a script here is named <workload>[_<scenario>]_<slow|fast>.py, "
                                f"workload one of {', '.join(WORKLOADS)}")
        return path.parent.name, pair, workload, variant
    workload = next((w for w in WORKLOADS if path.stem.startswith(w + "_")), None)
    variant = path.stem[len(workload) + 1:] if workload else ""
    if workload is None or not variant:
        raise CookbookError(f"{path.name}: a script here is named <workload>_<name>.py, workload one of "
                            f"{', '.join(WORKLOADS)}")
    return path.parent.name, workload, workload, variant


def script_settings(script_file: str):
    """The settings module of a script's folder (recipes/<recipe>/__init__.py, baselines/__init__.py),
    or None for a folder that is not a package."""
    folder = Path(script_file).resolve().parent
    try:
        dotted = ".".join(folder.relative_to(REPO_ROOT).parts)
        return importlib.import_module(dotted) if dotted else None
    except (ValueError, ImportError):
        return None
