"""``cluster.backend: local`` against Ray on the same run: the tiny math config (GRPO, FSDP2 actor,
HF rollout, reward) and the toy embodied config (env, rollout, PPO actor with a value head), two
steps each, one process per group on one accelerator for both backends: the logged metrics are
equal (compared exactly; timings and throughputs aside). Bad input through the math entry: one
``config error:`` line, exit 2, before Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rlinf.config.resolvers import register_resolvers
from rlinf.utils.metric_logger import read_metrics

ROOT = Path(__file__).resolve().parents[2]
ONE_PROCESS = {"num_nodes": 1, "accelerators_per_node": 1}
TIMING = ("time/", "throughput/", "perf/")


def _compose(config_dir: Path, name: str, overrides: list[str]) -> dict:
    os.environ.setdefault("REPO_PATH", str(ROOT))
    register_resolvers()
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        return OmegaConf.to_container(compose(name, overrides=overrides), resolve=True)


@pytest.fixture
def same_process_state(monkeypatch):
    """One torch thread per worker under both backends (the fake Ray cluster gives each worker
    its 1-of-8-slots share of 2 cores: 1); the local run's process-wide state is undone after."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    saved = dict(os.environ)
    yield
    import torch.distributed as dist

    if dist.is_initialized():  # the local run's default process group (world size 1)
        dist.destroy_process_group()
    os.environ.clear()
    os.environ.update(saved)


def _compare(local_path: Path, ray_path: Path) -> int:
    local = read_metrics(str(local_path))
    remote = read_metrics(str(ray_path))
    assert [m["step"] for m in local] == [m["step"] for m in remote]
    compared = 0
    for a, b in zip(local, remote):
        keys = {k for k in set(a) | set(b) if not k.startswith(TIMING) and "per_s" not in k and "mfu" not in k}
        for key in sorted(keys):
            assert a.get(key) == b.get(key), (a["step"], key, a.get(key), b.get(key))
            compared += 1
    return compared


@pytest.mark.ray
def test_tiny_math_config_gives_the_same_metrics_locally_and_on_ray(ray_cluster, tmp_path, same_process_state):
    from rlinf.runners.math.recipe import run_math
    from toolkits.tiny_math.make_model import make_model
    model = str(make_model(tmp_path / "model"))
    val = tmp_path / "val.jsonl"
    rows = [json.loads(line) for line in open(ROOT / "examples/math/data/val.jsonl")][:4]
    val.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summaries, logs = {}, {}
    for backend in ("local", "ray"):
        raw = _compose(ROOT / "examples/math/config", "grpo_tiny_cpu", [
            f"actor.model.model_path={model}", f"rollout.model.model_path={model}", f"data.val_data_paths=[{val}]",
            "data.rollout_batch_size=4", "algorithm.group_size=2", "algorithm.training_batch_size_per_gpu=4",
            "algorithm.entropy_bonus=0.01", "++algorithm.overlong_buffer_len=16", "actor.optim.lr=1e-2",
            "runner.max_steps=2", "runner.seq_length=96", "runner.val_check_interval=2",
            f"runner.output_dir={tmp_path / backend}"])
        raw["cluster"] = {**ONE_PROCESS, "backend": backend, "component_placement": {"actor,rollout,reward": 0}}
        summaries[backend] = run_math(raw, print_fn=lambda *_: None)
        logs[backend] = tmp_path / backend / "grpo-tiny-cpu" / "metrics.jsonl"
    assert summaries["local"] == summaries["ray"] and summaries["local"]["steps"] == 2
    assert _compare(logs["local"], logs["ray"]) > 30
    steps = {int(m["step"]): m for m in read_metrics(str(logs["local"]))}
    assert steps[1]["actor/grad_norm"] > 0 and steps[1]["actor/entropy"] != steps[2]["actor/entropy"]


@pytest.mark.ray
def test_toy_embodied_config_gives_the_same_metrics_locally_and_on_ray(ray_cluster, tmp_path, same_process_state):
    from rlinf.runners.embodied.recipe import run_embodied
    summaries, logs = {}, {}
    for backend in ("local", "ray"):
        raw = _compose(ROOT / "examples/embodiment/config", "toy_ppo_mlp", [
            "runner.max_steps=2", "runner.val_check_interval=2", f"runner.output_dir={tmp_path / backend}"])
        raw["cluster"] = {**ONE_PROCESS, "backend": backend, "component_placement": {"env,rollout,actor": 0}}
        summaries[backend] = run_embodied(raw, print_fn=lambda *_: None)
        logs[backend] = tmp_path / backend / "toy-ppo-mlp" / "metrics.jsonl"
    assert summaries["local"] == summaries["ray"] and summaries["local"]["steps"] == 2
    assert _compare(logs["local"], logs["ray"]) > 30
    steps = {int(m["step"]): m for m in read_metrics(str(logs["local"]))}
    assert steps[1]["actor/grad_norm"] > 0 and steps[2]["env/episodes"] == 16


@pytest.mark.parametrize("args, line", [
    (["cluster.backend=lokal"],
     "config error: cluster.backend: 'lokal' is not allowed; expected one of 'ray', 'local'"),
    (["cluster.backend=local", "cluster.num_nodes=2"],  # local mode is this machine
     "config error: cluster.num_nodes: 2, but local mode (cluster.backend: local) runs on this machine only: "
     "set cluster.num_nodes: 1"),
])
def test_bad_backend_input_is_one_config_error_line_before_ray(args, line):
    env = {**os.environ, "RAY_ADDRESS": "local", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "examples/math/main_grpo.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert line in proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr and "Ray" not in proc.stdout + proc.stderr.replace(line, "")
