"""Megatron engine on the CPU (megatron-core through tests/megatron_cpu_shim.py, gloo), against
results computed here: HF log-probs, the FSDP engine's step on the same weights, TP=2 / PP=2
against TP=1, and the weight gather against the converter's ``megatron_to_hf``.

Every scenario runs in spawned processes (the shim stays out of the pytest process), each with a
deadline; the tests compare what they saved.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.utils.spawn import free_local_port, spawn_ranks
from rlinf.utils.typed_config import parse_section

pytest.importorskip("megatron.core")

TEMPERATURE = 0.7
LR = 1e-4
TIMEOUT_S = 240


# ---- shared pieces (run in the spawned processes too) -------------------------------------------
def make_model(path: Path, tied: bool, seed: int = 0) -> str:
    """A random tiny Qwen2 (hidden 64, 2 layers, vocab 200 -> Megatron pads it to 256 / 512)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=200, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=tied)
    Qwen2ForCausalLM(config).save_pretrained(path)
    return str(path)


def actor_cfg(cache: str, backend: str = "megatron", tp: int = 1, pp: int = 1) -> ActorConfig:
    raw = {"training_backend": backend, "optim": {"lr": LR, "clip_grad": 1.0, "weight_decay": 0.01},
           "model": {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp},
           "megatron": {"use_hf_ckpt": backend == "megatron", "ckpt": {"save_path": cache}}}
    return parse_section(ActorConfig, raw, "actor")


ALGO = AlgorithmConfig(group_size=2, normalize_advantages=False, entropy_bonus=0.01, calculate_entropy=True)


def make_batch() -> RolloutBatch:
    """Ragged prompts (left padded) and responses (right padded), two groups of two."""
    batch = RolloutBatch.from_token_lists([[11, 12, 13], [14], [15, 16], [17, 18, 19, 20]],
                                          [[21, 22], [23, 24, 25], [26], [27, 28, 29, 30]],
                                          pad_token_id=0, group_size=2)
    batch.rewards = torch.tensor([1.0, -1.0, -1.0, 1.0])
    return batch


def with_advantages(batch: RolloutBatch, old_logprobs: torch.Tensor) -> RolloutBatch:
    from rlinf.objectives.llm import add_advantages

    batch.old_logprobs = old_logprobs
    add_advantages(batch, ALGO)
    return batch


def _entry(rank: int, world: int, port: int, target: str, args: tuple, out: str) -> None:
    try:
        from megatron_cpu_shim import install  # tests/ is on sys.path (conftest.py)

        install()
        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
        import torch.distributed as dist

        dist.init_process_group("gloo")
        result = globals()[target](*args)
        torch.save(result, Path(out) / f"{target}_rank{rank}.pt")
        dist.destroy_process_group()
    except BaseException:
        (Path(out) / f"error_rank{rank}.txt").write_text(traceback.format_exc())
        raise


def spawn(target: str, world: int, args: tuple, out: Path) -> list:
    """Run ``target(*args)`` on ``world`` gloo processes; returns each rank's result."""
    port = free_local_port()
    _, hung = spawn_ranks(_entry, [(r, world, port, target, args, str(out)) for r in range(world)], TIMEOUT_S)
    errors = sorted(out.glob("error_rank*.txt"))
    if errors:
        pytest.fail(f"{errors[0].name}:\n{errors[0].read_text()}")
    assert not hung, f"ranks {hung} did not finish within {TIMEOUT_S} s"
    return [torch.load(out / f"{target}_rank{r}.pt", weights_only=False) for r in range(world)]


