"""common/ is laid out by the process that runs the code, and the imports run one way: a module may
import its own layer and those its layer lists below, never a layer above; no two modules import each
other, directly or around a loop; the parent-side layers import no torch. Imports are read from the
code (a function-level import counts)."""
import ast
import subprocess
import sys
from pathlib import Path

from conftest import REPO

BASE = {"errors", "cli", "presets", "env", "catalog", "spec", "workload_specs", "startup",  # shared by every layer,
        "files"}  # torch-free
API = {"harness", "data", "graphs", "server", "distributed", "compile_cache"}  # the scripts import
LAYERS = {  # layer -> the layers it may import, besides its own
    "base": set(),
    "analysis": {"base"},
    "render": {"base", "analysis"},
    "workloads": {"base", "analysis"},
    "measure": {"base", "analysis", "render"},  # a run writes its own trace's page (render.trace_page)
    "api": {"base", "analysis", "workloads", "measure"},
    "runners": {"base", "analysis", "render", "workloads"},
}
TORCH_FREE = ("base", "analysis", "render", "runners")


def _modules() -> dict[str, str]:
    """common.<...> module name -> its layer, for every module file under common/."""
    found = {}
    for path in sorted((REPO / "common").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":  # a layer's package: its own imports count (common/__init__ has none)
            if len(parts) == 3:
                found[".".join(parts[:2])] = parts[1]
            continue
        name = ".".join(parts)
        if len(parts) == 3:
            found[name] = parts[1]
        else:
            assert parts[1] in BASE | API, f"{name}: a module at the top of common/ is in BASE or API, or in a layer"
            found[name] = "base" if parts[1] in BASE else "api"
    return found


def _imports(name: str) -> set[str]:
    """The common.* modules that a module imports ('from common.x import y' counts y if it is a module)."""
    path = _source(name)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("common"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if (REPO / (sub.replace(".", "/") + ".py")).exists() else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("common.")}
    return found - {name}


def _source(name: str) -> Path:
    path = REPO / (name.replace(".", "/") + ".py")
    return path if path.exists() else REPO / name.replace(".", "/") / "__init__.py"


def _torch_imports(name: str) -> list[str]:
    tree = ast.parse(_source(name).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    return [m for m in names if m == "torch" or m.startswith("torch.") or m == "torchvision"]


def test_every_import_runs_down_the_layers():
    layers = _modules()
    wrong = [f"{m} ({layers[m]}) imports {i} ({layers[i]})" for m in layers for i in sorted(_imports(m))
             if i in layers and layers[i] != layers[m] and layers[i] not in LAYERS[layers[m]]]
    assert not wrong, wrong
    assert set(layers.values()) == set(LAYERS)


def test_common_has_no_import_circle():
    modules = _modules()
    graph = {m: _imports(m) & modules.keys() for m in modules}
    state, circles = {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])
    assert not circles, circles


def test_the_parent_side_imports_no_torch():
    """In the code (also inside functions), and in fact: importing every such module loads no torch."""
    chosen = [m for m, layer in _modules().items() if layer in TORCH_FREE]
    assert not {m: t for m in chosen if (t := _torch_imports(m))}
    probe = (f"import sys\nfor m in {chosen!r}: __import__(m)\n"
             "print(sorted(k for k in ('torch', 'torchvision') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def _docstrings(tree) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return {id(n.body[0].value) for n in nodes if n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant) and isinstance(n.body[0].value.value, str)}


def test_no_code_outside_the_workloads_names_one():
    """A runner, the CLI, the harness and the renderers learn the workloads from their specs: no string or
    name in their code is a workload's (a docstring or a comment may cite where a figure was measured)."""
    import re

    from common.workload_specs import workload_names

    named = re.compile(r"\b(" + "|".join(workload_names()) + r")\b")
    found = []
    for path in sorted((REPO / "common").rglob("*.py")):
        if path.parent.name == "workloads":
            continue
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            literal = isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            text = (node.value if literal
                    else node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                    else node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else "")
            if named.search(text):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {text[:60]!r}")
    assert not found, found
