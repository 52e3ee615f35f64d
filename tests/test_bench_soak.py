"""The soak benchmark's pieces (``bench/bench_soak.py``): process roles, per-step peaks, growth after
warm-up, the table's PASS / MISS and the metrics tail. Its ``--quick`` run starts Ray three times
(minutes on 2 cores), so it is not run here."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "bench_soak.py"


@pytest.fixture(scope="module")
def soak():
    spec = importlib.util.spec_from_file_location("bench_soak", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_soak"] = module  # its dataclass looks its module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("bench_soak", None)
    return module


def test_roles_of_a_run_tree(soak):
    info = {
        100: (1, "python", ["python", "examples/web_agent/main.py"]),
        101: (100, "gcs_server", ["/x/ray/core/src/ray/gcs/gcs_server", "--port"]),
        102: (100, "raylet", ["/x/raylet", "--node"]),
        103: (102, "python", ["ray::DashboardAgent"]),
        110: (102, "ray::WebEnvWork", ["ray::WebEnvWorker.rollout", ""]),
        111: (110, "node", ["/x/playwright/driver/node", "/x/playwright/driver/package/cli.js", "run-driver"]),
        112: (111, "headless_shell", ["/usr/lib/chromium/headless_shell", "--headless"]),
        113: (112, "headless_shell", ["/usr/lib/chromium/headless_shell", "--type=zygote"]),
        114: (113, "cat", ["cat"]),  # anything under Chromium is Chromium's
        120: (102, "ray::IDLE", ["ray::IDLE", ""]),
        130: (102, "ray::MathReward", ["ray::MathRewardWorker", ""]),
        131: (130, "python", ["python", "-c", "from multiprocessing.spawn import spawn_main"]),
        132: (131, "python", ["python", "-c", "grandchild"]),
    }
    memo: dict[int, str] = {}
    roles = {pid: soak.role_of(pid, info, 100, memo) for pid in info}
    assert roles == {100: "driver", 101: "ray system", 102: "ray system", 103: "ray system",
                     110: "WebEnvWorker", 111: "playwright driver", 112: "chromium", 113: "chromium",
                     114: "chromium", 120: "ray idle worker", 130: "MathRewardWorker",
                     131: "MathRewardWorker child", 132: "MathRewardWorker child"}


def test_sample_tree_finds_a_live_child_with_its_rss(soak):
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(30)"],
                             stdout=subprocess.PIPE)
    try:
        for _ in range(50):
            if psutil.Process(child.pid).memory_info().rss >= 64 << 20:
                break
            time.sleep(0.1)
        tree = soak.sample_tree(os.getpid())
        assert tree[os.getpid()][0] == "driver"
        role, rss = tree[child.pid]
        assert role == "driver child" and rss >= 64 << 20
    finally:
        child.kill()
        child.wait()
    assert soak.sample_tree(child.pid) == {}  # a process gone: nothing, no error


def _samples(series: dict[str, list[float]], per_step: int = 2) -> list[dict]:
    """Samples whose role values at step s are series[role][s] (the last sample of each step the peak)."""
    n = len(next(iter(series.values())))
    out = [{"t": 0, "step": None, "pids": {"1": ["driver", 10 ** 9]}}]  # start-up: left out
    for s in range(n):
        for k in range(per_step):
            scale = 0.5 if k < per_step - 1 else 1.0
            out.append({"t": s, "step": s, "pids": {str(i): [role, scale * v[s]]
                                                    for i, (role, v) in enumerate(series.items())}})
    return out


def test_growth_drops_warm_up_and_compares_medians(soak):
    # a large warm-up jump, then flat: no growth
    assert soak.growth([10.0] * 5 + [100.0] * 45, warmup=0.1)["growth"] == 0.0
    # 1 % a step over 100 steps after warm-up: base = median(steps 10..19), end = median(steps 90..99)
    values = [100.0 * 1.01 ** i for i in range(100)]
    g = soak.growth(values, warmup=0.1)
    assert g["base"] == pytest.approx((values[14] + values[15]) / 2)
    assert g["end"] == pytest.approx((values[94] + values[95]) / 2)
    assert g["growth"] == pytest.approx(1.01 ** 80 - 1)
    # a cache that fills during the first half and then stays: grows, but not over the 2nd half
    plateau = [100.0 + min(i, 40) for i in range(100)]
    assert soak.growth(plateau)["growth"] > 0.2
    assert soak.growth(plateau, start=0.5)["growth"] == 0.0


def test_summarize_marks_the_growing_role_miss_and_the_total(soak):
    n = 40
    samples = _samples({"driver": [500.0] * n, "chromium": [200.0 + 10 * i for i in range(n)]})
    rows = {r["role"]: r for r in soak.summarize(samples, warmup=0.1)}
    assert rows["driver"]["pass"] and rows["driver"]["growth"] == 0.0
    assert rows["driver"]["base"] == 500.0  # the step's peak, not the half-size sample before it
    assert not rows["chromium"]["pass"] and rows["chromium"]["growth"] > 0.5
    assert rows["total"]["steps"] == n and rows["total"]["base"] == pytest.approx(500 + 200 + 10 * 5.5)
    assert rows["chromium"]["pids_live"] == 1 and rows["total"]["pids_seen"] == 2
    part = {"name": "web", "steps_done": n, "minutes": 3.0, "warmup_steps": 4, "load_min": 1.0, "load_max": 2.0,
            "load_mean": 1.5, "returncode": 0, "rows": soak.summarize(samples, 0.1)}
    text = soak.table(part)
    assert "| chromium | 1 / 1 |" in text and text.count("MISS") == 2 and text.count("PASS") == 1


def test_step_tail_reads_whole_lines_as_they_are_written(soak, tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = soak.StepTail(str(path))
    assert tail.poll() is None  # no file yet
    with open(path, "w") as f:
        f.write(json.dumps({"step": 0, "val/accuracy": 0.1}) + "\n")  # validation before any step
        f.flush()
        assert tail.poll() is None
        f.write(json.dumps({"step": 1}) + "\n" + '{"step": 2')  # half a line
        f.flush()
        assert tail.poll() == 1
        f.write(', "x": 1}\n')
        f.flush()
        assert tail.poll() == 2


def test_parts_set_the_lengths_and_refuse_an_unknown_name(soak, tmp_path):
    args = argparse.Namespace(only="math,web", quick=False, steps=300, iterations=200, web_iterations=50)
    math_part, web = soak.parts(args)
    cmd, metrics = math_part.command(str(tmp_path))
    assert "runner.max_steps=300" in cmd and metrics == str(tmp_path / "soak-math" / "metrics.jsonl")
    cmd, metrics = web.command(str(tmp_path))
    assert "runner.iterations=50" in cmd and metrics == str(tmp_path / "web" / "metrics.jsonl")
    with pytest.raises(SystemExit, match="unknown part"):
        soak.parts(argparse.Namespace(**{**vars(args), "only": "math,gpu"}))


def test_tables_of_a_saved_soak_are_computed_again_with_another_warmup(soak, tmp_path, capsys):
    mib = 1 << 20
    samples = _samples({"driver": [500.0 * mib] * 40, "chromium": [100.0 * mib] * 10 + [400.0 * mib] * 30})
    part = {"name": "web", "steps_done": 12, "minutes": 3.0, "warmup_steps": 4, "load_min": 1.0, "load_max": 2.0,
            "load_mean": 1.5, "returncode": -2, "interrupted": True, "rows": [], "samples": samples}
    path = tmp_path / "soak.json"
    path.write_text(json.dumps({"header": "soak test", "parts": [part]}))
    soak.main(["--tables", str(path), "--warmup", "0.1"])
    early = capsys.readouterr().out
    assert "(stopped early by the soak)" in early and "| chromium | 1 / 1 | 100 |" in early  # base in the jump
    soak.main(["--tables", str(path), "--warmup", "0.3"])
    late = capsys.readouterr().out
    assert "first 12 steps dropped" in late and "| chromium | 1 / 1 | 400 | 400 | +0.0 %" in late
