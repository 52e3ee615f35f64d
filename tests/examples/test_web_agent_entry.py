"""The web-agent Hydra entry as a user runs it (a subprocess): bad input stops before any worker
with one line naming the key; the seed's phase configs compose and are refused or accepted as
WebGym writes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "examples" / "web_agent" / "main.py"


def run(args, timeout=300):
    env = {**os.environ, "RAY_ADDRESS": "local", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ENTRY), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_bad_input_is_one_line_before_any_worker(tmp_path):
    cases = [
        (["env_config.completion_threshold=1.5"], "config error: env_config.completion_threshold:"),
        (["env_config.http_pools.screenshots=4"], "config error: "),  # a typo'd pool name
        ([f"policy_config.base_model={tmp_path}/none"], "config error: policy_config.base_model:"),
        (["--config-name", "rollout_test"], "config error: policy_config.base_model: missing"),
    ]
    for args, line in cases:
        proc = run(args)
        assert proc.returncode == 2, (args, proc.stderr[-500:])
        assert line in proc.stderr, (args, proc.stderr[-500:])
        assert "Traceback" not in proc.stderr and "Started a local Ray" not in proc.stderr + proc.stdout
