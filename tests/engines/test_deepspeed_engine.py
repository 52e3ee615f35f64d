"""DeepSpeed ZeRO engine: 2 gloo processes on the CPU, ZeRO stages 1, 2 and 3 from WebGym-style JSON
files, against a hand-written unsharded AdamW reference; plus the JSON checks.

One spawn runs every distributed scenario (:func:`run_worker`); the tests compare what it saved.

Tolerances. The engine and the reference run the same fp32 arithmetic except for the order of the
gradient sums (two ranks, ZeRO's flat buckets, the averaging over ranks). Observed (2026-11-26):
log-probs before training identical; losses / gradient norms within 3e-6 (values ~0.4-7, so
rel 1e-5 leaves a 20x margin); weights and log-probs after three steps within 7e-6 (ZeRO-3; Adam
divides by sqrt(v), which lifts float32 rounding of small gradients to ~1e-3 x lr). Weights use
atol 5e-5: 7x what is seen, 20x below the smallest change a real error makes (one step at the
smallest LR moves Adam weights by ~1e-3). A resumed run repeats the original bit for bit (1e-6).
"""

from __future__ import annotations

import json
import math
import os
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (pip install deepspeed==0.19.8)")

from fsdp_engine_helpers import (
    ENTROPY_COEF,
    LOGPROB_MBS,
    RANK_SAMPLES,
    TEMPERATURE,
    TOTAL_STEPS,
    free_port,
    loss_fn,
    make_batch,
    make_cfg,
    make_model_dir,
    micro_batches,
)

from rlinf.config.actor import ActorConfig, ActorModelConfig, OptimConfig
from rlinf.engines.training.deepspeed_config import (
    DeepSpeedConfigError,
    load_ds_config,
    resolve_ds_config,
)

#: lr of steps 0, 1, 2 (make_cfg: warm-up 1 step from 1e-3 to 1e-2, cosine to 1e-3 over 4 steps)
REF_LRS = [1e-3, 1e-2, 1e-3 + 9e-3 * (1 + math.cos(math.pi / 3)) / 2]
STAGES = (1, 2, 3)
WEIGHT_TOL = 5e-5  #: weights / log-probs after three steps (see the module docstring)


