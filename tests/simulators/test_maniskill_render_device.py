"""A CPU-simulated ManiSkill environment asks for the render device the machine has, so ManiSkill
does not log "Requested to use render device ..., but CUDA device was not found" for every
environment of an embodied run on a machine without CUDA (issue 29)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mani_skill") is None,
                                reason="ManiSkill3 is not installed (the embodied extra)")

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import sys
from rlinf.engines.simulators.maniskill import ManiSkillSingleEnv, cpu_sim_render_backend, vulkan_unavailable_reason
if vulkan_unavailable_reason() is not None:
    print("SKIP", vulkan_unavailable_reason()); sys.exit(0)
env = ManiSkillSingleEnv("PushCube-v1", obs_mode="rgb", camera_size=(32, 32))
obs = env.reset(0)
print("BACKEND", cpu_sim_render_backend(), "MAX", int(obs.images["base_camera"].max()))
env.close()
"""


@pytest.mark.slow
def test_cpu_sim_renders_without_the_fallback_warning():
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if proc.stdout.startswith("SKIP"):
        pytest.skip(f"no usable Vulkan device: {proc.stdout[5:].strip()}")
    words = proc.stdout.split()
    backend, brightest = words[words.index("BACKEND") + 1], int(words[words.index("MAX") + 1])
    assert backend in ("cpu", "gpu")
    assert brightest > 0  # the camera rendered
    assert "CUDA device was not found" not in proc.stdout + proc.stderr
