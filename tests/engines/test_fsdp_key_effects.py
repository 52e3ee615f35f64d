"""FSDP2 engine keys that change what runs: ``algorithm.use_valid_token_scale`` (micro-batch
weights), ``fsdp_config.forward_prefetch`` / ``backward_prefetch`` (same numbers, other
schedule), ``mixed_precision.buffer_dtype`` (buffers cast), ``actor.optim.optimizer``."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from fsdp_engine_helpers import (
    TEMPERATURE,
    TOTAL_STEPS,
    loss_fn,
    make_batch,
    make_cfg,
    make_model_dir,
    run_in_world_of_one,
)


def _scenarios(model_dir: str, out: str) -> dict:
    from rlinf.config.actor import MixedPrecisionConfig
    from rlinf.engines.training.fsdp import FSDPEngine

    batch = make_batch()
    mbs = [batch.select([0, 1]), batch.select([2, 3, 4]), batch.select([5])]
    res = {}

    def engine(token_weighted=True, **fsdp):
        return FSDPEngine(model_dir, make_cfg(**fsdp), temperature=TEMPERATURE, device=torch.device("cpu"),
                          total_steps=TOTAL_STEPS, token_weighted=token_weighted)

    eng = engine()
    per_mb = []
    for mb in mbs:  # each micro-batch's own loss under the initial weights
        logp, ent = eng.compute_logprobs(mb, 8, with_entropy=True)
        per_mb.append((float(loss_fn(logp, ent, mb)[0]), mb.num_response_tokens))
    res["per_mb"] = per_mb
    res["weighted"] = eng.train_minibatch(mbs, loss_fn, batch.num_response_tokens)["loss"]
    eq = engine(token_weighted=False)
    res["equal"] = eq.train_minibatch(mbs, loss_fn, batch.num_response_tokens)["loss"]
    res["num_params"] = eng.num_params
    # a tool agent's batch: most of micro-batch 2's response is tool output (loss mask 0)
    masked = make_batch()
    masked.loss_mask = masked.response_mask.clone()
    masked.loss_mask[2:5, 1:] = 0
    mmbs = [masked.select([0, 1]), masked.select([2, 3, 4]), masked.select([5])]
    fresh = engine()  # the initial weights (``eng`` has stepped)
    res["masked_per_mb"] = [(float(loss_fn(*fresh.compute_logprobs(mb, 8, with_entropy=True), mb)[0]),
                             mb.num_train_tokens, mb.num_response_tokens) for mb in mmbs]
    res["masked"] = fresh.train_minibatch(mmbs, loss_fn, masked.num_train_tokens)["loss"]
    pre = engine(forward_prefetch=True, backward_prefetch="pre")
    res["prefetch_loss"] = [pre.train_minibatch(mbs, loss_fn, batch.num_response_tokens)["loss"]
                            for _ in range(2)]
    plain = engine()
    res["plain_loss"] = [plain.train_minibatch(mbs, loss_fn, batch.num_response_tokens)["loss"]
                         for _ in range(2)]
    bf = engine(mixed_precision=MixedPrecisionConfig(buffer_dtype="bf16"))
    res["buffer_dtypes"] = sorted({str(b.dtype) for b in bf.model.buffers() if b.is_floating_point()})
    res["param_dtypes"] = sorted({str(p.dtype) for p in bf.model.parameters()})
    return res


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    return run_in_world_of_one(_scenarios, tmp_path_factory.mktemp("fsdp_effects"))[0]


@pytest.mark.slow
def test_valid_token_scale_weighs_micro_batches_by_tokens_or_equally(res):
    losses = [loss for loss, _ in res["per_mb"]]
    tokens = [n for _, n in res["per_mb"]]
    assert len(set(tokens)) > 1  # the micro-batches differ in size, so the two rules differ
    weighted = sum(loss * n for loss, n in zip(losses, tokens)) / sum(tokens)
    equal = sum(losses) / len(losses)
    assert res["weighted"] == pytest.approx(weighted, rel=1e-5)
    assert res["equal"] == pytest.approx(equal, rel=1e-5)
    assert abs(weighted - equal) > 1e-4


def test_micro_batches_weigh_by_trained_tokens_not_tool_tokens(res):
    """A token-mean over the minibatch's trained tokens: a micro-batch full of tool output does
    not weigh more than the policy tokens it holds."""
    losses, trained, response = zip(*res["masked_per_mb"])
    assert trained != response
    assert res["masked"] == pytest.approx(sum(x * n for x, n in zip(losses, trained)) / sum(trained), rel=1e-5)
    assert abs(res["masked"] - sum(x * n for x, n in zip(losses, response)) / sum(response)) > 1e-4


def test_prefetch_changes_the_schedule_not_the_numbers(res):
    assert res["prefetch_loss"] == pytest.approx(res["plain_loss"], rel=1e-6)
    assert res["plain_loss"][0] != res["plain_loss"][1]  # the step did train


def test_buffer_dtype_casts_floating_buffers_only(res):
    assert res["buffer_dtypes"] == ["torch.bfloat16"]
    assert res["param_dtypes"] == ["torch.float32"]


def test_num_params_counts_the_whole_model(res, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(make_model_dir(str(tmp_path / "m")))
    assert res["num_params"] == sum(p.numel() for p in model.parameters())


def test_unknown_optimizer_is_refused_by_name():
    from rlinf.config.actor import OptimConfig
    from rlinf.engines.training.common import build_optimizer

    params = [torch.nn.Parameter(torch.zeros(2))]
    assert isinstance(build_optimizer(params, OptimConfig(optimizer="adam"), 0.1), torch.optim.AdamW)
    with pytest.raises(ValueError, match="actor.optim.optimizer"):
        build_optimizer(params, replace(OptimConfig(), optimizer="sgd"), 0.1)
