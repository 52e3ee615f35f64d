"""The scheduler's seams stay seams: no import circle among its modules, the local backend takes
nothing private from the rest of the scheduler, the two backends implement the one interface, and
no module asks which backend it is on (docs/design.md, "The scheduler's backend")."""

from __future__ import annotations

import ast
import concurrent.futures
import gc
import re
from pathlib import Path

import pytest

import rlinf.scheduler.backend as backend_module
from rlinf.scheduler.backend import Backend, current_backend, forget_cluster, note_cluster

ROOT = Path(__file__).resolve().parents[2]
SCHEDULER = ROOT / "rlinf" / "scheduler"
_PARSER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ast-parse")


def _parse(path: Path) -> ast.Module:
    """On a thread of its own (see tests/test_layers.py: CPython 3.11's AST recursion counter)."""
    return _PARSER.submit(ast.parse, path.read_text(encoding="utf-8")).result()


def _modules() -> dict[str, Path]:
    out = {}
    for path in SCHEDULER.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return out


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the scheduler modules it imports anywhere in its file (top level, inside
    functions, under ``TYPE_CHECKING``); ``from package import name`` counts as importing the
    submodule when ``name`` is one, else the package."""
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_inside_the_scheduler():
    modules = _modules()
    graph = import_graph(modules)
    assert {"rlinf.scheduler.backend", "rlinf.scheduler.ray_backend", "rlinf.scheduler.local.backend"} <= set(graph)
    found = circles(graph)
    assert not found, "import circles in rlinf/scheduler (break them; imports inside functions count):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_the_local_backend_imports_nothing_private_from_the_rest_of_the_scheduler():
    wrong = []
    modules = _modules()
    for name, path in modules.items():
        if not name.startswith("rlinf.scheduler.local"):
            continue
        outside: set[str] = set()  # names bound to modules of the rest of the scheduler
        tree = _parse(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlinf.scheduler") \
                    and not node.module.startswith("rlinf.scheduler.local"):
                for alias in node.names:
                    if alias.name.startswith("_"):
                        wrong.append(f"{name} imports {alias.name} from {node.module}")
                    if f"{node.module}.{alias.name}" in modules:
                        outside.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("rlinf.scheduler") and not alias.name.startswith("rlinf.scheduler.local"):
                        outside.add(alias.asname or alias.name.split(".")[0])
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in outside:
                    wrong.append(f"{name} reads {ast.unparse(node)}")
    assert not wrong, "\n".join(sorted(wrong))


def test_both_backends_implement_the_interface():
    from rlinf.scheduler.local.backend import LocalBackend
    from rlinf.scheduler.ray_backend import RayBackend

    abstract = set(Backend.__abstractmethods__)
    assert {"start_workers", "submit", "result", "connect_pipes", "create_channel"} <= abstract
    for cls in (RayBackend, LocalBackend):
        backend = cls()  # an abstract method left out would refuse this
        assert isinstance(backend, Backend) and all(name in cls.__dict__ for name in abstract), cls
    assert (RayBackend.name, RayBackend.in_process, LocalBackend.name, LocalBackend.in_process) == \
        ("ray", False, "local", True)


#: where a backend's kind may be read inside the scheduler: the registry of this process's clusters
KIND_READERS = {"rlinf/scheduler/backend.py"}


def test_no_scheduler_module_asks_which_backend_it_is_on():
    asks = []
    for path in SCHEDULER.rglob("*.py"):
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Attribute) and node.attr in ("is_local", "in_process") \
                    and str(path.relative_to(ROOT)) not in KIND_READERS:
                asks.append(f"{path.relative_to(ROOT)}:{node.lineno} reads .{node.attr}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and \
                    any(isinstance(a, ast.Constant) and a.value in ("is_local", "local") for a in node.args):
                asks.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "is_active":
                asks.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not asks, "ask the cluster's backend instead:\n" + "\n".join(sorted(asks))


def test_no_is_local_check_or_process_flag_is_left_anywhere():
    """The compatibility shims are gone (``cluster.is_local``, ``rlinf.scheduler.local.is_active()``
    / ``set_active()``): code outside the scheduler asks ``cluster.backend`` or is passed what it
    needs. A text search (an AST walk of ~1000 files costs seconds)."""
    pattern = re.compile(r"\.is_local\b|\bis_local\s*=|\b(is_active|set_active)\s*\(")
    found = []
    for top in ("rlinf", "tests", "toolkits", "bench", "examples"):
        for path in (ROOT / top).rglob("*.py"):
            if path == Path(__file__).resolve():
                continue
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not found, "ask cluster.backend (e.g. .in_process) or pass it explicitly:\n" + "\n".join(found)


class _Cluster:
    def __init__(self, name: str):
        self.backend = type("B", (), {"name": name, "in_process": name == "local"})()


def test_new_channels_follow_the_cluster_made_last_while_it_lives(monkeypatch):
    # a registry of its own: a cluster an earlier test left alive in this process must not count
    monkeypatch.setattr(backend_module, "_CLUSTERS", [])
    before = current_backend()
    assert before is None
    ray_like, local = _Cluster("ray"), _Cluster("local")
    note_cluster(ray_like)
    note_cluster(local)
    assert current_backend() is local.backend
    forget_cluster(None)  # the in-process ones
    assert current_backend() is ray_like.backend
    note_cluster(local)
    del local
    gc.collect()
    assert current_backend() is ray_like.backend  # a cluster nobody holds is gone
    forget_cluster(ray_like)
    assert current_backend() is before


@pytest.mark.parametrize("module", ["rlinf.scheduler.placement", "rlinf.scheduler.config"])
def test_pure_python_parts_import_no_backend(module):
    graph = import_graph(_modules())
    reach, todo = set(), [module]
    while todo:
        for nxt in graph[todo.pop()] - reach:
            reach.add(nxt)
            todo.append(nxt)
    assert not {m for m in reach if m.endswith(("ray_backend", "ray_channel"))}, sorted(reach)
