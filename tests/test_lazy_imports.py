"""Imports inside functions only where they buy start-up time or break a real cycle, each with its
reason (docs/design.md, "Imports inside functions"): every ``import`` / ``from ... import`` inside
a function body of rlinf/ carries a ``# lazy: <why>`` comment on its line or the line above. A run
of import lines with nothing between them may share one comment (on the first line or above it)."""

from __future__ import annotations

import ast
import concurrent.futures
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: every package of rlinf/ (and its top-level modules): the rule holds for all of them
PACKAGES = ("algorithms", "config", "data", "engines", "envs", "models", "objectives", "rewards", "runners",
            "scheduler", "utils", "workers")
MARK = "# lazy:"
MIN_REASON = 8  # characters after the mark: a reason, not a bare tag
_PARSER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ast-parse")


def _parse(text: str) -> ast.Module:
    """On a thread of its own (see tests/test_layers.py: CPython 3.11's AST recursion counter)."""
    return _PARSER.submit(ast.parse, text).result()


def _has_reason(line: str) -> bool:
    at = line.find(MARK)
    return at >= 0 and len(line[at + len(MARK):].strip()) >= MIN_REASON


def imports_in_functions(tree: ast.Module) -> list[ast.stmt]:
    """The import statements of ``tree`` inside a function (or lambda) body, at any depth."""
    found = []

    def walk(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            walk(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, False)
    return found


def unexplained(text: str) -> list[int]:
    """Line numbers of the imports inside functions of ``text`` that give no reason.

    Example:
        >>> unexplained("def f():\\n    import json\\n")
        [2]
        >>> unexplained("def f():\\n    # lazy: torch costs 2 s; the CLI never calls f\\n    import torch\\n"
        ...             "    import torch.distributed as dist\\n")
        []
        >>> unexplained("import json\\ndef f():\\n    import os  # lazy: x\\n")
        [3]
    """
    lines = text.splitlines()
    nodes = imports_in_functions(_parse(text))
    import_lines = {n.lineno for n in nodes}
    missing = []
    for node in nodes:
        first = node.lineno
        while first - 1 in import_lines and not _has_reason(lines[first - 1]):  # a run shares one reason
            first -= 1
        candidates = range(node.lineno, first - 2, -1)
        if not any(1 <= i <= len(lines) and _has_reason(lines[i - 1]) for i in candidates):
            missing.append(node.lineno)
    return missing


def test_every_package_of_rlinf_is_covered():
    packages = {p.name for p in (ROOT / "rlinf").iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(PACKAGES), f"add to PACKAGES: {sorted(packages - set(PACKAGES))}"


def test_every_import_inside_a_function_says_why():
    files = sorted((ROOT / "rlinf").glob("*.py"))
    for package in PACKAGES:
        files += sorted((ROOT / "rlinf" / package).rglob("*.py"))
    bad = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        bad += [f"{path.relative_to(ROOT)}:{n}: {lines[n - 1].strip()}" for n in unexplained(text)]
    assert not bad, (f"{len(bad)} imports inside functions without a reason: move each to the module top, or "
                     f"keep it with '{MARK} <why>' (start-up cost, a cycle, an optional extra) on its line "
                     "or the line above:\n" + "\n".join(bad))
