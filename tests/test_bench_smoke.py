"""Every benchmark script still runs (``--quick``) and prints its table; numbers are not asserted."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.ray
@pytest.mark.parametrize("script", ["bench_channel.py", "bench_latency.py", "bench_group_call.py",
                                    "bench_math_reward.py", "bench_env_pipeline.py",
                                    "bench_placement.py", "bench_weight_sync.py"])
def test_bench_quick_mode_prints_a_table(script):
    args = [sys.executable, str(ROOT / "bench" / script)]
    if script != "bench_placement.py":
        args.append("--quick")
    if script == "bench_env_pipeline.py":
        args += ["--stages", "2"]  # one launch of the groups instead of two: the path is the same
    if script == "bench_weight_sync.py":
        args += ["--receivers", "hf", "--placements", "collocated"]  # vLLM's start alone takes ~30 s
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    table_rows = [line for line in out.stdout.splitlines() if line.startswith("|")]
    assert len(table_rows) >= 3, out.stdout


@pytest.mark.ray
@pytest.mark.skipif(importlib.util.find_spec("mani_skill") is None, reason="mani-skill is not installed")
def test_pushcube_side_by_side_quick_prints_both_rows():
    from rlinf.engines.simulators.maniskill import vulkan_unavailable_reason

    problem = vulkan_unavailable_reason()
    if problem:
        pytest.skip(f"ManiSkill cannot render here: {problem}")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_pushcube_vs_single_file.py"), "--quick"],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("|")]
    assert any(r.startswith("| single-file PPO |") for r in rows), out.stdout
    assert any(r.startswith("| ours (rlinf runner) |") for r in rows), out.stdout


def test_pushcube_stop_rule():
    import types

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from bench_pushcube_vs_single_file import should_stop
    finally:
        sys.path.pop(0)
    args = lambda **k: types.SimpleNamespace(**{"target": 0.9, "extra_evals": 2, "keep": None, **k})  # noqa: E731
    evals = lambda *xs: [{"success": x} for x in xs]  # noqa: E731
    assert not should_stop(evals(0.5, 0.9, 0.85), args())            # one eval after the hit so far
    assert should_stop(evals(0.5, 0.9, 0.85, 0.5), args())           # two after the first hit
    assert not should_stop(evals(0.9, 0.85, 0.5), args(keep=0.8))    # dropped below 0.8: go on
    assert should_stop(evals(0.9, 0.85, 0.5, 0.95, 0.8, 0.81), args(keep=0.8))
