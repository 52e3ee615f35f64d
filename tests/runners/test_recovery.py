"""``runner.recover_mode``: a worker killed mid-run restarts the run from its last complete
checkpoint and the metrics continue from there; ``resume`` picks the run's latest checkpoint by
itself (and refuses when there is none); checkpoints by wall time."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import ray.cloudpickle

from rlinf.utils.metric_logger import read_metrics
from rlinf.utils.typed_config import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_generation_worker import tiny_model_with_tokenizer
from test_math_runner_features import base_config, with_dirs

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray


def _our_raylet_pids() -> set[bytes]:
    """Pids of the raylets of the Ray cluster this process is connected to (other pytest-xdist
    workers run clusters of their own, with groups of the same names)."""
    import ray

    sockets = {node["RayletSocketName"] for node in ray.nodes() if node["Alive"]}
    pids = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(arg.startswith(b"--raylet_socket_name=") and arg.split(b"=", 1)[1].decode() in sockets
                   for arg in args):
                pids.add(pid.encode())
    return pids


def _pid_of(group: str, rank: int, raylets: set[bytes]) -> int | None:
    want = {f"RLINF_GROUP_NAME={group}".encode(), f"RANK={rank}".encode()}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                env = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
            except OSError:
                continue
            if want <= env and any(b"RAY_RAYLET_PID=" + raylet in env for raylet in raylets):
                return int(pid)
    return None


def _kill_after(metrics: Path, step: int, group: str, killed: list) -> threading.Thread:
    raylets = _our_raylet_pids()
    assert raylets, "found no raylet of this test's Ray cluster"

    def run():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if metrics.is_file() and any(r["step"] >= step for r in read_metrics(str(metrics))):
                pid = _pid_of(group, 0, raylets)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_killed_worker_restarts_the_run_from_its_last_checkpoint(ray_cluster, tmp_path):
    from rlinf.runners.math.recipe import run_math

    model = tiny_model_with_tokenizer(tmp_path / "model")
    cfg = with_dirs(base_config(tmp_path, model, {"actor,rollout,reward": "0"}, 1,
                                runner={"max_steps": 3, "save_interval": -1, "save_interval_secs": 1e-3,
                                        "recover_mode": "fault",
                                        "recover_retries": 2, "export_hf": False, "plot_curves": False}),
                    tmp_path / "a")
    killed: list[int] = []
    lines: list[str] = []
    # checkpoints come from save_interval_secs alone (after every step here)
    thread = _kill_after(tmp_path / "a" / "t" / "metrics.jsonl", 1, "RolloutGroup", killed)
    summary = run_math(cfg, print_fn=lambda *a: lines.append(" ".join(map(str, a))))
    thread.join(5)
    assert killed, "the test never killed the rollout worker"
    assert summary["steps"] == 3
    recovered = [line for line in lines if "recover_mode fault" in line]
    assert len(recovered) == 1 and "RolloutGroup[0]" in recovered[0] and "global_step_" in recovered[0]
    steps = [int(r["step"]) for r in read_metrics(str(tmp_path / "a" / "t" / "metrics.jsonl"))]
    assert steps == [1, 2, 3]  # continued from the checkpoint, nothing logged twice
    assert sorted(os.listdir(tmp_path / "a" / "t" / "checkpoints")) == [f"global_step_{i}" for i in (1, 2, 3)]

    # resume: the same run, one more step, picks global_step_3 by itself
    more = with_dirs(cfg, tmp_path / "a")
    more["runner"].update(recover_mode="resume", max_steps=4)
    lines.clear()
    summary = run_math(more, print_fn=lambda *a: lines.append(" ".join(map(str, a))))
    assert summary["steps"] == 4 and any("resuming from" in line and "global_step_3" in line for line in lines)
    steps = [int(r["step"]) for r in read_metrics(str(tmp_path / "a" / "t" / "metrics.jsonl"))]
    assert steps == [1, 2, 3, 4]


def test_resume_without_a_checkpoint_is_refused_and_time_checkpoints_are_taken(ray_cluster, tmp_path):
    from rlinf.runners.math.recipe import run_math

    model = tiny_model_with_tokenizer(tmp_path / "model")
    cfg = with_dirs(base_config(tmp_path, model, {"actor,rollout,reward": "0"}, 1,
                                runner={"max_steps": 2, "recover_mode": "resume", "export_hf": False}), tmp_path / "b")
    with pytest.raises(ConfigError, match="runner.recover_mode: resume: no complete checkpoint"):
        run_math(cfg, print_fn=lambda *_: None)
    assert not (tmp_path / "b").exists()  # nothing written
