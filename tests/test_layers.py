"""The house's layers import downward only (docs/design.md): a module of one package of rlinf
imports only packages of its own layer or below."""

from __future__ import annotations

import ast
import concurrent.futures
from pathlib import Path

#: package -> layer; a package may import packages of a lower or equal layer
LAYERS = {"utils": 0, "scheduler": 1, "config": 2, "data": 2, "algorithms": 2, "models": 3, "engines": 3,
          "envs": 3, "rewards": 3, "objectives": 4, "workers": 5, "runners": 6}
ROOT = Path(__file__).resolve().parents[1] / "rlinf"
_PARSER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ast-parse")


def _parse(path: Path) -> ast.Module:
    """``ast.parse`` of ``path`` on a thread of its own: CPython 3.11 can leave a thread's AST
    recursion counter off after an earlier test's deep recursion ("AST constructor recursion depth
    mismatch"), and a fresh thread starts with a clean one."""
    return _PARSER.submit(ast.parse, path.read_text(encoding="utf-8")).result()


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(_parse(path)):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        out |= {n.split(".")[1] for n in names if n.startswith("rlinf.") and n.count(".") >= 1}
    return out


def test_every_package_has_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages == set(LAYERS), f"give each package a layer: {sorted(packages ^ set(LAYERS))}"


def test_imports_go_downward_only():
    wrong = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if len(rel.parts) < 2:
            continue
        own = rel.parts[0]
        for target in _imports(path):
            if target in LAYERS and LAYERS[target] > LAYERS[own]:
                wrong.append(f"{rel} ({own}, layer {LAYERS[own]}) imports rlinf.{target} (layer {LAYERS[target]})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_two_packages_import_each_other():
    """Packages of one layer may import each other one way only (engines drive the worlds of
    rlinf.envs, which import only the simulator interface in rlinf.envs.base and rlinf.utils)."""
    edges: dict[str, dict[str, str]] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if len(rel.parts) < 2:
            continue
        for target in _imports(path) - {rel.parts[0]}:
            edges.setdefault(rel.parts[0], {}).setdefault(target, str(rel))
    both = [f"{a} <-> {b} ({edges[a][b]}, {edges[b][a]})" for a in sorted(edges) for b in sorted(edges[a])
            if a < b and a in edges.get(b, {})]
    assert not both, "\n".join(both)


def test_runners_do_not_import_worker_internals():
    """Runners launch workers (their classes, link names and the messages they exchange) but
    take algorithm glue from rlinf.objectives, never from a worker's module of helpers."""
    for path in (ROOT / "runners").rglob("*.py"):
        for node in ast.walk(_parse(path)):
            if (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlinf.workers.")
                    and not node.module.endswith(".messages")):
                for alias in node.names:
                    assert alias.name.endswith(("Worker", "_LINK", "_PIPE")) or alias.name.isupper(), \
                        f"{path.relative_to(ROOT)} imports {alias.name} from {node.module}"


def _runner_modules() -> dict[str, set[str]]:
    """Every module under rlinf/runners -> the rlinf.runners modules it imports (anywhere in it)."""
    out = {}
    for path in (ROOT / "runners").rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        targets = set()
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlinf.runners"):
                targets.add(node.module)
                targets |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("rlinf.runners")}
        out[name] = targets
    return out


#: recipes that extend another one (docs/design.md "Recipes": the tool agent is the math run with a
#: multi-turn rollout worker); no other recipe may import another's folder
EXTENDS = {"tool_agent": {"math"}, "embodied_offpolicy": {"embodied"}}


def test_shared_runner_code_imports_no_recipe_and_recipes_not_each_other():
    """docs/design.md "Recipes": modules directly under rlinf/runners/ are the shared run layer;
    each recipe folder imports that layer only (and the recipe it extends, :data:`EXTENDS`)."""
    modules = _runner_modules()
    recipes = {m.split(".")[2] for m in modules if m.count(".") >= 3}
    assert {"math", "embodied", "web_agent"} <= recipes
    wrong = []
    for module, targets in modules.items():
        own = module.split(".")[2] if module.count(".") >= 3 else None
        for target in targets:
            parts = target.split(".")
            other = parts[2] if len(parts) >= 3 and parts[2] in recipes else None
            if other is not None and other != own and other not in EXTENDS.get(own, ()):
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_circle_under_runners():
    modules = _runner_modules()
    graph = {m: {t for t in targets if t in modules and t != m} for m, targets in modules.items()}
    # a package's __init__ is not an edge back: a module importing its own package is fine
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node)
