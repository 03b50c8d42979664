"""No two modules of common/ import each other, directly or around a loop: each fact has one home and
the imports run one way (a function-level import counts: it is a circle all the same)."""
import ast

from conftest import REPO


def _imports() -> dict[str, set[str]]:
    graph = {}
    for path in sorted((REPO / "common").glob("*.py")):
        name = f"common.{path.stem}"
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "common":
                found |= {f"common.{a.name}" for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("common."):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("common.")}
        graph[name] = found - {name}
    return graph


def test_common_has_no_import_circle():
    graph = _imports()
    state, circles = {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])
    assert not circles, circles
