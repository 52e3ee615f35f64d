"""bench/bench_grpo_vs_trl.py --quick still runs both sides and prints a numeric ratio (not asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.ray
def test_quick_mode_prints_a_ratio():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_grpo_vs_trl.py"), "--quick"],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    table = [line for line in out.stdout.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table if line.startswith("| a ")]
    assert rows, out.stdout
    ratio = float(rows[0][header.index("rlinf/TRL")])
    assert ratio > 0
    lengths = rows[0][header.index("mean length rlinf / TRL")].split("/")
    assert float(lengths[0]) == float(lengths[1]) == 16.0  # both sides generated exactly the budget
