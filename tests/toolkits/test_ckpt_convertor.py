"""HF <-> Megatron converter: megatron-core logits equal HF's (CPU shim), CLI round trips, metadata,
multi-process conversion and one-line errors that leave nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.core")
transformers = pytest.importorskip("transformers")

from rlinf.engines.training.megatron import checkpoint_io, convert  # noqa: E402
from rlinf.engines.training.megatron.logit_check import LogitCase, logit_check  # noqa: E402
from toolkits.ckpt_convertor import hf_to_megatron, megatron_to_hf  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = {
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
}


def save_tiny_model(path: Path, family: str, tied: bool = False, layers: int = 3,
                    vocab: int = 150, dtype: torch.dtype = torch.float32, seed: int = 0) -> Path:
    """A random tiny HF model (hidden 64, 4 heads, 2 KV heads) saved with save_pretrained."""
    config_cls, model_cls = FAMILIES[family]
    extra = {"head_dim": 16} if family == "qwen3" else {}
    config = config_cls(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                        num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
                        tie_word_embeddings=tied, max_position_embeddings=64, **extra)
    torch.manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim == 1:  # norms away from 1 and biases away from 0: every weight matters
                param.normal_(1.0, 0.2)
    model.to(dtype).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("hf")
    return {
        "qwen2_tied": save_tiny_model(base / "qwen2_tied", "qwen2", tied=True),
        "qwen2": save_tiny_model(base / "qwen2", "qwen2"),
        "llama": save_tiny_model(base / "llama", "llama"),
        "qwen3": save_tiny_model(base / "qwen3", "qwen3"),
    }


def run_cli(module, args, capsys):
    """Run a converter's main in-process; returns (exit code, stdout, stderr)."""
    code = module.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def tensors_of(folder: Path) -> dict[str, torch.Tensor]:
    return dict(checkpoint_io.HFWeights(folder).items())


@pytest.mark.slow
def test_megatron_logits_match_hf_for_every_family_and_layout(models, tmp_path):
    """TP=2, PP=2 (3 layers: uneven [2, 1]) and TP=1/PP=1 in one group of two gloo processes
    with the CPU shim. One extra case pairs a checkpoint with another model's HF weights: the
    check must tell them apart."""
    cases = []
    for name, hf_path in models.items():
        for tp, pp in [(2, 1), (1, 2), (1, 1)]:
            out = tmp_path / f"{name}_tp{tp}_pp{pp}"
            convert.hf_to_megatron(hf_path, out, tp, pp)
            cases.append(LogitCase(str(hf_path), str(out)))
    other = save_tiny_model(tmp_path / "other_llama", "llama", seed=1)
    cases.append(LogitCase(str(other), str(tmp_path / "llama_tp2_pp1")))
    diffs = logit_check(cases, device="cpu", worker_setup="megatron_cpu_shim:install", world_size=2, timeout_s=240)
    report = {Path(c.megatron_path).name: d for c, d in zip(cases, diffs)}
    assert all(d <= 1e-4 for d in diffs[:-1]), report
    assert diffs[-1] > 1e-2, report


def test_cpu_shim_restores_megatron_on_exit():
    from megatron.core.models.common.embeddings import rotary_pos_embedding
    from megatron.core.tensor_parallel import random as mp_random
    from megatron_cpu_shim import cpu_shim

    fork, tensor_cuda = mp_random.CudaRNGStatesTracker.fork, torch.Tensor.cuda
    with cpu_shim():
        assert rotary_pos_embedding.torch.cuda.current_device() == torch.device("cpu")
        assert mp_random.CudaRNGStatesTracker.fork is not fork
        assert torch.zeros(1).cuda().device.type == "cpu"
    assert rotary_pos_embedding.torch is torch and torch.Tensor.cuda is tensor_cuda
    assert mp_random.CudaRNGStatesTracker.fork is fork