def webgym_json(stage: int, *, bf16="auto", offload: bool = False) -> dict:
    """A DeepSpeed file as the HF Trainer writes them (WebGym's layout): "auto" everywhere."""
    zero = {"stage": stage, "overlap_comm": stage > 1, "contiguous_gradients": True,
            "reduce_bucket_size": "auto", "allgather_partitions": True, "reduce_scatter": True}
    if stage == 3:
        zero.update(stage3_prefetch_bucket_size="auto", stage3_param_persistence_threshold="auto",
                    stage3_max_live_parameters=1e9, stage3_max_reuse_distance=1e9,
                    stage3_gather_16bit_weights_on_model_save=True)
    if offload:
        zero.update(offload_optimizer={"device": "cpu", "pin_memory": True},
                    offload_param={"device": "cpu", "pin_memory": True})
    cfg = {"bf16": {"enabled": bf16}, "fp16": {"enabled": "auto", "loss_scale": 0},
           "zero_optimization": zero, "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
           "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "steps_per_print": 2000,
           "wall_clock_breakdown": False,
           "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                     "weight_decay": "auto"}}}
    if stage == 3:  # WebGym's zero3 files also recompute activations
        cfg["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                           "contiguous_memory_optimization": False, "number_checkpoints": None}
    return cfg


def _train(engine, batch, rank, steps):
    return [engine.train_minibatch(micro_batches(batch, rank), loss_fn, batch.num_response_tokens)
            for _ in range(steps)]


def run_worker(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    """Every scenario in one 2-rank gloo group; saves ``out_dir/rank{rank}.pt`` and timings."""
    import torch.distributed as dist

    from rlinf.engines.training.deepspeed_engine import DeepSpeedEngine

    torch.set_num_threads(1)
    os.environ.pop("LOCAL_RANK", None)  # the engine sets it (DeepSpeed requires it)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    try:
        batch, mine = make_batch(), make_batch().select(RANK_SAMPLES[rank])
        res: dict = {"seconds": {}}

        def new(ds, cfg=None, token_weighted=True):
            return DeepSpeedEngine(model_dir, cfg or make_cfg(), ds, temperature=TEMPERATURE,
                                   total_steps=TOTAL_STEPS, train_entropy=True, micro_batch_size=2,
                                   gradient_accumulation_steps=2, token_weighted=token_weighted)

        bad = os.path.join(out_dir, "ds_config_bad.json")  # refused before any model is loaded
        try:
            new(bad)
        except ValueError as exc:
            res["bad_error"] = str(exc)

        for stage in STAGES:
            t0 = time.perf_counter()
            path = os.path.join(out_dir, f"ds_config_zero{stage}.json")  # a file, as the web config names it
            eng = new(path)
            r = {"notes": eng.notes, "ds_config": eng.ds.config, "num_params": eng.num_params}
            r["logp0"], r["ent0"] = eng.compute_logprobs(mine, LOGPROB_MBS, with_entropy=True)
            r["metrics"] = _train(eng, batch, rank, 1)
            ckpt = os.path.join(out_dir, f"ckpt_zero{stage}")
            eng.save_checkpoint(ckpt)
            r["metrics"] += _train(eng, batch, rank, 2)
            r["logp3"], _ = eng.compute_logprobs(mine, LOGPROB_MBS)
            r["state"] = eng.weight_source()
            if stage == 3:
                eng.export_hf(os.path.join(out_dir, "export"))
            del eng
            resumed = new(path)
            resumed.load_checkpoint(ckpt)
            r["resumed_step"] = resumed.step
            r["resumed_metrics"] = _train(resumed, batch, rank, 2)
            del resumed
            res[stage] = r
            res["seconds"][f"zero{stage}"] = time.perf_counter() - t0

        t0 = time.perf_counter()  # bf16 weights and compute, fp32 masters, ZeRO-2
        eng = new(webgym_json(2, bf16=True))
        res["bf16_logp"], _ = eng.compute_logprobs(mine, LOGPROB_MBS)
        res["bf16_metrics"] = _train(eng, batch, rank, 2)
        res["bf16_dtype"] = str(next(eng.model.parameters()).dtype)
        res["bf16_state_dtype"] = sorted({str(v.dtype) for v in eng.full_state_dict().values()})
        del eng
        res["seconds"]["bf16"] = time.perf_counter() - t0
        eng = new(webgym_json(1), token_weighted=False)  # every micro-batch weighs the same
        res["unweighted_metrics"] = _train(eng, batch, rank, 1)
        del eng
        torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The 2-process run: ``ranks[r]`` is what rank ``r`` saved."""
    import torch.multiprocessing as mp

    d = tmp_path_factory.mktemp("ds_engine")
    model_dir = make_model_dir(str(d / "model"))
    for stage in STAGES:
        (d / f"ds_config_zero{stage}.json").write_text(json.dumps(webgym_json(stage, offload=stage == 3)))
    (d / "ds_config_bad.json").write_text(json.dumps({"zero_optimization": {"stage": 2, "offload_optimizer": "cpu"}}))
    t0 = time.perf_counter()
    mp.spawn(run_worker, args=(2, free_port(), model_dir, str(d)), nprocs=2, join=True)
    wall = time.perf_counter() - t0
    ranks = [torch.load(d / f"rank{r}.pt", weights_only=False) for r in range(2)]
    print(f"2-process DeepSpeed run: {wall:.1f} s; per scenario (rank 0): "
          + ", ".join(f"{k} {v:.1f} s" for k, v in ranks[0]["seconds"].items()))
    return SimpleNamespace(dir=d, model_dir=model_dir, ranks=ranks)


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
    """1 process, no DeepSpeed: the whole batch, token-mean loss, clip 0.5, torch AdamW, 3 steps."""
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
    return SimpleNamespace(logp0=logp0, ent0=ent0, metrics=metrics, logp3=logp3, unweighted=_unweighted(run),
                           state={k: v.detach().clone() for k, v in model.state_dict().items()})


def _unweighted(run) -> dict:
    """First step with token_weighted=False: the mean of the 3 micro-batches' token-mean losses."""
    model, batch = plain_model(run.model_dir), make_batch()
    mbs = micro_batches(batch, 0) + micro_batches(batch, 1)
    loss = 0.0
    for mb in mbs:
        logp, ent = ref_logprobs(model, mb)
        mask = mb.response_mask.float()
        loss = loss + ((-logp * mb.advantages).sum() - ENTROPY_COEF * ent.sum()) / mask.sum() / len(mbs)
    loss.backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    return {"loss": loss.item(), "grad_norm": norm.item()}


def both(run, stage, key):
    return torch.cat([run.ranks[0][stage][key], run.ranks[1][stage][key]])


def assert_metrics_close(got, want, keys=("loss", "grad_norm", "lr"), tol=1e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for k in keys:
            assert g[k] == pytest.approx(w[k], rel=tol, abs=tol), (k, g, w)


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES)
def test_logprobs_match_the_hf_model(run, reference, stage):
    logp, ent = both(run, stage, "logp0"), both(run, stage, "ent0")
    torch.testing.assert_close(logp, reference.logp0, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, reference.ent0, atol=1e-5, rtol=0)
    outside = make_batch().response_mask == 0
    assert outside.any() and (logp[outside] == 0).all()


@pytest.mark.parametrize("stage", STAGES)
def test_train_steps_match_plain_adamw(run, reference, stage):
    assert any(m["grad_norm"] > 0.5 for m in reference.metrics)  # clipping is exercised
    for r in range(2):  # uneven split: rank 0 has 2 micro-batches, rank 1 one (a dummy pass)
        assert_metrics_close(run.ranks[r][stage]["metrics"], reference.metrics)
        assert set(run.ranks[r][stage]["metrics"][0]) >= {"pg_loss", "entropy", "loss", "grad_norm", "lr"}
    torch.testing.assert_close(both(run, stage, "logp3"), reference.logp3, atol=WEIGHT_TOL, rtol=0)


@pytest.mark.parametrize("stage", STAGES)
def test_weight_source_names_and_values_equal_the_hf_state_dict(run, reference, stage):
    state = run.ranks[0][stage]["state"]
    assert run.ranks[1][stage]["state"] == {}  # only rank 0 receives the weights
    assert list(state) == list(reference.state)  # HF names, tied lm_head included, same order
    for name, want in reference.state.items():
        assert state[name].dtype == torch.float32 and state[name].shape == want.shape, name
        torch.testing.assert_close(state[name], want, atol=WEIGHT_TOL, rtol=0, msg=name)
    assert run.ranks[0][stage]["num_params"] == sum(v.numel() for k, v in reference.state.items()
                                                    if k != "lm_head.weight")


@pytest.mark.parametrize("stage", STAGES)
def test_checkpoint_resume_continues_with_identical_losses(run, stage):
    r0 = run.ranks[0][stage]
    assert r0["resumed_step"] == 1
    assert_metrics_close(r0["resumed_metrics"], r0["metrics"][1:], keys=tuple(r0["metrics"][1]), tol=1e-6)
    record = json.loads((run.dir / f"ckpt_zero{stage}" / "engine_state.json").read_text())
    assert (record["step"], record["world_size"], record["zero_stage"]) == (1, 2, stage)
    assert any("optim_states" in name for name in record["files"])


def test_partial_or_foreign_checkpoints_are_refused(run, tmp_path):
    from rlinf.engines.training.deepspeed_checkpoint import check_record, read_record

    src = run.dir / "ckpt_zero2"
    state = read_record(str(src))
    check_record(str(src), state, world_size=2, stage=2)  # the complete one passes
    with pytest.raises(ValueError, match="saved by 2 ranks, loading on 1"):
        check_record(str(src), state, world_size=1, stage=2)
    with pytest.raises(ValueError, match="saved with ZeRO stage 2, this engine runs stage 3"):
        check_record(str(src), state, world_size=2, stage=3)
    name = next(iter(state["files"]))
    broken = dict(state, files={**state["files"], name: state["files"][name] + 1})
    with pytest.raises(ValueError, match=f"incomplete checkpoint: deepspeed/{name} has"):
        check_record(str(src), broken, world_size=2, stage=2)
    missing = dict(state, files={**state["files"], "gone.pt": 5})
    with pytest.raises(FileNotFoundError, match="deepspeed/gone.pt is missing"):
        check_record(str(src), missing, world_size=2, stage=2)
    with pytest.raises(FileNotFoundError, match="no engine_state.json: the save never finished"):
        read_record(str(tmp_path))  # an interrupted save: shards without the record


def test_webgym_keys_take_effect(run):
    for stage in STAGES:
        cfg = run.ranks[0][stage]["ds_config"]
        assert cfg["zero_optimization"]["stage"] == stage
        # the web config's batch settings; train_batch_size = 2 x 2 x 2 ranks; clip from actor.optim
        assert (cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"],
                cfg["train_batch_size"], cfg["gradient_clipping"]) == (2, 2, 8, 0.5)
        assert cfg["zero_optimization"]["reduce_bucket_size"] == 32 * 32  # "auto" = hidden^2
        assert cfg["zero_optimization"]["overlap_comm"] is (stage > 1)  # passed to DeepSpeed as written
        assert "optimizer" not in cfg and cfg["bf16"]["enabled"] is False
    notes = " | ".join(run.ranks[0][3]["notes"])
    assert "offload_optimizer: no effect on a CPU device" in notes
    assert "offload_param: no effect on a CPU device" in notes
    assert "offload_param" not in run.ranks[0][3]["ds_config"]["zero_optimization"]


def test_engine_refuses_a_bad_file_naming_file_and_key(run):
    for r in range(2):
        assert run.ranks[r]["bad_error"] == ("ds_config_bad.json: zero_optimization.offload_optimizer: "
                                             "expected an object, got 'cpu'")


def test_equal_micro_batch_weights_without_token_weighting(run, reference):
    # 3 micro-batches over both ranks (rank 0: samples 0-1, 2-3; rank 1: 4-5), each 1/3
    for r in range(2):
        m = run.ranks[r]["unweighted_metrics"][0]
        assert m["loss"] == pytest.approx(reference.unweighted["loss"], abs=1e-5)
        assert m["grad_norm"] == pytest.approx(reference.unweighted["grad_norm"], rel=1e-5)
    assert abs(reference.unweighted["loss"] - reference.metrics[0]["loss"]) > 1e-3  # a different weighting


def test_bf16_trains_with_bf16_weights_and_fp32_masters(run, reference):
    r0 = run.ranks[0]
    assert r0["bf16_dtype"] == "torch.bfloat16" and r0["bf16_state_dtype"] == ["torch.float32"]
    logp = torch.cat([run.ranks[0]["bf16_logp"], run.ranks[1]["bf16_logp"]])
    assert torch.isfinite(logp).all() and not torch.equal(logp, reference.logp0)
    assert (logp - reference.logp0).abs().max() < 0.1  # bf16 rounding, same model
    for m in r0["bf16_metrics"]:
        assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]), m
    assert r0["bf16_metrics"][0]["loss"] == pytest.approx(reference.metrics[0]["loss"], abs=0.05)


def test_export_hf_from_zero3_loads_in_transformers(run, reference):
    exported = plain_model(run.dir / "export")
    for name, want in reference.state.items():
        torch.testing.assert_close(exported.state_dict()[name], want, atol=WEIGHT_TOL, rtol=0, msg=name)
    assert (run.dir / "export" / "tokenizer.json").read_bytes() == (run.dir / "model" / "tokenizer.json").read_bytes()


# ---- the JSON checks (no processes) --------------------------------------------------------------
def _resolve(raw, cfg=None, **kw):
    kw = {"world_size": 2, "device_type": "cpu", "source": "ds.json", **kw}
    return resolve_ds_config(raw, cfg or ActorConfig(), **kw)


@pytest.mark.parametrize("raw, key, why", [
    ({"zero_optimisation": {"stage": 1}}, "zero_optimisation", "unknown DeepSpeed key"),
    ({"overlap_comm": True}, "overlap_comm", "belongs under zero_optimization"),
    ({"zero_optimization": {"stage": 4}}, "zero_optimization.stage", "expected 0, 1, 2 or 3, got 4"),
    ({"zero_optimization": {"stage": 2, "overlap_com": True}}, "zero_optimization.overlap_com", "unknown key"),
    ({"zero_optimization": {"stage": 2, "reduce_bucket_size": -5}}, "zero_optimization.reduce_bucket_size",
     "greater than 0"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}},
     "zero_optimization.offload_param.device", "nvme is refused"),
    ({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}, "zero_optimization.offload_param",
     "needs stage 3"),
    ({"fp16": {"enabled": True}}, "fp16.enabled", "fp16 loss scaling is not supported"),
    ({"bf16": {"enabled": "yes"}}, "bf16.enabled", 'expected true, false or "auto"'),
    ({"bf16": {"enabled": True, "immediate_grad_updat": True}}, "bf16.immediate_grad_updat", "unknown key"),
    ({"gradient_clipping": 2.0}, "gradient_clipping", "disagrees with actor.optim.clip_grad=1.0"),
    ({"train_micro_batch_size_per_gpu": 0}, "train_micro_batch_size_per_gpu", "positive integer"),
    ({"optimizer": {"type": "Lamb"}}, "optimizer.type", "'Lamb' is refused"),
    ({"optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}}, "optimizer.params.lr", "disagrees with actor.optim"),
    ({"optimizer": {"type": "Adam", "params": {"adam_w_mode": False}}}, "optimizer.params.adam_w_mode",
     "decoupled weight decay"),
    ({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}}},
     "scheduler.params.warmup_num_steps", "follows actor.lr_sched"),
    ({"activation_checkpointing": {"partition_activation": True}}, "activation_checkpointing.partition_activation",
     "unknown key"),
    ({"zero_allow_untested_optimizer": False}, "zero_allow_untested_optimizer", "torch.optim.AdamW"),
    ({"zero_optimization": {"stage": 3, "stage3_max_live_parameters": "auto"}},
     "zero_optimization.stage3_max_live_parameters", '"auto" cannot be filled in'),
])
def test_bad_json_is_refused_naming_the_key(raw, key, why):
    with pytest.raises(DeepSpeedConfigError) as info:
        _resolve(raw)
    message = str(info.value)
    assert info.value.key == key and message.startswith(f"ds.json: {key}: ") and why in message, message
    assert "\n" not in message


