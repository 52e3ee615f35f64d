"""FSDP2 training engine: 2 gloo processes on the CPU against a hand-written unsharded reference.

One spawn runs every distributed scenario (see ``fsdp_engine_helpers.run_worker``); the tests
below compare what it saved.
"""

from __future__ import annotations

import math
import os
import time
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp
from fsdp_engine_helpers import (
    ENTROPY_COEF,
    TEMPERATURE,
    TOTAL_STEPS,
    free_port,
    make_batch,
    make_cfg,
    make_model_dir,
    run_gpu,
    run_single,
    run_worker,
)

from rlinf.config.actor import FsdpConfig, LrSchedConfig, OptimConfig
from rlinf.engines.training.lr_schedule import LrSchedule, schedule_from_config

#: lr of steps 0, 1, 2: warm-up start 1e-3; peak 1e-2; cosine 1/3 of the way to 1e-3 over 3 steps
REF_LRS = [1e-3, 1e-2, 1e-3 + 9e-3 * (1 + math.cos(math.pi / 3)) / 2]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The 2-process run: ``ranks[r]`` is what rank ``r`` saved."""
    d = tmp_path_factory.mktemp("fsdp_engine")
    model_dir = make_model_dir(str(d / "model"))
    t0 = time.perf_counter()
    mp.spawn(run_worker, args=(2, free_port(), model_dir, str(d)), nprocs=2, join=True)
    print(f"2-process FSDP run: {time.perf_counter() - t0:.1f} s")
    ranks = [torch.load(d / f"rank{r}.pt", weights_only=True) for r in range(2)]
    t0 = time.perf_counter()
    mp.spawn(run_single, args=(free_port(), model_dir, str(d)), nprocs=1, join=True)
    print(f"1-process FSDP run: {time.perf_counter() - t0:.1f} s")
    single = torch.load(d / "single.pt", weights_only=True)
    return SimpleNamespace(dir=d, model_dir=model_dir, ranks=ranks, single=single)


def ref_logprobs(model, batch):
    """Response log-probs and entropies of a plain HF forward, computed by hand."""
    ids, attn, pos = batch.model_inputs()
    P, R = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, P - 1:P + R - 1]
    logp_all = torch.log_softmax(logits / TEMPERATURE, dim=-1)
    mask = batch.response_mask.float()
    logp = logp_all.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1) * mask
    entropy = -(logp_all.exp() * logp_all).sum(-1) * mask
    return logp, entropy


def plain_model(path, state=None):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if state is not None:
        model.load_state_dict(state)
    return model


@pytest.fixture(scope="module")
def reference(run):
    """1 process, unsharded: the whole batch, token-mean loss, clip 0.5, AdamW, 3 steps."""
    batch = make_batch()
    model = plain_model(run.model_dir)
    with torch.no_grad():
        logp0, ent0 = ref_logprobs(model, batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)
    mask = batch.response_mask.float()
    metrics = []
    for lr in REF_LRS:
        logp, ent = ref_logprobs(model, batch)
        loss = ((-logp * batch.advantages).sum() - ENTROPY_COEF * ent.sum()) / mask.sum()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        opt.zero_grad()
        metrics.append({"loss": loss.item(), "grad_norm": norm.item(), "lr": lr})
    with torch.no_grad():
        logp3, _ = ref_logprobs(model, batch)
    return SimpleNamespace(logp0=logp0, ent0=ent0, metrics=metrics, logp3=logp3,
                           state={k: v.detach().clone() for k, v in model.state_dict().items()})


def both(run, key):
    return torch.cat([run.ranks[0][key], run.ranks[1][key]])


def assert_metrics_close(got, want, keys=("loss", "grad_norm", "lr"), tol=1e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for k in keys:
            assert g[k] == pytest.approx(w[k], rel=tol, abs=tol), (k, g, w)


@pytest.mark.slow
def test_logprobs_match_unsharded_forward(run, reference):
    logp, ent = both(run, "logp0"), both(run, "ent0")
    torch.testing.assert_close(logp, reference.logp0, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, reference.ent0, atol=1e-5, rtol=0)
    outside = make_batch().response_mask == 0
    assert outside.any() and (logp[outside] == 0).all() and (ent[outside] == 0).all()


def test_train_steps_match_unsharded_reference(run, reference):
    assert any(m["grad_norm"] > 0.5 for m in reference.metrics)  # clipping is exercised
    for r in range(2):  # uneven split: rank 0 has 2 micro-batches, rank 1 one
        assert_metrics_close(run.ranks[r]["metrics"], reference.metrics)
        assert set(run.ranks[r]["metrics"][0]) >= {"pg_loss", "entropy", "loss", "grad_norm", "lr"}
    state = run.ranks[0]["state"]
    for name, want in reference.state.items():
        torch.testing.assert_close(state[name], want, atol=1e-5, rtol=0, msg=name)
    torch.testing.assert_close(both(run, "logp3"), reference.logp3, atol=1e-5, rtol=0)


def test_no_shard_and_shard_grad_op_match_reference(run, reference):
    # no_shard + gradient checkpointing + gradient sync after every micro-batch
    assert_metrics_close(run.ranks[0]["no_shard_metrics"], reference.metrics)
    # shard_grad_op with clip_grad 0: same first step, unclipped norm reported
    assert_metrics_close(run.ranks[0]["sgo_metrics"], reference.metrics[:1])


def test_checkpoint_resume_reproduces_steps(run):
    r0 = run.ranks[0]
    assert r0["resumed_step"] == 1
    assert_metrics_close(r0["resumed_metrics"], r0["metrics"][1:], keys=tuple(r0["metrics"][1]), tol=1e-6)
    for name, value in r0["state"].items():
        torch.testing.assert_close(r0["resumed_state"][name], value, atol=1e-6, rtol=0, msg=name)
    assert os.path.isfile(run.dir / "ckpt_step1" / "engine_state.json")


def test_world_size_one_resumes_two_rank_checkpoint(run, reference):
    single = run.single
    assert single["step"] == 1
    assert_metrics_close(single["metrics"], run.ranks[0]["metrics"][1:], keys=tuple(single["metrics"][0]))
    assert_metrics_close(single["metrics"], reference.metrics[1:])
    torch.testing.assert_close(single["logp"], reference.logp3, atol=1e-5, rtol=0)
    assert single["offload_same"]  # offload / onload are no-ops on the CPU
    assert single["empty_shapes"] == [[0, 6], [0, 6]]


def test_weights_gathered_one_tensor_at_a_time_equal_the_full_state_dict(run):
    """What a weight sync sends (GatheredWeights): the full state dict's tensors, gathered on both
    ranks in the sync's order; tied names are announced once (receivers fill the other)."""
    state, gathered = run.ranks[0]["state"], run.ranks[0]["gathered"]
    assert run.ranks[1]["gathered"].keys() == gathered.keys()
    assert set(gathered) <= set(state)
    for name, value in gathered.items():
        assert torch.equal(value, state[name]) and value.dtype == state[name].dtype, name
    left_out = set(state) - set(gathered)
    assert all(any(torch.equal(state[n], gathered[g]) for g in gathered) for n in left_out)
    assert len(left_out) <= 1  # the tiny model ties lm_head.weight to the embedding