# ---- scenario 1: one process, against HF and the FSDP engine ------------------------------------
def single_process(model: str, cache: str, out_dir: str) -> dict:
    from transformers import AutoModelForCausalLM

    from rlinf.engines.training.common import response_logprobs
    from rlinf.engines.training.fsdp import FSDPEngine
    from rlinf.engines.training.megatron.engine import MegatronEngine
    from rlinf.objectives.llm import make_loss_fn

    cpu = torch.device("cpu")
    meg = MegatronEngine(model, actor_cfg(cache), temperature=TEMPERATURE, device=cpu, total_steps=4)
    fsdp = FSDPEngine(model, actor_cfg(cache, "fsdp"), temperature=TEMPERATURE, device=cpu, total_steps=4)
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    batch = make_batch()
    with torch.no_grad():
        hf_logp, hf_ent = response_logprobs(hf, batch, TEMPERATURE, True)
    logp, ent = meg.compute_logprobs(batch, micro_batch_size=3, with_entropy=True)
    batch = with_advantages(batch, hf_logp)
    mbs, tokens, loss_fn = [batch.select([0, 1, 2]), batch.select([3])], batch.num_response_tokens, make_loss_fn(ALGO)
    ckpt = str(Path(out_dir) / "ckpt")
    out = {"logp": logp, "ent": ent, "hf_logp": hf_logp, "hf_ent": hf_ent, "steps": []}
    for step in range(2):
        if step == 1:
            meg.save_checkpoint(ckpt)
            meg.offload()
            out["offloaded_bytes"] = [meg.module.decoder.final_layernorm.weight.untyped_storage().nbytes(),
                                      meg.model.buffers[0].grad_data.untyped_storage().nbytes()]
        m_meg = meg.train_minibatch(mbs, loss_fn, tokens)
        m_fsdp = fsdp.train_minibatch(mbs, loss_fn, tokens)
        fsdp_weights = {k: v.clone() for k, v in fsdp.full_state_dict().items()}  # CPU: live views
        out["steps"].append((m_meg, m_fsdp, meg.full_state_dict(), fsdp_weights))
    meg.load_checkpoint(ckpt)  # back to after step 0: step 1 again must give the same weights
    out["replayed"] = (meg.train_minibatch(mbs, loss_fn, tokens), meg.full_state_dict())
    meg.export_hf(str(Path(out_dir) / "export"))
    exported = AutoModelForCausalLM.from_pretrained(str(Path(out_dir) / "export"), dtype=torch.float32).eval()
    with torch.no_grad():
        out["exported_logp"] = response_logprobs(exported, make_batch(), TEMPERATURE, False)[0]
    out["trained_logp"] = meg.compute_logprobs(make_batch(), micro_batch_size=4)[0]
    frozen = MegatronEngine(model, actor_cfg(cache), temperature=TEMPERATURE, device=cpu, trainable=False)
    out["frozen_logp"] = frozen.compute_logprobs(make_batch(), micro_batch_size=4)[0]
    out["cache_dirs"] = sorted(p.name for p in Path(cache).iterdir() if p.is_dir())
    return out


def run_scenario(factory, target: str, world: int, tied: bool) -> tuple[str, list]:
    """A fresh tiny model, then ``target(model, cache, folder)`` on ``world`` processes."""
    d = factory.mktemp(target)
    model = make_model(d / "model", tied=tied)
    t0 = time.perf_counter()
    ranks = spawn(target, world, (model, str(d / "cache"), str(d)), d)
    print(f"{target} on {world} process(es): {time.perf_counter() - t0:.1f} s")
    return model, ranks


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    _, (result,) = run_scenario(tmp_path_factory, "single_process", 1, tied=False)
    return SimpleNamespace(**result)


def max_diff(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.mark.slow
def test_logprobs_and_entropy_match_the_hf_model(single):
    mask = make_batch().response_mask.bool()
    assert single.logp.shape == (4, 4)
    assert torch.all(single.logp[~mask] == 0) and torch.all(single.logp[mask] < 0)
    assert float((single.logp - single.hf_logp).abs().max()) < 1e-5
    assert float((single.ent - single.hf_ent).abs().max()) < 1e-5


def test_a_step_equals_the_fsdp_engine_step_on_the_same_weights(single):
    for m_meg, m_fsdp, w_meg, w_fsdp in single.steps:
        assert m_meg.keys() == m_fsdp.keys()
        for key in ("loss", "entropy", "ratio_mean", "clip_frac", "lr"):
            assert m_meg[key] == pytest.approx(m_fsdp[key], rel=1e-5, abs=1e-6), key
        assert m_meg["grad_norm"] == pytest.approx(m_fsdp["grad_norm"], rel=1e-5)
        assert max_diff(w_meg, w_fsdp) < 1e-5
    first, second = single.steps[0][2], single.steps[1][2]
    assert max_diff(first, second) > 1e-6  # the second step moved the weights too


def test_offload_frees_storage_and_resume_replays_the_step(single):
    assert single.offloaded_bytes == [0, 0]
    # step 1 ran after offload + onload and still equals FSDP (checked above); after loading the
    # checkpoint of step 0 it gives the same weights again
    m_replayed, w_replayed = single.replayed
    assert m_replayed["grad_norm"] == single.steps[1][0]["grad_norm"]
    assert max_diff(w_replayed, single.steps[1][2]) == 0.0


def test_the_hf_export_computes_the_engines_logprobs(single):
    assert float((single.exported_logp - single.trained_logp).abs().max()) < 1e-5
    assert float((single.trained_logp - single.logp).abs().max()) > 1e-4  # trained, not initial


def test_a_second_engine_reuses_the_cached_conversion(single):
    assert len(single.cache_dirs) == 1 and "-tp1-pp1-" in single.cache_dirs[0]
    assert float((single.frozen_logp - single.logp).abs().max()) == 0.0


# ---- scenario 2: two processes, TP=2 / PP=2 against TP=1 (DP=2) ---------------------------------
def parallel_layouts(model: str, cache: str, out: str) -> dict:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from rlinf.engines.training.megatron import checkpoint_io
    from rlinf.engines.training.megatron.convert import megatron_to_hf
    from rlinf.engines.training.megatron.engine import MegatronEngine
    from rlinf.objectives.llm import make_loss_fn

    results = {}
    for name, tp, pp in (("dp2", 1, 1), ("tp2", 2, 1), ("pp2", 1, 2)):
        engine = MegatronEngine(model, actor_cfg(cache, tp=tp, pp=pp), temperature=TEMPERATURE,
                                device=torch.device("cpu"), total_steps=4)
        initial = engine.full_state_dict()
        batch = make_batch()
        logp, ent = engine.compute_logprobs(batch, micro_batch_size=1, with_entropy=True)
        batch = with_advantages(batch, logp)
        # replicas: DP=2 -> each rank trains its half; TP / PP -> one replica trains it all
        mine = batch.select([0, 1] if engine.layout.dp_rank == 0 else [2, 3]) if engine.layout.dp == 2 else batch
        metrics = engine.train_minibatch([mine.select([i]) for i in range(mine.batch_size)],
                                         make_loss_fn(ALGO), batch.num_response_tokens)
        synced = engine.full_state_dict()
        # the converter's merge of the trained shards, written in its checkpoint format
        root = Path(out) / f"trained_{name}"
        if engine.layout.dp_rank == 0:
            checkpoint_io.write_shard(root, engine.layout.tp_rank, engine.layout.pp_rank, pp,
                                      engine.module.state_dict())
        dist.barrier()
        converted = None
        if dist.get_rank() == 0:
            checkpoint_io.write_metadata(root, engine.meta)
            converted = megatron_to_hf(root, Path(out) / f"hf_{name}", hf_config_path=model)
        results[name] = {"logp": logp, "ent": ent, "metrics": metrics, "initial": initial,
                         "synced": synced, "converted": converted}
        ps.destroy_model_parallel()
    return results


@pytest.fixture(scope="module")
def parallel(tmp_path_factory):
    model, ranks = run_scenario(tmp_path_factory, "parallel_layouts", 2, tied=True)
    return SimpleNamespace(ranks=ranks, model=model)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["tp2", "pp2"])