def test_cli_verify_round_trip_then_back_to_hf(models, tmp_path, capsys):
    hf_path, meg, back = models["qwen2_tied"], tmp_path / "meg", tmp_path / "back"
    code, out, err = run_cli(hf_to_megatron, ["--hf-path", hf_path, "--save-path", meg,
                                              "--tp-size", 2, "--pp-size", 2, "--verify"], capsys)
    assert code == 0, err
    assert "round trip HF -> Megatron -> HF bit-identical" in out
    if torch.cuda.device_count() < 4:
        assert "logit check skipped: megatron-core's GPTModel forward needs CUDA" in out
    assert (meg / "latest_checkpointed_iteration.txt").read_text() == "release"
    shard = torch.load(meg / "release/mp_rank_01_001/model_optim_rng.pt", weights_only=True)
    assert shard["checkpoint_version"] == 3.0
    assert "decoder.layers.0.mlp.linear_fc1.weight" in shard["model"]
    meta = json.loads((meg / checkpoint_io.META_FILE).read_text())
    assert (meta["family"], meta["tp"], meta["pp"]) == ("qwen2", 2, 2)
    assert meta["layers_per_stage"] == [2, 1]
    assert (meta["vocab_size"], meta["padded_vocab_size"]) == (150, 256)
    assert meta["hf_config"] == json.loads((hf_path / "config.json").read_text())
    assert meta["source"]["sha256"] == checkpoint_io.HFWeights(hf_path).content_hash()

    code, out, err = run_cli(megatron_to_hf, ["--load-path", meg, "--save-path", back,
                                              "--hf-config-path", hf_path, "--verify"], capsys)
    assert code == 0, err
    source, result = tensors_of(hf_path), tensors_of(back)
    assert sorted(source) == sorted(result)
    for name, tensor in source.items():
        assert result[name].dtype == tensor.dtype and torch.equal(result[name], tensor), name
    assert json.loads((back / "config.json").read_text()) == meta["hf_config"]
    assert (back / "generation_config.json").is_file()
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(back)
    assert reloaded.config.tie_word_embeddings


def test_back_to_hf_without_metadata_reads_the_layout_from_the_files(models, tmp_path, capsys):
    meg, back = tmp_path / "meg", tmp_path / "back"
    convert.hf_to_megatron(models["qwen3"], meg, 2, 2, layers_per_stage=[1, 2])
    (meg / checkpoint_io.META_FILE).unlink()
    code, _, err = run_cli(megatron_to_hf, ["--load-path", meg, "--save-path", back], capsys)
    assert code == 2 and "pass --hf-config-path" in err
    code, _, err = run_cli(megatron_to_hf, ["--load-path", meg, "--save-path", back,
                                            "--hf-config-path", models["qwen3"]], capsys)
    assert code == 0, err
    source, result = tensors_of(models["qwen3"]), tensors_of(back)
    assert sorted(source) == sorted(result)
    assert all(torch.equal(source[k], result[k]) for k in source)


def test_bf16_weights_keep_their_dtype_and_bits(tmp_path):
    hf_path = save_tiny_model(tmp_path / "bf16", "llama", dtype=torch.bfloat16)
    convert.hf_to_megatron(hf_path, tmp_path / "meg", 2, 1)
    shard = checkpoint_io.load_shard(tmp_path / "meg", 1, 0)
    assert shard["decoder.layers.2.self_attention.linear_qkv.weight"].dtype == torch.bfloat16
    assert convert.verify_round_trip(hf_path, tmp_path / "meg") == len(tensors_of(hf_path))


def test_pytorch_bin_checkpoints_convert_too(models, tmp_path):
    hf_path = tmp_path / "bin"
    shutil.copytree(models["qwen3"], hf_path)
    torch.save(tensors_of(hf_path), hf_path / "pytorch_model.bin")
    (hf_path / "model.safetensors").unlink()
    convert.hf_to_megatron(hf_path, tmp_path / "meg", 1, 2)
    assert convert.verify_round_trip(models["qwen3"], tmp_path / "meg") > 0


