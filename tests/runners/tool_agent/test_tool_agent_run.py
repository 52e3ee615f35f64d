"""The tool-agent recipe under Ray: two GRPO steps with the calculator and the sandboxed Python
tool (collocated, episodes saved for the trajectory viewer), and one disaggregated step trained
per turn; episodes reach the metrics, the tool tokens are masked out of the loss, the weights
move."""

from __future__ import annotations

import json
import sys

import pytest
import ray.cloudpickle

from rlinf.utils.metric_logger import read_metrics

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    """A tiny model that calls the calculator in every episode (a short warm start on tool
    demonstrations only). On one torch thread, as ``python -m toolkits.tool_agent.prepare``
    would on one core: this model's ops are too small to share, and two threads on the loaded
    2-core machine made the warm start 6x slower (112 s -> 18 s)."""
    import torch

    from toolkits.tool_agent.prepare import prepare

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return str(prepare(tmp_path_factory.mktemp("tool_model"), steps=120, batch_size=16, tool_fraction=1.0))
    finally:
        torch.set_num_threads(threads)


def _config(tmp_path, model, placement, accelerators, **runner):
    data = tmp_path / "mul.jsonl"
    with open("examples/tool_agent/data/mul_train.jsonl") as src, open(data, "w") as out:
        for _ in range(8):
            out.write(src.readline())
    return {
        "cluster": {"num_nodes": 1, "accelerators_per_node": accelerators, "component_placement": placement},
        "runner": {"task_type": "tool_agent", "seq_length": 192, "max_steps": 2, "val_check_interval": -1,
                   "save_interval": -1, "output_dir": str(tmp_path / "out"), "experiment_name": "t",
                   "logger": {"log_path": str(tmp_path / "out" / "t"), "logger_backends": ["tensorboard"]}, **runner},
        "agentloop": {"toolcall_parser": "hermes", "max_turns": 2, "max_response_length": 112, "tool_concurrency": 4,
                      "tool_timeout_s": 20},
        "tools": {"calculator": {}, "python": {"timeout_s": 5, "memory_mb": 512}},
        "algorithm": {"group_size": 4, "n_minibatches": 1, "training_batch_size_per_gpu": 4, "entropy_bonus": 0.01,
                      "calculate_entropy": True, "sampling_params": {"max_new_tokens": 64, "min_new_tokens": 1}},
        "data": {"train_data_paths": [str(data)], "rollout_batch_size": 4, "max_prompt_length": 80},
        "actor": {"model": {"model_path": model}, "optim": {"lr": 1e-3}},
        "reward": {"reward_scale": 1.0, "verify_processes": 1},
    }


def test_two_collocated_steps_train_on_episodes_with_tool_calls(ray_cluster, tmp_path, tool_model):
    from rlinf.runners.tool_agent.recipe import run_tool_agent

    cfg = _config(tmp_path, tool_model, {"actor,rollout,reward": "0-1"}, 2)
    cfg["agentloop"]["save_trajectories"] = True
    summary = run_tool_agent(json.loads(json.dumps(cfg)), print_fn=lambda *_: None)
    assert summary["steps"] == 2
    rows = {int(m["step"]): m for m in read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))}
    assert sorted(rows) == [1, 2]
    # the short warm start calls the calculator in some episodes; their results are in the sequences
    assert sum(m["agent/tool_calls"] for m in rows.values()) > 0
    assert any(m["agent/response_length"] > m["agent/model_length"] for m in rows.values())
    for m in rows.values():
        assert m["agent/tool_calls"] >= m["agent/tool_call_rate"]
        assert 0 <= m["agent/invalid_call_rate"] <= 1 and m["agent/end_answer"] + m["agent/end_max_turns"] \
            + m["agent/end_length"] + m["agent/end_tool_failure"] == pytest.approx(1.0)
        assert m["time/elapsed"] > 0 and "actor/policy_loss" in m
    assert rows[1]["actor/grad_norm"] > 0
    # every step's episodes in the shared trajectory format; the viewer renders their turns
    from rlinf.runners.trajectory_store import load_iteration
    from rlinf.runners.trajectory_viewer import write_report

    folder = tmp_path / "out" / "t" / "train_trajectories"
    for step in (1, 2):
        records = load_iteration(str(folder), step)
        assert len(records) == 16 and {r["repeat"] for r in records} == {0, 1, 2, 3}
        assert sum(len(r["steps"]) for r in records) == round(rows[step]["agent/turns"] * 16)
        called = [s for r in records for s in r["steps"] if s["tool_results"]]
        # every call run has its result (malformed ones get an error answer too)
        assert sum(len(s["tool_results"]) for s in called) >= round(rows[step]["agent/tool_calls"] * 16) > 0
        assert all("<tool_call>" in s["response"] for s in called)
        assert all(res["status"] in ("ok", "error", "timeout") for s in called for res in s["tool_results"])
    html = open(write_report(str(folder), 2)).read()
    assert html.count("class='episode") == 16 and "<b>Turn 0</b>" in html


