"""Shared pieces of the FSDP engine tests: a tiny random Qwen2 checkpoint, a ragged batch, the
loss, configs, and the 2-process worker (gloo on the CPU) that runs every distributed scenario
once and saves what the tests compare."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch

from rlinf.algorithms import masked_mean
from rlinf.config.actor import (
    ActorConfig,
    ActorModelConfig,
    AmpConfig,
    FsdpConfig,
    LrSchedConfig,
    MixedPrecisionConfig,
    OptimConfig,
)
from rlinf.data.rollout_batch import RolloutBatch

VOCAB = 96
TEMPERATURE = 0.7
ENTROPY_COEF = 0.01
TOTAL_STEPS = 4
RANK_SAMPLES = {0: [0, 1, 2, 3], 1: [4, 5]}  # uneven on purpose: rank 1 runs dummy passes
TRAIN_MBS = 2
LOGPROB_MBS = 3


def make_model_dir(path: str) -> str:
    """Random tiny Qwen2 (tied embeddings, like the small Qwen2.5 models) + a word-level
    tokenizer, saved as an HF folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True, initializer_range=0.2, pad_token_id=0)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    vocab = {"<pad>": 0, **{f"w{i}": i for i in range(1, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>").save_pretrained(path)
    return path


def make_batch() -> RolloutBatch:
    """6 samples: left-padded prompts of 1-5 tokens, right-padded responses of 0-6 tokens."""
    g = torch.Generator().manual_seed(1)
    p_lens, r_lens = [3, 5, 1, 4, 2, 5], [6, 2, 4, 0, 5, 3]
    prompts = [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in p_lens]
    responses = [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in r_lens]
    batch = RolloutBatch.from_token_lists(prompts, responses, pad_token_id=0)
    batch.advantages = torch.randn(batch.response_ids.shape, generator=g) * batch.response_mask
    return batch


def loss_fn(logprobs, entropy, mb):
    """Token-mean policy-gradient loss with an entropy bonus (over ``train_mask``)."""
    mask = mb.train_mask
    pg = masked_mean(-logprobs * mb.advantages, mask)
    ent = masked_mean(entropy, mask) if entropy is not None else torch.zeros(())
    return pg - ENTROPY_COEF * ent, {"pg_loss": pg.detach(), "entropy": ent.detach()}


def make_cfg(*, gradient_checkpointing: bool = False, clip_grad: float = 0.5, **fsdp) -> ActorConfig:
    return ActorConfig(
        model=ActorModelConfig(gradient_checkpointing=gradient_checkpointing),
        optim=OptimConfig(optimizer="adamw", lr=1e-2, min_lr=1e-3, weight_decay=0.01, adam_beta2=0.99,
                          clip_grad=clip_grad),
        lr_sched=LrSchedConfig(lr_warmup_iters=1, lr_warmup_init=1e-3, lr_decay_style="cosine"),
        fsdp_config=FsdpConfig(**fsdp),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def micro_batches(batch: RolloutBatch, rank: int) -> list[RolloutBatch]:
    mine = batch.select(RANK_SAMPLES[rank])
    return [mine.select(range(i, min(i + TRAIN_MBS, mine.batch_size))) for i in range(0, mine.batch_size, TRAIN_MBS)]


def _train(engine, batch, rank, steps):
    n_total = batch.num_response_tokens  # the whole minibatch, all ranks
    return [engine.train_minibatch(micro_batches(batch, rank), loss_fn, n_total) for _ in range(steps)]


def run_worker(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    """Every distributed scenario in one process group; saves ``out_dir/rank{rank}.pt``."""
    import torch.distributed as dist

    from rlinf.engines.training.fsdp import FSDPEngine

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    try:
        batch, mine = make_batch(), make_batch().select(RANK_SAMPLES[rank])
        res: dict = {}

        def new(cfg):
            return FSDPEngine(model_dir, cfg, temperature=TEMPERATURE, device=torch.device("cpu"),
                              total_steps=TOTAL_STEPS)

        ckpt = os.path.join(out_dir, "ckpt_step1")

        # (1)-(4) full_shard fp32: logprobs, 3 steps with a checkpoint after step 1, export.
        eng = new(make_cfg())
        res["logp0"], res["ent0"] = eng.compute_logprobs(mine, LOGPROB_MBS, with_entropy=True)
        res["metrics"] = _train(eng, batch, rank, 1)
        eng.save_checkpoint(ckpt)
        res["metrics"] += _train(eng, batch, rank, 2)
        res["logp3"], _ = eng.compute_logprobs(mine, LOGPROB_MBS)
        res["state"] = eng.full_state_dict()
        from rlinf.scheduler.transfer import send_order

        source = eng.weight_source()  # every rank gathers, in the order a sync sends
        specs = source.tensor_specs()
        res["gathered"] = {specs[i][0]: source[specs[i][0]].clone() for i in send_order(specs)}
        eng.export_hf(os.path.join(out_dir, "export"))
        del eng

        resumed = new(make_cfg())
        resumed.load_checkpoint(ckpt)
        res["resumed_step"] = resumed.step
        res["resumed_metrics"] = _train(resumed, batch, rank, 2)
        res["resumed_state"] = resumed.full_state_dict()
        del resumed

        # no_shard (replicated, all-reduce) + gradient checkpointing + a sync every micro-batch
        eng = new(make_cfg(sharding_strategy="no_shard", enable_gradient_accumulation=False,
                           gradient_checkpointing=True))
        res["no_shard_metrics"] = _train(eng, batch, rank, 3)
        del eng
        # shard_grad_op (no reshard after forward), clipping off
        eng = new(make_cfg(sharding_strategy="shard_grad_op", clip_grad=0.0))
        res["sgo_metrics"] = _train(eng, batch, rank, 1)
        del eng

        # (5) bf16 compute weights with fp32 reduction; bf16 autocast
        mp = MixedPrecisionConfig(param_dtype="bf16", reduce_dtype="fp32")
        eng = new(make_cfg(mixed_precision=mp))
        res["bf16_logp"], _ = eng.compute_logprobs(mine, LOGPROB_MBS)
        res["bf16_metrics"] = _train(eng, batch, rank, 2)
        del eng
        eng = new(make_cfg(amp_autocast=AmpConfig(enabled=True, precision="bf16")))
        res["amp_metrics"] = _train(eng, batch, rank, 1)
        del eng
        torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run_single(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    """World size 1: resume the 2-rank checkpoint (DCP reshards it) and train steps 2-3 on the
    whole batch; saves ``out_dir/single.pt``."""
    import torch.distributed as dist

    from rlinf.engines.training.fsdp import FSDPEngine

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        batch = make_batch()
        eng = FSDPEngine(model_dir, make_cfg(), temperature=TEMPERATURE, device=torch.device("cpu"),
                         total_steps=TOTAL_STEPS)
        eng.load_checkpoint(os.path.join(out_dir, "ckpt_step1"))
        res = {"step": eng.step}
        mbs = [batch.select(range(i, min(i + TRAIN_MBS, 6))) for i in range(0, 6, TRAIN_MBS)]
        res["metrics"] = [eng.train_minibatch(mbs, loss_fn, batch.num_response_tokens) for _ in range(2)]
        before, _ = eng.compute_logprobs(batch, LOGPROB_MBS)
        eng.offload()  # CPU device: no-op
        eng.onload()
        res["logp"], _ = eng.compute_logprobs(batch, 4)
        res["offload_same"] = torch.equal(before, res["logp"])
        empty, ent = eng.compute_logprobs(batch.select([]), 2, with_entropy=True)
        res["empty_shapes"] = [list(empty.shape), list(ent.shape)]
        torch.save(res, os.path.join(out_dir, "single.pt"))
    finally:
        dist.destroy_process_group()


def run_gpu(rank: int, port: int, model_dir: str, out_dir: str) -> None:
    """GPU only (world size 1, NCCL): offload / onload round trip and ``cpu_offload``."""
    import torch.distributed as dist

    from rlinf.engines.training.fsdp import FSDPEngine

    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        batch, device = make_batch(), torch.device("cuda:0")
        mbs = [batch.select(range(i, min(i + TRAIN_MBS, 6))) for i in range(0, 6, TRAIN_MBS)]
        mp = MixedPrecisionConfig(param_dtype="bf16", reduce_dtype="fp32")
        eng = FSDPEngine(model_dir, make_cfg(mixed_precision=mp), device=device, total_steps=TOTAL_STEPS)
        res = {"metrics": [eng.train_minibatch(mbs, loss_fn, batch.num_response_tokens)]}
        before, _ = eng.compute_logprobs(batch, LOGPROB_MBS)
        res["alloc_on"] = torch.cuda.memory_allocated(device)
        eng.offload()
        res["alloc_off"] = torch.cuda.memory_allocated(device)
        eng.onload()
        res["offload_same"] = torch.equal(before, eng.compute_logprobs(batch, LOGPROB_MBS)[0])
        res["metrics"].append(eng.train_minibatch(mbs, loss_fn, batch.num_response_tokens))
        del eng
        eng = FSDPEngine(model_dir, make_cfg(cpu_offload=True), device=device, total_steps=TOTAL_STEPS)
        res["cpu_offload_metrics"] = [eng.train_minibatch(mbs, loss_fn, batch.num_response_tokens)]
        res["cpu_offload_state_keys"] = len(eng.full_state_dict())
        torch.save(res, os.path.join(out_dir, "gpu.pt"))
    finally:
        dist.destroy_process_group()


def _world_of_one(rank: int, port: int, scenario, model_dir: str, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        torch.save(scenario(model_dir, out), os.path.join(out, "result.pt"))
    finally:
        dist.destroy_process_group()


def run_in_world_of_one(scenario, folder) -> tuple[dict, str]:
    """``scenario(model_dir, out_dir) -> dict`` in a spawned process with a gloo group of one,
    on a fresh tiny model; returns its dict and the model folder."""
    import torch.multiprocessing as mp

    model_dir = make_model_dir(os.path.join(str(folder), "model"))
    mp.spawn(_world_of_one, args=(free_port(), scenario, model_dir, str(folder)), nprocs=1, join=True)
    return torch.load(os.path.join(str(folder), "result.pt"), weights_only=False), model_dir
