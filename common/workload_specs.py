"""The workloads' specs, read without importing their modules (the base layer: every runner reads
them). The workloads are one module each: `common/workloads/<name>.py` holds the model, the data functions the
recipes call and `WORKLOAD = WorkloadSpec(...)`, what the runners need to know about it.

A runner never imports torch, and a model needs it, so the runners read a spec without importing its
module: the WORKLOAD assignment is literals and WorkloadSpec/LossParity calls only, evaluated from the
module's syntax tree (`workload_specs`). Its data functions are named as "module:function" and imported where
they are called. A module without a WORKLOAD line (telco, cifar10, ...) is a helper, not a workload."""
import ast
import importlib
import re
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path

from common.errors import CookbookError
from common.spec import GPU_CLASSES, MODES, LossParity

HERE = Path(__file__).parent / "workloads"
SIZE_KEYS = ("batch_size", "steps", "warmup", "profile_steps", "min_time")  # every mode gives these


@dataclass(frozen=True)
class WorkloadSpec:
    title: str  # what a reader calls it: "the churn MLP on Telco"
    sizes: dict  # mode ("cuda", "cpu", "smoke") -> the harness's defaults (SIZE_KEYS and its size_flags)
    load: str  # "module:function": data arg -> (*host arrays, source), read once per process
    check: str  # "module:function": a given --data path read as the loader reads it (one line if wrong)
    locate: str | None = None  # "module:function": data arg -> (path, ..., source), for the tour's one fetch
    dataset: str = ""  # its name in datasource's decisions (where the data came from, decided once)
    data_help: str = "PATH"  # what `--data <workload>=...` takes
    order: int = 100  # its place among the workloads (pairs, tables, plans), lowest first
    size_flags: dict = field(default_factory=dict)  # a size key beyond SIZE_KEYS -> its flag's help
    gpu_class_steps: dict = field(default_factory=dict)  # GPU class -> the step caps a sitting affords there
    baseline: str | None = None  # the naive script the diagnosis and the doctor's checks run (a module)
    noise_floor: bool = False  # the A/A (amp's pair of it) runs on it: the cheapest, steadiest step
    parity: LossParity | None = None  # a pair's parity where its recipe gives none
    row_samples: str | None = None  # the size key that counts a batch row's samples (a GPT's context: tokens)
    sample: str = "sample"  # what one of those samples is called in the reports' rates (a GPT's: token)
    answer: str | None = None  # a served twin's JSON key for its answers
    requests: str | None = None  # "module:function": data arg -> the rows a load generator sends (lists)


def _evaluate(node, where: str):
    """A literal, or a WorkloadSpec/LossParity call of literals; anything else is an error naming `where`."""
    calls = {"WorkloadSpec": WorkloadSpec, "LossParity": LossParity}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in calls and not node.args:
        return calls[node.func.id](**{k.arg: _evaluate(k.value, where) for k in node.keywords})
    if isinstance(node, ast.Dict):
        return {_evaluate(k, where): _evaluate(v, where) for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_evaluate(e, where) for e in node.elts)
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise CookbookError(f"{where}: WORKLOAD holds {ast.unparse(node)!r}: literals and WorkloadSpec/LossParity "
                            "calls only (a runner reads it without importing the module)") from None


def _declared(path: Path) -> WorkloadSpec | None:
    text = path.read_text()
    if not re.search(r"^WORKLOAD\s*=", text, re.M):
        return None
    where = f"common/workloads/{path.name}"
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["WORKLOAD"]:
            return check(path.stem, _evaluate(node.value, where))
    raise CookbookError(f"{where}: WORKLOAD is not a plain assignment")


def check(name: str, spec) -> WorkloadSpec:
    """The spec, checked: a wrong field is one line naming the workload and the field."""
    where = f"common/workloads/{name}.py"
    if not isinstance(spec, WorkloadSpec):
        raise CookbookError(f"{where}: WORKLOAD is not a common.workloads.WorkloadSpec")
    if set(spec.sizes) != set(MODES):
        raise CookbookError(f"{where}: WORKLOAD.sizes gives {sorted(spec.sizes)}, not the modes {', '.join(MODES)}")
    if spec.row_samples and spec.row_samples not in spec.size_flags:
        raise CookbookError(f"{where}: WORKLOAD.row_samples {spec.row_samples!r} is none of its size_flags")
    for mode, sizes in spec.sizes.items():
        missing = [k for k in (*SIZE_KEYS, *spec.size_flags) if k not in sizes]
        if missing:
            raise CookbookError(f"{where}: WORKLOAD.sizes[{mode!r}] lacks {', '.join(missing)}")
    if not set(spec.gpu_class_steps) <= set(GPU_CLASSES):
        unknown = sorted(set(spec.gpu_class_steps) - set(GPU_CLASSES))
        raise CookbookError(f"{where}: WORKLOAD.gpu_class_steps names {unknown}, none of {', '.join(GPU_CLASSES)}")
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.name in ("load", "check", "locate", "requests") and value is not None and ":" not in value:
            raise CookbookError(f"{where}: WORKLOAD.{f.name} {value!r} is not 'module:function'")
    return spec


@cache
def workload_specs() -> dict[str, WorkloadSpec]:
    """Every workload's spec by name, in their order."""
    found = {p.stem: s for p in sorted(HERE.glob("*.py")) if not p.stem.startswith("_") and (s := _declared(p))}
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


def workload_names() -> tuple[str, ...]:
    return tuple(workload_specs())


def workload_spec(name: str) -> WorkloadSpec:
    if name not in workload_specs():
        raise CookbookError(f"no workload {name!r}: one of {', '.join(workload_names())}")
    return workload_specs()[name]


def resolve(ref: str):
    """'common.workloads.telco:load' -> the function, imported now."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def noise_floor_workload() -> str:
    """The workload the A/A runs on: the one marked so, else the first."""
    return next((n for n, s in workload_specs().items() if s.noise_floor), workload_names()[0])
