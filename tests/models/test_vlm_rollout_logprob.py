"""VLM rollout (HF generate with pixel inputs) and the actor's log-probs from the same pixels
(rlinf.engines.rollout.hf_vlm, rlinf.engines.training.vlm_logprobs, rlinf.models.vlm.batch),
freezing the vision tower (rlinf.models.vlm.freeze), and one FSDP2 step at world size 1 with the
tower frozen: tiny Qwen2.5-VL and Qwen3-VL checkpoints, fp32 on CPU."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.distributed as dist
from PIL import Image

from rlinf.config.actor import FsdpConfig
from rlinf.config.algorithm import SamplingParams
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.rollout.hf_vlm import generate_vlm
from rlinf.engines.training.common import response_logprobs
from rlinf.engines.training.fsdp_setup import shard_model
from rlinf.engines.training.vlm_logprobs import vlm_response_logprobs
from rlinf.models.vlm import load_vlm, render_prompt
from rlinf.models.vlm.batch import collate_prompts
from rlinf.models.vlm.freeze import set_vision_trainable, vision_tower
from toolkits.vlm.make_tiny_vlm import MODEL_TYPES, make_tiny_vlm

SAMPLING = SamplingParams(do_sample=True, temperature=0.8, max_new_tokens=6, min_new_tokens=0)
N = 2


def noise_image(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """One tiny checkpoint of each model type, loaded (fp32, eval)."""
    root = tmp_path_factory.mktemp("tiny_vlm_rollout")
    return {t: load_vlm(make_tiny_vlm(t, root / t, seed=5)) for t in MODEL_TYPES}


def prompt_batch(processor, seed: int = 0):
    """Three prompts of different lengths: one image, two images of different sizes, none."""
    rows = [render_prompt(processor, "What colour is it?", [noise_image(56, 56, seed)]),
            render_prompt(processor, "How many shapes are in the two pictures?",
                          [noise_image(84, 60, seed + 1), noise_image(40, 90, seed + 2)]),
            render_prompt(processor, "No picture here.", [])]
    return rows, collate_prompts(rows, pad_token_id=0)


def rollout_batch(prompts, gens) -> RolloutBatch:
    tokens = prompts.token_lists()
    return RolloutBatch.from_token_lists([tokens[g.prompt_index] for g in gens], [g.token_ids for g in gens],
                                         pad_token_id=0, logprobs=[g.logprobs for g in gens])


def test_collate_left_pads_and_keeps_each_rows_pixels(loaded):
    rows, prompts = prompt_batch(loaded["qwen2_5_vl"].processor)
    lengths = [r["input_ids"].shape[1] for r in rows]
    assert prompts.input_ids.shape == (3, max(lengths))
    for i, row in enumerate(rows):  # left padding: each prompt ends at the last column
        assert prompts.input_ids[i, -lengths[i]:].tolist() == row["input_ids"][0].tolist()
        assert prompts.attention_mask[i].sum() == lengths[i] and prompts.attention_mask[i, -1] == 1
    assert prompts.pixels.images_per_row == [1, 2, 0]
    assert torch.equal(prompts.pixels.pixel_values, torch.cat([rows[0]["pixel_values"], rows[1]["pixel_values"]]))
    # repeat: each row's pixels n times in a row, the text-only row none
    rep = prompts.pixels.repeat(2)
    assert rep.images_per_row == [1, 1, 2, 2, 0, 0]
    p0, p1 = rows[0]["pixel_values"], rows[1]["pixel_values"]
    assert torch.equal(rep.pixel_values, torch.cat([p0, p0, p1, p1]))
    assert torch.equal(rep.image_grid_thw, torch.cat([rows[0]["image_grid_thw"]] * 2 + [rows[1]["image_grid_thw"]] * 2))
    assert prompts.pixels.select([2]).model_kwargs() == {}


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_actor_logprobs_equal_the_rollouts_with_the_same_pixels(loaded, model_type):
    vlm = loaded[model_type]
    _, prompts = prompt_batch(vlm.processor)
    gens = generate_vlm(vlm.model, prompts, SAMPLING, n=N, seed=0)
    assert [g.prompt_index for g in gens] == [0, 0, 1, 1, 2, 2]
    assert all(len(g.token_ids) == len(g.logprobs) for g in gens)
    assert all(len(g.token_ids) == 6 and g.finish_reason == "length" for g in gens if 2 not in g.token_ids)
    batch = rollout_batch(prompts, gens)
    assert torch.equal(batch.prompt_ids, prompts.repeat(N).input_ids)  # the rollout's own padding
    pixels = prompts.pixels.repeat(N)
    with torch.no_grad():
        logp, entropy = vlm_response_logprobs(vlm.model, batch, pixels, SAMPLING.temperature, with_entropy=True)
    mask = batch.response_mask.bool()
    assert (batch.rollout_logprobs[mask] < 0).all()
    torch.testing.assert_close(logp, batch.rollout_logprobs, atol=1e-5, rtol=0)
    assert (entropy[mask] > 0).all() and (entropy[~mask] == 0).all() and (logp[~mask] == 0).all()
    with torch.no_grad():
        # controls: the text path's 1-D positions, or other pixels of the same sizes, change the
        # image rows' log-probs (the text-only rows keep theirs)
        text_path, _ = response_logprobs(vlm.model, batch, SAMPLING.temperature, False)
        other = prompt_batch(vlm.processor, seed=7)[1].pixels.repeat(N)
        other_pixels, _ = vlm_response_logprobs(vlm.model, batch, other, SAMPLING.temperature, False)
    for wrong in (text_path, other_pixels):
        diff = (wrong - batch.rollout_logprobs).abs().amax(1)
        assert (diff[:4] > 1e-4).all() and (diff[4:] < 1e-5).all(), diff


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_seed_reproduces_and_a_stop_token_ends_the_row(loaded, model_type):
    vlm = loaded[model_type]
    _, prompts = prompt_batch(vlm.processor)
    first = generate_vlm(vlm.model, prompts, SAMPLING, n=N, seed=3)
    again = generate_vlm(vlm.model, prompts, SAMPLING, n=N, seed=3)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert [g.token_ids for g in first] != [g.token_ids for g in generate_vlm(vlm.model, prompts, SAMPLING,
                                                                                n=N, seed=4)]
    stop = first[0].token_ids[0]  # the first token row 0 samples under seed 3 now ends it
    stopped = generate_vlm(vlm.model, prompts, SamplingParams(**{**SAMPLING.__dict__, "stop_token_ids": (stop,)}),
                           n=N, seed=3)
    assert stopped[0].token_ids == [stop] and stopped[0].finish_reason == "stop"
    assert stopped[0].logprobs == pytest.approx(first[0].logprobs[:1], abs=1e-6)


def test_pixels_of_another_batch_and_stop_strings_are_refused(loaded):
    vlm = loaded["qwen3_vl"]
    _, prompts = prompt_batch(vlm.processor)
    batch = rollout_batch(prompts, generate_vlm(vlm.model, prompts, SAMPLING, n=1, seed=0))
    swapped = prompts.pixels.select([1, 0, 2])  # row 0 given row 1's two images
    with pytest.raises(ValueError, match=r"row 0: 4 image token\(s\) in the ids but its 2 image\(s\) need"):
        vlm_response_logprobs(vlm.model, batch, swapped, 1.0, False)
    with pytest.raises(ValueError, match="stop strings are not supported"):
        generate_vlm(vlm.model, prompts, SamplingParams(stop=("\n",)))


def one_step(model, batch, pixels, lr=1e-2):
    """One AdamW step on -mean log-prob of the responses; returns the optimizer."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    logp, _ = vlm_response_logprobs(model, batch, pixels, 1.0, False)
    (-(logp.sum() / batch.response_mask.sum())).backward()
    optimizer.step()
    return optimizer


