"""LoRA on the FSDP2 actor (``actor.model.is_lora``): only the adapter trains and sits in the
optimizer, the merged weights are what a full model with W + (alpha / r) B A computes, the
checkpoint holds a PEFT adapter that ``lora_path`` loads back, the HF export is merged."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from fsdp_engine_helpers import TEMPERATURE, TOTAL_STEPS, loss_fn, make_batch, make_cfg, run_in_world_of_one


def _lora_cfg(**model):
    cfg = make_cfg()
    llm = replace(cfg.model.llm, lora_alpha=8.0)
    return replace(cfg, model=replace(cfg.model, is_lora=True, lora_rank=4, llm=llm, **model))


def _scenario(model_dir: str, out: str) -> dict:
    from rlinf.engines.training.fsdp import FSDPEngine

    batch = make_batch()
    mbs = [batch.select([0, 1, 2]), batch.select([3, 4, 5])]
    eng = FSDPEngine(model_dir, _lora_cfg(), temperature=TEMPERATURE, device=torch.device("cpu"),
                     total_steps=TOTAL_STEPS)
    res = {"opt_params": sum(p.numel() for g in eng.optimizer.param_groups for p in g["params"]),
           "trainable": sorted(n for n, p in eng.model.named_parameters() if p.requires_grad),
           "merged0": eng.full_state_dict()}
    res["logp0"], _ = eng.compute_logprobs(batch, 6)
    for _ in range(2):
        eng.train_minibatch(mbs, loss_fn, batch.num_response_tokens)
    res["merged2"] = eng.full_state_dict()
    res["logp2"], _ = eng.compute_logprobs(batch, 6)
    eng.save_checkpoint(os.path.join(out, "ckpt"))
    eng.export_hf(os.path.join(out, "hf"))
    again = FSDPEngine(model_dir, _lora_cfg(lora_path=os.path.join(out, "ckpt", "lora_adapter")),
                       temperature=TEMPERATURE, device=torch.device("cpu"), total_steps=TOTAL_STEPS)
    res["logp_from_adapter"], _ = again.compute_logprobs(batch, 6)
    return res


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    d = tmp_path_factory.mktemp("fsdp_lora")
    out, model_dir = run_in_world_of_one(_scenario, d)
    out["dir"], out["model_dir"] = d, model_dir
    return out


@pytest.mark.slow
def test_only_the_adapter_trains(res):
    assert res["trainable"] and all(".lora_A." in n or ".lora_B." in n for n in res["trainable"])
    layers = 2 * 7  # 2 blocks x q, k, v, o, gate, up, down
    assert len(res["trainable"]) == 2 * layers
    # hidden 32, kv heads 2 x 8 = 16, mlp 64, rank 4: A is r x in, B is out x r
    per_block = 4 * ((32 + 32) + (32 + 16) * 2 + (32 + 32) + (32 + 64) * 2 + (64 + 32))
    assert res["opt_params"] == 2 * per_block


def test_merged_weights_start_at_the_base_and_move(res):
    from safetensors.torch import load_file

    base = load_file(os.path.join(res["model_dir"], "model.safetensors"))
    m0, m2 = res["merged0"], res["merged2"]
    assert (set(m0) >= {k for k in base if k != "lm_head.weight"}
            and not any(".lora_" in k or "base_layer" in k for k in m0))
    assert all(torch.equal(m0[k], base[k]) for k in base if k in m0)  # B = 0 at the start
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(m2[q], m0[q])  # the merged update reached the base names
    emb = "model.embed_tokens.weight"
    assert torch.equal(m2[emb], m0[emb])  # frozen
    assert not torch.allclose(res["logp2"], res["logp0"])


def test_merged_export_computes_what_the_adapter_computes(res):
    from transformers import AutoModelForCausalLM

    from rlinf.engines.training.common import response_logprobs

    hf = AutoModelForCausalLM.from_pretrained(os.path.join(res["dir"], "hf")).eval()
    with torch.no_grad():
        logp, _ = response_logprobs(hf, make_batch(), TEMPERATURE, False)
    assert torch.allclose(logp, res["logp2"], atol=1e-5)
    assert torch.allclose(res["logp_from_adapter"], res["logp2"], atol=1e-5)  # the saved adapter loads back
    assert os.path.isfile(os.path.join(res["dir"], "ckpt", "lora_adapter", "adapter_config.json"))