def test_json_resolution_fills_autos_and_notes_replacements():
    cfg = make_cfg()  # clip_grad 0.5, lr 1e-2, beta2 0.99, weight decay 0.01
    raw = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": "auto", "train_batch_size": 99,
           "gradient_clipping": 0.5, "bf16": {"enabled": "auto"},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.99], "eps": "auto"}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}},
           "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto",
                                 "stage3_param_persistence_threshold": "auto", "offload_optimizer": {"device": "cpu"}}}
    r = _resolve(raw, cfg, micro_batch_size=3, gradient_accumulation_steps=4, hidden_size=10)
    c = r.config
    assert (c["train_micro_batch_size_per_gpu"], c["gradient_accumulation_steps"], c["train_batch_size"]) == (3, 4, 24)
    assert c["zero_optimization"]["stage3_prefetch_bucket_size"] == 90
    assert c["zero_optimization"]["stage3_param_persistence_threshold"] == 100
    assert "offload_optimizer" not in c["zero_optimization"] and not r.offload_optimizer
    assert "scheduler" not in c and "optimizer" not in c and r.stage == 3 and not r.bf16
    notes = "\n".join(r.notes)
    assert "train_micro_batch_size_per_gpu: 8 replaced by 3 (algorithm_config.per_device_train_batch_size)" in notes
    assert "train_batch_size: 99 replaced by 24" in notes and "scheduler: the LR follows actor.lr_sched" in notes
    # on a GPU the offload is passed to DeepSpeed, with torch's AdamW stepping the CPU partitions
    g = _resolve(raw, cfg, device_type="cuda")
    assert g.offload_optimizer and g.config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert g.config["zero_force_ds_cpu_optimizer"] is False
    # precision bf16 turns bf16 "auto" on; without batch arguments the file's integers stay
    bf = _resolve({"bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": 5},
                  ActorConfig(optim=OptimConfig(), model=ActorModelConfig(precision="bf16")))
    assert bf.bf16 and bf.config["train_micro_batch_size_per_gpu"] == 5 and bf.config["train_batch_size"] == 10
    with pytest.raises(DeepSpeedConfigError, match="bf16.enabled: false is refused with actor.model.precision bf16"):
        _resolve({"bf16": {"enabled": False}}, ActorConfig(model=ActorModelConfig(precision="bf16")))


def test_load_ds_config_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json: no such file"):
        load_ds_config(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"zero_optimization": {"stage": 2}\n  "bf16": {}}')
    with pytest.raises(ValueError, match=r"bad.json:2:3: not valid JSON"):
        load_ds_config(str(bad))
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        load_ds_config(str(tmp_path / "list.json"))


SHIPPED = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "web_agent", "config", "deepspeed")


@pytest.mark.skipif(not os.path.isdir(SHIPPED), reason="examples/web_agent/config/deepspeed/ not present")
def test_shipped_webgym_files_resolve():
    names = sorted(n for n in os.listdir(SHIPPED) if n.endswith(".json"))
    assert names, SHIPPED
    for name in names:
        raw = load_ds_config(os.path.join(SHIPPED, name))
        r = resolve_ds_config(raw, ActorConfig(), world_size=2, device_type="cpu", micro_batch_size=3,
                              gradient_accumulation_steps=4, hidden_size=64, source=name)
        assert r.stage == int(name.split("zero")[1][0]), name