def test_full_state_dict_and_export_hf_round_trip(run):
    from transformers import PreTrainedTokenizerFast

    state = run.ranks[0]["state"]
    assert run.ranks[1]["state"] == {}  # only rank 0 receives the full weights
    assert all(v.device.type == "cpu" and v.dtype == torch.float32 for v in state.values())
    batch = make_batch()
    with torch.no_grad():
        from_state, _ = ref_logprobs(plain_model(run.model_dir, state), batch)
        exported = plain_model(run.dir / "export")
        from_export, _ = ref_logprobs(exported, batch)
        ids, attn, pos = batch.model_inputs()
        logits_state = plain_model(run.model_dir, state)(input_ids=ids, attention_mask=attn).logits
        logits_export = exported(input_ids=ids, attention_mask=attn).logits
    torch.testing.assert_close(from_state, both(run, "logp3"), atol=1e-5, rtol=0)
    torch.testing.assert_close(logits_export, logits_state, atol=0, rtol=0)
    torch.testing.assert_close(from_export, from_state, atol=0, rtol=0)
    for name in ("tokenizer.json", "tokenizer_config.json"):  # tokenizer files copied verbatim
        assert (run.dir / "export" / name).read_bytes() == (run.dir / "model" / name).read_bytes()
    tok = PreTrainedTokenizerFast.from_pretrained(run.dir / "export")
    assert tok.pad_token == "<pad>" and tok("w5 w7")["input_ids"] == [5, 7]


