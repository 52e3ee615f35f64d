"""``training_backend: megatron``: each cross-key rule names its key; the Megatron example configs
compose, validate and fit their placement; the math runner picks the Megatron actor and refuses
what it cannot run before any worker starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_math_config import parse, with_change  # the reference YAML (training_backend megatron)

from rlinf.config import ConfigError
from rlinf.runners.math import groups as math_groups

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from test_math_configs import load


def test_the_reference_megatron_settings_parse():
    cfg = parse(with_change("actor.training_backend", "megatron"))
    assert cfg.actor.megatron.ckpt_config().process_num == 16
    assert cfg.actor.model.llm.recompute_granularity == "full" and cfg.actor.optim.fp16


@pytest.mark.parametrize("path, value, message", [
    ("actor.model.sequence_parallel", True, None),  # the reference's TP=1: accepted, no effect
    ("actor.model.tensor_model_parallel_size", 0, "actor.model.tensor_model_parallel_size: must be >= 1"),
    ("actor.model.recompute_method", None,
     "actor.model.recompute_method: recompute_granularity full needs recompute_method"),
    ("actor.model.recompute_num_layers", 0, "actor.model.recompute_num_layers: recompute_granularity full needs"),
    ("actor.model.recompute_granularity", "partial", "actor.model.recompute_granularity: 'partial' is not allowed"),
    ("actor.model.normalization", "batchnorm", "actor.model.normalization: 'batchnorm' is not allowed"),
    ("actor.model.precision", "bf16", "actor.optim.bf16: must be true with actor.model.precision bf16"),
    ("actor.optim.fp16", False, "actor.optim.fp16: must be true with actor.model.precision fp16"),
    ("actor.optim.use_distributed_optimizer", False,
     "actor.optim.overlap_param_gather: needs actor.optim.use_distributed_optimizer: true"),
    ("actor.optim.overlap_param_gather_with_optimizer_step", True,
     "actor.optim.overlap_param_gather_with_optimizer_step: needs virtual pipeline stages"),
    ("actor.optim.loss_scale_window", 0, "actor.optim.loss_scale_window: must be >= 1"),
    ("actor.optim.adam_beta2", 1.0, "actor.optim.adam_beta2: must be in [0, 1)"),
    ("actor.megatron.use_dist_ckpt", True, "actor.megatron.use_dist_ckpt: distributed (resharding) checkpoints"),
    ("actor.megatron.tp_comm_overlap_cfg", "tp.yaml", "actor.megatron.tp_comm_overlap_cfg: tensor-parallel"),
    ("actor.megatron.use_hf_ckpt", False, "actor.megatron.use_hf_ckpt: set exactly one weight source"),
    ("actor.megatron.ckpt_format", "torch_dist", "actor.megatron.ckpt_format: 'torch_dist' is not allowed"),
    ("actor.megatron.ckpt.tensor_model_parallel_size", 2,
     "actor.megatron.ckpt.tensor_model_parallel_size: 2 differs from actor.model.tensor_model_parallel_size (1)"),
    ("actor.megatron.ckpt.process_num", 0, "actor.megatron.ckpt.process_num: must be >= 1"),
    ("actor.megatron.ckpt.save_dir", "x", "actor.megatron.ckpt.save_dir: unknown key"),
    ("actor.spec_name", "decoder_moe", "actor.spec_name: only decoder_gpt"),
    ("actor.mcore_gpt", False, "actor.mcore_gpt: the Megatron backend builds megatron-core's GPTModel"),
    ("actor.enable_dp_load_balance", True, "actor.enable_dp_load_balance: not implemented"),
    ("actor.model.gradient_checkpointing", True, "actor.model.gradient_checkpointing: is the FSDP backend's switch"),
])
def test_megatron_rules_name_their_key(path, value, message):
    raw = with_change(path, value)
    if message is None:
        parse(raw)
        return
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert str(err.value).startswith(message), str(err.value)


def test_sequence_parallel_with_tensor_parallelism_is_refused():
    raw = with_change("actor.model.tensor_model_parallel_size", 2)
    raw["actor"]["megatron"]["ckpt"]["tensor_model_parallel_size"] = 2
    raw["actor"]["model"]["sequence_parallel"] = False
    parse(raw)  # TP=2 alone is fine
    raw["actor"]["model"]["sequence_parallel"] = True
    with pytest.raises(ConfigError, match=r"^actor\.model\.sequence_parallel: not supported"):
        parse(raw)


def test_the_fsdp_backend_ignores_the_megatron_only_rules():
    raw = with_change("actor.training_backend", "fsdp")
    raw["actor"]["megatron"]["use_hf_ckpt"] = False
    raw["actor"]["optim"]["overlap_param_gather_with_optimizer_step"] = True
    assert parse(raw).actor.training_backend == "fsdp"


@pytest.mark.parametrize("name, tp, pp, dp", [("grpo_tiny_megatron_cpu", 2, 1, 1),
                                              ("qwen2.5-1.5b-grpo-megatron", 2, 2, 2)])
def test_megatron_examples_select_the_megatron_actor_and_fit_their_placement(name, tp, pp, dp):
    cfg = load(name)
    plan = cfg.cluster.plan()
    cfg.check_against_plan(plan)
    m = cfg.actor.model.llm
    assert cfg.actor.training_backend == "megatron"
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size) == (tp, pp)
    assert plan.component("actor").world_size // (tp * pp) == dp
    assert cfg.actor.megatron.ckpt_config().tensor_model_parallel_size == tp
    assert math_groups.actor_worker_class(cfg, plan) is math_groups.MegatronActorWorker
    assert math_groups.actor_worker_class(load("grpo_tiny_cpu"), plan) is math_groups.FSDPActorWorker


def test_the_runner_refuses_a_layout_or_a_missing_megatron_before_workers_start(monkeypatch):
    # the layout is refused when the config is checked (before the groups are planned)
    layout_error = (r"^actor\.model\.tensor_model_parallel_size: 1 x pipeline_model_parallel_size 3 = 3 ranks "
                    r"do not divide the actor's 2 process")
    with pytest.raises(ConfigError, match=layout_error):
        load("grpo_tiny_megatron_cpu", ["actor.model.tensor_model_parallel_size=1",
                                        "actor.model.pipeline_model_parallel_size=3",
                                        "actor.megatron.ckpt.pipeline_model_parallel_size=3"])
    cfg = load("grpo_tiny_megatron_cpu")
    monkeypatch.setattr(math_groups, "megatron_import_error", lambda: "megatron-core is not installed")
    with pytest.raises(ConfigError, match=r"^actor\.training_backend: megatron-core is not installed"):
        math_groups.actor_worker_class(load("grpo_tiny_megatron_cpu"), cfg.cluster.plan())