def tower_and_language(model) -> tuple[dict, dict]:
    tower = {id(p) for p in vision_tower(model).parameters()}
    full = {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
            for n, p in model.named_parameters()}
    params = dict(model.named_parameters())
    return ({n: v for n, v in full.items() if id(params[n]) in tower},
            {n: v for n, v in full.items() if id(params[n]) not in tower})


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("train_tower", [False, True])
def test_one_step_moves_the_tower_only_when_trained(loaded, model_type, train_tower):
    vlm = loaded[model_type]
    model = copy.deepcopy(vlm.model)
    count = set_vision_trainable(model, train_tower)
    assert count == sum(p.numel() for p in vision_tower(model).parameters()) > 0
    _, prompts = prompt_batch(vlm.processor)
    batch = rollout_batch(prompts, generate_vlm(model, prompts, SAMPLING, n=1, seed=0))
    tower0, lang0 = tower_and_language(model)
    optimizer = one_step(model, batch, prompts.pixels)
    tower1, lang1 = tower_and_language(model)
    assert any(not torch.equal(lang0[n], lang1[n]) for n in lang0)
    changed = [n for n in tower0 if not torch.equal(tower0[n], tower1[n])]
    if train_tower:
        assert changed and any(p.grad is not None for p in vision_tower(model).parameters())
    else:
        assert changed == [] and all(p.grad is None for p in vision_tower(model).parameters())
        tower_ids = {id(p) for p in vision_tower(model).parameters()}
        assert not any(id(p) in tower_ids for g in optimizer.param_groups for p in g["params"])


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_fsdp2_world_1_step_keeps_a_frozen_tower(loaded, model_type, tmp_path):
    """The project's FSDP2 set-up (shard_model: every decoder layer and vision block, then the
    root) on the tiny VLM, gloo world size 1: the sharded forward gives the rollout's log-probs,
    one step changes the language model and leaves the frozen tower bit-identical."""
    if dist.is_initialized():
        pytest.skip("a process group from another test is active")
    vlm = loaded[model_type]
    _, prompts = prompt_batch(vlm.processor)
    gens = generate_vlm(vlm.model, prompts, SAMPLING, n=1, seed=0)
    batch = rollout_batch(prompts, gens)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = copy.deepcopy(vlm.model)
        set_vision_trainable(model, False)
        shard_model(model, FsdpConfig(), torch.device("cpu"), 1)
        assert type(vision_tower(model).blocks[0]).__name__.startswith("FSDP")
        model.eval()
        with torch.no_grad():
            logp, _ = vlm_response_logprobs(model, batch, prompts.pixels, SAMPLING.temperature, False)
        torch.testing.assert_close(logp, batch.rollout_logprobs, atol=1e-5, rtol=0)
        tower0, lang0 = tower_and_language(model)
        one_step(model, batch, prompts.pixels)
        tower1, lang1 = tower_and_language(model)
        assert all(torch.equal(tower0[n], tower1[n]) for n in tower0)
        assert any(not torch.equal(lang0[n], lang1[n]) for n in lang0)
    finally:
        dist.destroy_process_group()