def test_bf16_mixed_precision_runs(run):
    bf16_logp = both(run, "bf16_logp")
    fp32_logp = both(run, "logp0")
    assert torch.isfinite(bf16_logp).all()
    assert (bf16_logp - fp32_logp).abs().max() < 0.1  # close, but computed in bf16:
    assert not torch.equal(bf16_logp, fp32_logp)
    for key in ("bf16_metrics", "amp_metrics"):
        for m in run.ranks[0][key]:
            assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]), (key, m)


def test_lr_schedule_warmup_then_cosine():
    s = LrSchedule(max_lr=1.0, min_lr=0.1, warmup_init=0.0, warmup_steps=4, decay_style="cosine",
                   decay_steps=8)
    got = [s.lr_at(i) for i in range(10)]
    # warm-up 0, .25, .5, .75; cosine over steps 4..8: 0.1 + 0.9 * (1 + cos(pi * k / 4)) / 2
    want = [0.0, 0.25, 0.5, 0.75, 1.0, 0.86819805, 0.55, 0.23180195, 0.1, 0.1]
    assert got == pytest.approx(want, abs=1e-8)
    linear = LrSchedule(max_lr=1.0, min_lr=0.0, warmup_steps=0, decay_style="linear", decay_steps=4)
    assert [linear.lr_at(i) for i in range(5)] == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    assert LrSchedule(max_lr=0.5).lr_at(100) == 0.5
    # from the config: warm-up as a fraction of total_steps, decay over total_steps, min_lr fallback
    s = schedule_from_config(OptimConfig(lr=2e-3, min_lr=1e-4),
                             LrSchedConfig(lr_warmup_fraction=0.25, lr_decay_style="cosine"), total_steps=8)
    assert (s.warmup_steps, s.decay_steps, s.max_lr, s.min_lr) == (2, 8, 2e-3, 1e-4)
    assert s.lr_at(1) == pytest.approx(1e-3) and s.lr_at(5) == pytest.approx(1.05e-3)
    with pytest.raises(ValueError, match="total_steps"):
        schedule_from_config(OptimConfig(), LrSchedConfig(lr_warmup_fraction=0.1), total_steps=None)
    with pytest.raises(ValueError, match="lr_decay_iters"):
        schedule_from_config(OptimConfig(), LrSchedConfig(lr_decay_style="linear"), total_steps=None)
    assert TOTAL_STEPS == 4  # the 2-process run's schedule: REF_LRS above


def test_use_liger_kernel_on_cpu_is_a_clear_error(tmp_path):
    from rlinf.engines.training.fsdp import FSDPEngine

    cfg = make_cfg(use_liger_kernel=True)
    with pytest.raises(ValueError, match="use_liger_kernel.*needs a GPU"):
        FSDPEngine(str(tmp_path), cfg, device=torch.device("cpu"))
    from rlinf.utils.typed_config import ConfigError, parse_section

    with pytest.raises(ConfigError, match="grad_scaler.enabled: True is refused: fp16 loss scaling"):
        parse_section(FsdpConfig, {"grad_scaler": {"enabled": True}}, "actor.fsdp_config")
    assert FsdpConfig().use_liger_kernel is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU-only: offload/onload move state GPU <-> CPU")
def test_gpu_offload_onload_and_cpu_offload(tmp_path):
    model_dir = make_model_dir(str(tmp_path / "model"))
    mp.spawn(run_gpu, args=(free_port(), model_dir, str(tmp_path)), nprocs=1, join=True)
    res = torch.load(tmp_path / "gpu.pt", weights_only=True)
    assert res["alloc_off"] < res["alloc_on"]
    assert res["offload_same"]
    for m in res["metrics"] + res["cpu_offload_metrics"]:
        assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]), m
    assert res["cpu_offload_state_keys"] > 0