def test_tp2_and_pp2_give_the_tp1_logprobs_loss_and_step(parallel, layout):
    base, other = parallel.ranks[0]["dp2"], parallel.ranks[0][layout]
    assert float((other["logp"] - base["logp"]).abs().max()) < 1e-5
    assert float((other["ent"] - base["ent"]).abs().max()) < 1e-5
    assert other["metrics"]["loss"] == pytest.approx(base["metrics"]["loss"], rel=1e-5, abs=1e-7)
    assert other["metrics"]["grad_norm"] == pytest.approx(base["metrics"]["grad_norm"], rel=1e-5)
    assert max_diff(other["synced"], base["synced"]) < 1e-5
    # every rank reports the same metrics
    assert parallel.ranks[1][layout]["metrics"] == other["metrics"]


@pytest.mark.parametrize("layout", ["dp2", "tp2", "pp2"])
def test_weight_gather_equals_the_converter_output(parallel, layout):
    from safetensors.torch import load_file

    rank0, rank1 = parallel.ranks[0][layout], parallel.ranks[1][layout]
    assert rank1["synced"] == {} and rank1["initial"] == {}  # only global rank 0 gets the weights
    hf = load_file(str(Path(parallel.model) / "model.safetensors"))
    assert sorted(rank0["initial"]) == sorted(hf)  # tied: no lm_head.weight, like the HF folder
    assert all(torch.equal(rank0["initial"][k], hf[k]) for k in hf)
    assert sorted(rank0["synced"]) == sorted(rank0["converted"])
    assert all(torch.equal(rank0["synced"][k], rank0["converted"][k]) for k in hf)
    assert max_diff(rank0["synced"], hf) > 1e-6  # trained weights were gathered, not the initial ones


# ---- without the shim ---------------------------------------------------------------------------
def test_a_cpu_process_without_gpus_fails_early_with_the_reason(tmp_path):
    from rlinf.engines.training.megatron.engine import MegatronEngine
    from rlinf.engines.training.megatron.runtime import megatron_runs_on_cpu

    if megatron_runs_on_cpu() or torch.cuda.is_available():
        pytest.skip("megatron-core is patched for the CPU in this process, or GPUs are present")
    with pytest.raises(RuntimeError, match="actor.training_backend: megatron needs CUDA GPUs"):
        MegatronEngine(str(tmp_path), actor_cfg(str(tmp_path)), device=torch.device("cpu"))


def test_the_conversion_cache_follows_the_weights_and_sizes(tmp_path):
    from rlinf.engines.training.megatron.hf_cache import converted_checkpoint

    model = make_model(tmp_path / "model", tied=True)
    first = converted_checkpoint(model, str(tmp_path / "cache"), tp=1, pp=1)
    stamp = (first / "rlinf_megatron_meta.json").stat().st_mtime_ns
    assert converted_checkpoint(model, str(tmp_path / "cache"), tp=1, pp=1) == first
    assert (first / "rlinf_megatron_meta.json").stat().st_mtime_ns == stamp  # not converted again
    other_sizes = converted_checkpoint(model, str(tmp_path / "cache"), tp=2, pp=1)
    make_model(tmp_path / "model", tied=True, seed=1)  # new weights in the same folder
    new_weights = converted_checkpoint(model, str(tmp_path / "cache"), tp=1, pp=1)
    assert len({first, other_sizes, new_weights}) == 3
    assert "-tp2-pp1-" in other_sizes.name