@pytest.mark.slow
def test_process_num_gives_the_same_checkpoint(models, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    meta_one = convert.hf_to_megatron(models["qwen2"], one, 2, 3, process_num=1)
    meta_two = convert.hf_to_megatron(models["qwen2"], two, 2, 3, process_num=2)
    assert meta_one == meta_two
    files_one = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files_one == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
    for pp_rank in range(3):
        for tp_rank in range(2):
            a = checkpoint_io.load_shard(one, tp_rank, pp_rank)
            b = checkpoint_io.load_shard(two, tp_rank, pp_rank)
            assert a.keys() == b.keys()
            assert all(a[k] is None and b[k] is None or torch.equal(a[k], b[k]) for k in a)


def _edit_config(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update(changes)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def _bad_inputs(models: dict[str, Path], tmp: Path):
    """(name, extra CLI args, expected message) for each kind of bad input."""
    llama = models["llama"]
    no_config = tmp / "no_config"
    shutil.copytree(llama, no_config)
    (no_config / "config.json").unlink()
    no_weights = tmp / "no_weights"
    shutil.copytree(llama, no_weights)
    (no_weights / "model.safetensors").unlink()
    odd_vocab = save_tiny_model(tmp / "odd_vocab", "llama", vocab=151)
    return [
        ("heads", [llama, 3, 1], "num_attention_heads 4 is not divisible by tp 3"),
        ("kv_heads", [llama, 4, 1], "num_key_value_heads 2 is not divisible by tp 4"),
        ("vocab", [odd_vocab, 2, 1, "--make-vocab-size-divisible-by", 0],
         "vocab_size 151 is not divisible by tp 2"),
        ("pp", [llama, 1, 4], "pp 4 is larger than the model's 3 layers"),
        ("stages", [llama, 1, 2, "--layers-per-stage", "2,2"], "must be 2 counts >= 1 summing"),
        ("no_config", [no_config, 1, 1], "no config.json in"),
        ("no_weights", [no_weights, 1, 1], "no weights in"),
        ("missing_dir", [tmp / "nowhere", 1, 1], "does not exist"),
        ("arch", [_edit_config(llama, tmp / "gpt2", architectures=["GPT2LMHeadModel"],
                               model_type="gpt2"), 1, 1], "unsupported architecture"),
        ("shape", [_edit_config(llama, tmp / "shape", intermediate_size=96), 1, 1],
         "shape mismatch: model.layers.0.mlp.gate_proj.weight is [128, 64] in the weights, "
         "config.json implies [96, 64]"),
        ("layers", [_edit_config(llama, tmp / "layers", num_hidden_layers=4), 1, 1],
         "lack 'model.layers.3."),
        ("model_type", [llama, 1, 1, "--model-type", "qwen3"], "--model-type qwen3 does not match"),
        ("format", [llama, 1, 1, "--ckpt-format", "torch_dist"], "ckpt_format 'torch_dist' is not"),
    ]


def test_bad_input_gives_one_error_line_exit_2_and_writes_nothing(models, tmp_path, capsys):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    bad_inputs = _bad_inputs(models, inputs)
    capsys.readouterr()  # drop save_pretrained's progress output
    for name, (hf_path, tp, pp, *extra), message in bad_inputs:
        dest = tmp_path / "out" / name
        args = ["--hf-path", hf_path, "--save-path", dest, "--tp-size", tp, "--pp-size", pp, *extra]
        code, out, err = run_cli(hf_to_megatron, args, capsys)
        assert code == 2, (name, out, err)
        assert err.startswith("error: ") and err.count("\n") == 1 and message in err, (name, err)
        assert not dest.exists(), name
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_existing_destination_needs_overwrite(models, tmp_path, capsys):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    args = ["--hf-path", models["llama"], "--save-path", dest, "--tp-size", 1, "--pp-size", 1]
    code, _, err = run_cli(hf_to_megatron, args, capsys)
    assert code == 2 and "is not empty (pass --overwrite" in err
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]
    code, _, err = run_cli(hf_to_megatron, [*args, "--overwrite"], capsys)
    assert code == 0, err
    assert not (dest / "keep.txt").exists() and (dest / "release/mp_rank_00").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest"]  # no temporary siblings


def test_failure_while_writing_leaves_no_partial_checkpoint(models, tmp_path, monkeypatch):
    original, written = checkpoint_io.write_shard, []

    def write_then_fail(root, tp_rank, pp_rank, pp, state_dict):
        if written:
            raise OSError("disk full")
        written.append(original(root, tp_rank, pp_rank, pp, state_dict))
        return written[-1]

    monkeypatch.setattr(checkpoint_io, "write_shard", write_then_fail)
    with pytest.raises(OSError, match="disk full"):
        convert.hf_to_megatron(models["llama"], tmp_path / "dest", 2, 1)
    assert written and not written[0].exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_cli_entry_point_prints_exactly_one_error_line(models, tmp_path):
    dest = tmp_path / "dest"
    result = subprocess.run(
        [sys.executable, "-m", "toolkits.ckpt_convertor.hf_to_megatron", "--hf-path",
         str(models["qwen3"]), "--save-path", str(dest), "--tp-size", "3"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2 and not dest.exists()
    assert result.stderr.splitlines() == ["error: num_attention_heads 4 is not divisible by tp 3"]
