"""The linter's rules (``[tool.ruff]`` in pyproject.toml) hold on the whole tree: ``ruff check``
finds nothing. Run it yourself with ``.venv/bin/ruff check .`` (``--fix`` repairs the import order
and the other mechanical findings)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    exe = Path(sys.executable).with_name("ruff")
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (it comes with the dev extra: bash scripts/setup_env.sh)")
    return [found]


def test_ruff_check_finds_nothing():
    out = subprocess.run([*_ruff(), "check", "--output-format", "concise", "--no-cache", "."], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"ruff check found:\n{out.stdout[-6000:]}{out.stderr[-2000:]}"
