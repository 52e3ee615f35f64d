"""The README's main job: a bad placement fails with one line before Ray starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "scheduler_demo" / "main_demo.py"


def test_bad_placement_is_one_error_line_and_exit_2():
    out = subprocess.run([sys.executable, str(DEMO), "cluster.component_placement.env=0-9"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == ["error: cluster.component_placement.env: accelerator rank 4 in '0-9' is out of "
                     "range; valid accelerator ranks are 0-3 (1 node x 4)"]


def test_unknown_cluster_key_is_named():
    out = subprocess.run([sys.executable, str(DEMO), "+cluster.num_gpus=8"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: cluster.num_gpus: unknown key")


@pytest.mark.slow
def test_main_job_runs_end_to_end():
    env = {**os.environ, "RAY_ADDRESS": "local"}  # its own Ray, not the test cluster's
    out = subprocess.run([sys.executable, str(DEMO), "demo.steps=4", "demo.sync_every=2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "env,policy      disaggregated" in text and "policy,trainer  hybrid" in text
    assert "weight sync trainer[0] -> policy[0-1]: version 4" in text  # 2 rounds x 2 updates
    assert "8 observation batches streamed" in text
    # every key drained: nothing queued, nobody blocked, every item taken once
    assert re.findall(r"'queued': (\d+)", text) == ["0"] * 4
    assert re.findall(r"'blocked_puts': (\d+)", text) == ["0"] * 4
    puts = re.findall(r"'total_put': (\d+), 'total_got': (\d+)", text)
    assert puts and all(p == g for p, g in puts)
