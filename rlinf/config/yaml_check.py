"""Check the YAML files of a Hydra config before Hydra reads them, so a syntax slip is one line.

Hydra reports a tab, an unclosed bracket or a bad indent inside a long traceback, and accepts a
duplicate key (the later one silently wins). :func:`check_config_files` reads the chosen config
and every file its ``defaults:`` list pulls in (recursively, from the config folder and the shared
``config/`` folder) with a strict loader and raises :class:`ConfigFileError` whose message is
``<file>:<line>:<column>: <what is wrong>``.

Example:
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "run.yaml"), "w").write("a: 1\\nb: 2\\na: 3\\n")
    >>> try:
    ...     check_config_files(d, "run")
    ... except ConfigFileError as exc:
    ...     print(str(exc).rsplit(".yaml:", 1)[1])
    3:1: duplicate key 'a' (first at line 1)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import yaml

__all__ = ["ConfigFileError", "check_config_files", "config_name_from_argv", "overrides_from_argv"]


class ConfigFileError(ValueError):
    """A config file that is not valid YAML (or repeats a key); the message is one line."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue
            if key in seen:
                raise yaml.MarkedYAMLError(problem=f"duplicate key {key!r} (first at line {seen[key]})",
                                           problem_mark=key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _load(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: cannot be read ({exc})") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path
        problem = exc.problem or exc.context or "invalid YAML"
        if "\t" in text and "'\\t'" in problem:
            problem = "a tab character; YAML indents with spaces only"
        elif exc.context and exc.problem:
            at = f" at line {exc.context_mark.line + 1}" if exc.context_mark is not None else ""
            problem = f"{exc.problem} ({exc.context}{at})"
        raise ConfigFileError(f"{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{path}: {exc}".replace("\n", " ")) from None


def _default_files(defaults: Iterable[Any]) -> list[str]:
    """Relative paths (``group/name.yaml``) of the config files a defaults list pulls in."""
    out = []
    for entry in defaults:
        if isinstance(entry, str):
            if entry == "_self_":
                continue
            name = entry.split("@", 1)[0]
            out.append(f"{name}.yaml")
        elif isinstance(entry, dict):
            for group, name in entry.items():
                group = str(group).split("@", 1)[0]
                if group.startswith(("override hydra", "hydra")) or name is None:
                    continue
                group = group.removeprefix("override ").removeprefix("optional ")
                out.append(f"{group}/{name}.yaml")
    return out


def check_config_files(config_dir: str, config_name: str, search_dirs: Iterable[str] = ()) -> None:
    """Read ``config_dir/<config_name>.yaml`` and what its defaults pull in (looked up in
    ``config_dir`` then ``search_dirs``); raise :class:`ConfigFileError` at the first problem.
    Files that cannot be found are left to Hydra, which names them."""
    dirs = [config_dir, *search_dirs]
    todo = [os.path.join(config_dir, config_name if config_name.endswith(".yaml") else f"{config_name}.yaml")]
    seen: set[str] = set()
    while todo:
        path = todo.pop(0)
        if path in seen or not os.path.isfile(path):
            continue
        seen.add(path)
        data = _load(path)
        defaults = data.get("defaults") if isinstance(data, dict) else None
        if not isinstance(defaults, list):
            continue
        for rel in _default_files(defaults):
            for d in dirs:
                candidate = os.path.join(d, rel)
                if os.path.isfile(candidate):
                    todo.append(candidate)
                    break


def config_name_from_argv(argv: list[str], default: str) -> str:
    """The ``--config-name`` / ``-cn`` value of a Hydra command line, else ``default``."""
    for i, arg in enumerate(argv):
        for flag in ("--config-name", "-cn"):
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return default


#: Hydra flags that take a value (the value is not an override)
_VALUE_FLAGS = ("--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd", "--experimental-rerun")


def overrides_from_argv(argv: list[str]) -> list[str]:
    """The ``key=value`` overrides of a Hydra command line (flags and their values dropped).

    >>> overrides_from_argv(["--config-name", "x", "a.b=1", "-m", "+c=2"])
    ['a.b=1', '+c=2']
    """
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUE_FLAGS:
            skip = True
        elif not arg.startswith("-"):
            out.append(arg)
    return out