def test_a_disaggregated_per_turn_step_streams_episodes_to_the_trainer(ray_cluster, tmp_path, tool_model):
    from rlinf.runners.tool_agent.recipe import run_tool_agent

    cfg = _config(tmp_path, tool_model, {"actor": "0-1", "rollout,reward": 2}, 3, max_steps=1)
    cfg["agentloop"]["train_mode"] = "per_turn"
    summary = run_tool_agent(json.loads(json.dumps(cfg)), print_fn=lambda *_: None)
    assert summary["steps"] == 1
    (row,) = read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))
    assert "agent/tool_call_rate" in row and "actor/policy_loss" in row
    # one sample per model turn of the 16 episodes, rounded up to 2 actor ranks x 1 minibatch
    turns = round(row["agent/turns"] * 16)
    assert row["update/samples"] == turns + turns % 2 and turns > 16


FULLY_ASYNC = {"max_head_offpolicyness": 1, "loss_type": "decoupled_ppo", "behav_imp_weight_cap": 5.0}


def test_fully_async_steps_stream_episodes_with_each_turns_policy_version(ray_cluster, tmp_path, tool_model):
    """Two fully_async steps under Ray, the calculator answering after a fixed wait: whole groups
    reach the trainer, staleness stays within the bound, and the trajectory viewer shows the
    policy version of every turn."""
    from rlinf.runners.tool_agent.recipe import run_tool_agent
    from rlinf.runners.trajectory_store import load_iteration
    from rlinf.runners.trajectory_viewer import write_report

    cfg = _config(tmp_path, tool_model, {"actor": "0-1", "rollout,reward": 2}, 3, rollout_mode="fully_async")
    cfg["algorithm"].update(FULLY_ASYNC)
    cfg["tools"] = {"calculator": {"latency": {"distribution": "fixed", "median_s": 0.05}}}
    cfg["agentloop"]["save_trajectories"] = True
    summary = run_tool_agent(json.loads(json.dumps(cfg)), print_fn=lambda *_: None)
    assert summary["steps"] == 2
    rows = read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))
    for step, m in enumerate(rows):
        assert m["update/samples"] == 16 and m["reward/count"] == 16
        assert m["rollout/staleness_max"] <= min(step, 1) and "agent/tool_call_rate" in m
    folder = tmp_path / "out" / "t" / "train_trajectories"
    for step in range(1, len(rows) + 1):
        records = load_iteration(str(folder), step)
        assert len(records) == 16
        versions = [v for r in records for s in r["steps"] for v in s["policy_versions"]]
        assert versions and set(versions) <= set(range(step)) and all(s["policy_versions"] for r in records
                                                                      for s in r["steps"])
    assert "policy v" in open(write_report(str(folder), 2)).read()


def test_a_fully_async_resume_restarts_the_untrained_groups_from_their_prompts(tmp_path, tool_model):
    """Local backend: a checkpoint taken while groups are in flight holds every admitted, untrained
    group; the resumed run trains those again from their prompts, never one trained before."""
    from rlinf.runners.tool_agent.recipe import run_tool_agent
    from rlinf.runners.trajectory_store import load_iteration

    cfg = _config(tmp_path, tool_model, {"actor": "0-1", "rollout,reward": 2}, 3, rollout_mode="fully_async",
                  save_interval=1, export_hf=False, plot_curves=False)
    cfg["cluster"]["backend"] = "local"
    cfg["algorithm"].update(FULLY_ASYNC)
    cfg["tools"] = {"calculator": {}}
    cfg["agentloop"]["save_trajectories"] = True
    assert run_tool_agent(json.loads(json.dumps(cfg)), print_fn=lambda *_: None)["steps"] == 2
    run = tmp_path / "out" / "t"
    state = json.loads((run / "checkpoints" / "global_step_1" / "trainer_state.json").read_text())["fully_async"]
    ledger = state["ledger"]
    assert len(state["offered"]) == ledger["started_total"] - 4 > 0 and len(ledger["consumed"]) == 4
    offered_prompts = sorted(index for index, _seed, _order in state["offered"].values())
    trained_1 = sorted({int(r["task"]["task_id"]) for r in load_iteration(str(run / "train_trajectories"), 1)})

    import shutil

    shutil.rmtree(run / "checkpoints" / "global_step_2")
    again = json.loads(json.dumps(cfg))
    again["runner"]["resume_dir"] = str(run / "checkpoints" / "global_step_1")
    assert run_tool_agent(again, print_fn=lambda *_: None)["steps"] == 2
    trained_2 = [int(r["task"]["task_id"]) for r in load_iteration(str(run / "train_trajectories"), 2)]
    # the resumed step trains 4 whole groups, all from the checkpoint's untrained ones
    assert len(trained_2) == 16 and set(trained_2) <= set(offered_prompts)
    assert len(trained_1) == 4
