"""The recipes on disk: recipes/<recipe>/<pair>_{slow,fast}.py plus recipes/<recipe>/__init__.py, which
exports the recipe's spec (`RECIPE = common.spec.RecipeSpec(...)`: title, parity, evidence, sizes...).

A pair is named after its workload (`churn`, `resnet18`), or after its workload and a scenario
when a recipe has two pairs on one workload (`churn_serving` beside `churn`, which trains)."""
import importlib
from functools import cache
from pathlib import Path

from common.env import REPO_ROOT
from common.errors import CookbookError
from common.spec import RecipeSpec
from common.spec import check as check_spec
from common.workload_specs import workload_names

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


def served(recipe: str) -> bool:
    """Whether the recipe's twins are servers (its spec's serving), measured under load by
    common.runners.serve rather than step by step by the harness."""
    return recipe in available() and spec(recipe).serving is not None


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
    """What the recipe's headline speedup is of (its spec's measure, one of MEASURES): "step", the steady
    step time, or "first step", the time from a process's start to its first finished step."""
    return spec(recipe).measure


def stepped() -> list[str]:
    """The recipes the step harness runs: every one but the served."""
    return [r for r in available() if not served(r)]


def swept() -> list[str]:
    """The recipes with a regime map (their spec's sweep: `make sweep-<recipe>`)."""
    return [r for r in available() if spec(r).sweep is not None]


def workloads(recipe: str) -> list[str]:
    """The recipe's pairs, workload by workload: churn, churn_serving, resnet18."""
    folder = RECIPES_DIR / recipe
    stems = {p.stem[:-len("_slow")] for p in folder.glob("*_slow.py")}
    pairs = [s for s in stems if (folder / f"{s}_fast.py").exists() and workload_of(s)]
    return sorted(pairs, key=lambda s: (workload_names().index(workload_of(s)), s))


def main_pair(recipe: str) -> str:
    """The pair a recipe's README headlines (its spec's main; a recipe of one pair: that one), the one
    `make tour` measures."""
    return spec(recipe).main or workloads(recipe)[0]


def workload_of(pair: str) -> str | None:
    """churn_serving -> churn; resnet18 -> resnet18; anything else -> None."""
    return next((w for w in workload_names() if pair == w or pair.startswith(w + "_")), None)


def script(recipe: str, workload: str, variant: str) -> Path:
    return RECIPES_DIR / recipe / f"{workload}_{variant}.py"


def module(recipe: str, workload: str, variant: str) -> str:
    """The same script as `python -m` runs it."""
    return f"recipes.{recipe}.{workload}_{variant}"


@cache
def spec(recipe: str) -> RecipeSpec:
    """The recipe's spec, checked once against its pairs on disk (common.spec.check)."""
    package = importlib.import_module(f"recipes.{recipe}")
    if "RECIPE" not in vars(package):
        raise CookbookError(f"recipes/{recipe}/__init__.py: no RECIPE (a common.spec.RecipeSpec)")
    return check_spec(recipe, package.RECIPE, workloads(recipe))


def not_applicable(recipe: str, profile) -> str | None:
    """Why the recipe's technique does not exist on this device (its spec's needs against the device
    profile, common.analysis.device), or None."""
    return profile.not_applicable(spec(recipe).needs)


def parity_rule(recipe: str, pair: str) -> dict:
    """The recipe's parity rule for one pair (its own where the spec gives one), as aggregate.parity reads it."""
    return spec(recipe).parity_rule(pair)


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
                                f"workload one of {', '.join(workload_names())}")
        return path.parent.name, pair, workload, variant
    workload = next((w for w in workload_names() if path.stem.startswith(w + "_")), None)
    variant = path.stem[len(workload) + 1:] if workload else ""
    if workload is None or not variant:
        raise CookbookError(f"{path.name}: a script here is named <workload>_<name>.py, workload one of "
                            f"{', '.join(workload_names())}")
    return path.parent.name, workload, workload, variant


def script_defaults(script_file: str) -> dict:
    """The sizes a script runs at, by pair and mode, from its folder: a recipe's spec, the baselines' and
    the ladder's DEFAULTS; nothing for a script elsewhere (a user's, a test's)."""
    folder = Path(script_file).resolve().parent
    if folder.parent == RECIPES_DIR and folder.name in available():
        return spec(folder.name).defaults
    if folder == REPO_ROOT / "baselines":
        from baselines import DEFAULTS
    elif folder == REPO_ROOT / "ladder":
        from ladder import DEFAULTS
    else:
        return {}
    return DEFAULTS
