"""Tiny π0 / π0.5 checkpoints in the REAL on-disk layouts, for tests and CPU runs.

:func:`write_tiny_pi0` writes random weights under openpi's parameter names with small sizes and
the files of one layout (see :mod:`.checkpoint`):

* ``openpi``: ``model.safetensors`` (the tied embedding as ``paligemma.lm_head.weight`` only, the
  expert's unused ``lm_head`` kept, as ``safetensors.save_model`` writes them), ``config.json``,
  ``assets/<asset_id>/norm_stats.json``;
* ``rlinf``: the same weights plus RLinf's ``value_head.*`` / ``noise_head.*`` tensors,
  statistics at ``<asset_id>/norm_stats.json``;
* ``lerobot``: ``config.json`` (``type``), ``model.safetensors`` under ``model.``, the normaliser
  processors (``policy_{pre,post}processor.json`` + ``*_normalizer_processor.safetensors``).

Each also gets ``paligemma_tokenizer.model``: a SentencePiece BPE trained here on robot
instructions and π0.5 state prompts (Gemma's special ids: pad 0, eos 1, bos 2, unk 3; ``\\n``
a piece; digits split).

Default sizes: VLM width 32, expert width 16, 2 layers, 4 heads of 8 with 1 key/value head;
SigLIP width 32 (16 heads), 2 layers, 16 px images of 4 px patches; actions padded to 32 dims,
horizon 4; statistics for 7 action and 8 state dimensions.

Example:
    >>> import tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> d = write_tiny_pi0(tmp.name, layout="openpi")
    >>> sorted(p.name for p in d.iterdir())
    ['assets', 'config.json', 'model.safetensors', 'paligemma_tokenizer.model']
    >>> tmp.cleanup()
"""

from __future__ import annotations

import functools
import io
import json
import math
import random
from pathlib import Path

import torch
from safetensors.torch import save_file

from rlinf.models.embodied.pi0.checkpoint import LAYOUTS, LEROBOT_PREFIX, POST_JSON, PRE_JSON, write_safetensors
from rlinf.models.embodied.pi0.modeling import Pi0Model
from rlinf.models.embodied.pi0.processing import OPENPI_CAMERAS
from rlinf.models.embodied.pi0.spec import EMBED, EXPERT_LM_HEAD, LM_HEAD, GemmaSize, Pi0Spec, VisionSize

TINY_ASSET_ID = "tiny/robot"
_VERBS = ["pick up", "put", "place", "push", "open", "close", "stack", "lift", "turn on"]
_OBJECTS = ["cube", "bowl", "plate", "mug", "drawer", "basket", "book", "box", "stove"]


def tiny_corpus(n: int = 300, seed: int = 0) -> list[str]:
    """Instructions and π0.5 state prompts (deterministic)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = f"{rng.choice(_VERBS)} the {rng.choice(_OBJECTS)}"
        state = " ".join(str(rng.randint(0, 255)) for _ in range(8))
        out += [text, f"Task: {text}, State: {state};\nAction: "]
    return out


@functools.lru_cache(maxsize=4)
def _tiny_sentencepiece_bytes(vocab_size: int) -> bytes:
    # lazy: sentencepiece (embodied extra) only for writing a tiny tokenizer
    import sentencepiece

    buf = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(tiny_corpus()), model_writer=buf, vocab_size=vocab_size, model_type="bpe",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, user_defined_symbols=["\n"], split_digits=True,
        normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False,
        character_coverage=1.0, minloglevel=2, num_threads=1)
    return buf.getvalue()


def train_tiny_sentencepiece(path: Path, vocab_size: int = 160) -> Path:
    """Trains the tiny SentencePiece model (see the module docstring) and writes it to ``path``
    (trained once per process and size: the training is deterministic)."""
    path.write_bytes(_tiny_sentencepiece_bytes(vocab_size))
    return path


def tiny_spec(pi05: bool, vocab: int, vlm_width: int = 32, expert_width: int = 16, depth: int = 2,
              heads: int = 4, head_dim: int = 8, vision_width: int = 32, vision_depth: int = 2,
              image_size: int = 16, patch: int = 4, action_dim: int = 32, action_horizon: int = 4) -> Pi0Spec:
    """The sizes :func:`write_tiny_pi0` uses."""
    return Pi0Spec(pi05=pi05, vlm=GemmaSize(vlm_width, depth, 2 * vlm_width, heads, 1, head_dim, vocab),
                   expert=GemmaSize(expert_width, depth, 2 * expert_width, heads, 1, head_dim),
                   vision=VisionSize(vision_width, vision_depth, 2 * vision_width, 16, patch, image_size),
                   action_dim=action_dim, state_dim=0 if pi05 else action_dim, action_horizon=action_horizon)


def tiny_weights(spec: Pi0Spec, seed: int = 0, adarms_scale: float = 0.3) -> dict[str, torch.Tensor]:
    """Random weights under the checkpoint's names (embedding stored as ``lm_head`` only; the
    expert's unused ``lm_head`` included). Norm weights are perturbed around 0 and adaRMS
    ``dense`` weights drawn with std ``adarms_scale`` (0 keeps openpi's zero init)."""
    torch.manual_seed(seed)
    model = Pi0Model(spec)
    gen = torch.Generator().manual_seed(seed + 1)
    state = {}
    for name, t in model.state_dict().items():
        t = t.detach().clone().float()
        if ("language_model" in name or "gemma_expert" in name) and name.endswith("norm.weight"):
            t = 0.1 * torch.randn(t.shape, generator=gen)
        if ".dense." in name:
            t = adarms_scale * torch.randn(t.shape, generator=gen) / (t.shape[-1] ** 0.5 if t.dim() == 2 else 1.0)
        if name.endswith("bias") and ".dense." not in name and "vision" not in name:
            t = 0.02 * torch.randn(t.shape, generator=gen)
        state[name] = t
    state[LM_HEAD] = state.pop(EMBED)
    state[EXPERT_LM_HEAD] = 0.02 * torch.randn(spec.vlm.vocab, spec.expert.width, generator=gen)
    return state


def tiny_stats(action_dim: int = 7, state_dim: int = 8, seed: int = 1) -> dict[str, dict[str, list[float]]]:
    """``{"state": {...}, "actions": {...}}`` with mean, std, q01, q99 (and min, max)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for key, d in (("state", state_dim), ("actions", action_dim)):
        mean = 0.3 * torch.randn(d, generator=gen)
        std = 0.5 + torch.rand(d, generator=gen)
        q01, q99 = mean - 2 * std, mean + 2.2 * std
        out[key] = {"mean": mean.tolist(), "std": std.tolist(), "q01": q01.tolist(), "q99": q99.tolist(),
                    "min": (q01 - 0.1).tolist(), "max": (q99 + 0.1).tolist()}
    return out


def _extra_heads(spec: Pi0Spec, gen: torch.Generator, value_after_vlm: bool = False) -> dict[str, torch.Tensor]:
    """RLinf's heads under its module names: ``ValueHead`` (``value_head.mlp`` = Linear, ReLU,
    Linear) on the expert width (the VLM's with ``value_after_vlm``, as RLinf's π0.5 critic reads
    the prefix output) and ``ExploreNoiseNet`` (``noise_head.mlp_logvar.moduleList.{i}.linear_1``,
    then its ``logvar_min`` / ``logvar_max`` buffers for stds 0.08 / 0.16)."""
    w = spec.expert.width
    v = spec.vlm.width if value_after_vlm else w
    shapes = {"value_head.mlp.0.weight": (8, v), "value_head.mlp.0.bias": (8,), "value_head.mlp.2.weight": (1, 8),
              "value_head.mlp.2.bias": (1,), "noise_head.mlp_logvar.moduleList.0.linear_1.weight": (8, w),
              "noise_head.mlp_logvar.moduleList.0.linear_1.bias": (8,),
              "noise_head.mlp_logvar.moduleList.1.linear_1.weight": (spec.action_dim, 8),
              "noise_head.mlp_logvar.moduleList.1.linear_1.bias": (spec.action_dim,)}
    out = {k: 0.1 * torch.randn(s, generator=gen) for k, s in shapes.items()}
    out["noise_head.logvar_min"] = torch.tensor([2 * math.log(0.08)])
    out["noise_head.logvar_max"] = torch.tensor([2 * math.log(0.16)])
    return out


def _lerobot_files(out: Path, spec: Pi0Spec, stats: dict, max_len: int) -> None:
    s = spec.vision.image_size
    a_dim, s_dim = len(stats["actions"]["mean"]), len(stats["state"]["mean"])
    mode = "QUANTILES" if spec.pi05 else "MEAN_STD"
    inputs = {f"observation.images.{c}": {"type": "VISUAL", "shape": [3, s, s]} for c in OPENPI_CAMERAS}
    inputs["observation.state"] = {"type": "STATE", "shape": [s_dim]}
    outputs = {"action": {"type": "ACTION", "shape": [a_dim]}}
    norm_map = {"VISUAL": "IDENTITY", "STATE": mode, "ACTION": mode}
    config = {"type": "pi05" if spec.pi05 else "pi0", "n_obs_steps": 1, "input_features": inputs,
              "output_features": outputs, "device": "cpu", "use_amp": False, "push_to_hub": False,
              "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m", "dtype": "float32",
              "chunk_size": spec.action_horizon, "n_action_steps": spec.action_horizon,
              "max_state_dim": spec.action_dim, "max_action_dim": spec.action_dim, "num_inference_steps": 10,
              "image_resolution": [s, s], "empty_cameras": 0, "tokenizer_max_length": max_len,
              "normalization_mapping": norm_map, "min_period": 0.004, "max_period": 4.0}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    feats = {**inputs, **outputs}
    step_cfg = {"eps": 1e-8, "features": feats, "norm_map": norm_map}
    pre_state = "policy_preprocessor_step_2_normalizer_processor.safetensors"
    post_state = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    tensors = {f"observation.state.{k}": torch.tensor(v) for k, v in stats["state"].items()}
    tensors.update({f"action.{k}": torch.tensor(v) for k, v in stats["actions"].items()})
    save_file(tensors, str(out / pre_state))
    save_file(tensors, str(out / post_state))
    pre = {"name": "policy_preprocessor", "steps": [
        {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
        {"registry_name": "to_batch_processor", "config": {}},
        {"registry_name": "normalizer_processor", "config": step_cfg, "state_file": pre_state},
        {"registry_name": "tokenizer_processor", "config": {"max_length": max_len, "padding_side": "right",
                                                            "padding": "max_length"}},
        {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}}]}
    post = {"name": "policy_postprocessor", "steps": [
        {"registry_name": "unnormalizer_processor", "config": step_cfg, "state_file": post_state},
        {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}}]}
    (out / PRE_JSON).write_text(json.dumps(pre, indent=2))
    (out / POST_JSON).write_text(json.dumps(post, indent=2))


def write_tiny_pi0(out_dir: str | Path, pi05: bool = False, layout: str = "openpi", seed: int = 0,
                   action_horizon: int = 4, asset_id: str = TINY_ASSET_ID, adarms_scale: float = 0.3,
                   extra_heads: bool = True, dtype: torch.dtype = torch.bfloat16, stats_dims: tuple[int, int] = (7, 8),
                   value_after_vlm: bool = False, **sizes) -> Path:
    """Writes a tiny real-layout folder (see the module docstring); returns its path.

    Args:
        out_dir: destination folder (created).
        pi05: π0.5 (adaRMS expert, ``time_mlp_*``) instead of π0.
        layout: ``openpi``, ``rlinf`` or ``lerobot``.
        seed: weights' seed (the same seed gives the same weights in every layout).
        action_horizon: ``H``.
        asset_id: where the statistics go (openpi / rlinf).
        adarms_scale: std of π0.5's adaRMS ``dense`` weights (0: openpi's zero init).
        extra_heads: RLinf layout: add ``value_head.*`` / ``noise_head.*`` tensors.
        dtype: weights on disk (bf16 as the releases).
        stats_dims: ``(action, state)`` widths of the statistics (LIBERO's 7 and 8 by default).
        value_after_vlm: the value head reads the VLM's width (``actor.model.value_after_vlm``).
        **sizes: overrides of :func:`tiny_spec`'s sizes.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tiny_sentencepiece(out / "paligemma_tokenizer.model")
    # lazy: sentencepiece (embodied extra) only for writing a tiny tokenizer
    import sentencepiece

    vocab = sentencepiece.SentencePieceProcessor(model_file=str(tok)).get_piece_size()
    spec = tiny_spec(pi05, vocab, action_horizon=action_horizon, **sizes)
    state = {k: v.to(dtype) for k, v in tiny_weights(spec, seed, adarms_scale).items()}
    stats = tiny_stats(*stats_dims)
    max_len = 200 if pi05 else 48  # openpi's / LeRobot's defaults
    if layout == "lerobot":
        state.pop(EXPERT_LM_HEAD)
        write_safetensors(state, out / "model.safetensors", prefix=LEROBOT_PREFIX)
        _lerobot_files(out, spec, stats, max_len)
        return out
    if layout == "rlinf" and extra_heads:
        state.update(_extra_heads(spec, torch.Generator().manual_seed(seed + 2), value_after_vlm))
    write_safetensors(state, out / "model.safetensors")
    config = {"action_dim": spec.action_dim, "action_horizon": action_horizon, "paligemma_variant": "tiny",
              "action_expert_variant": "tiny", "precision": "bfloat16" if dtype == torch.bfloat16 else "float32"}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    stats_dir = (out / "assets" if layout == "openpi" else out) / asset_id
    stats_dir.mkdir(parents=True, exist_ok=True)
    (stats_dir / "norm_stats.json").write_text(json.dumps({"norm_stats": {k: {n: v for n, v in d.items()
                                                                              if n in ("mean", "std", "q01", "q99")}
                                                                          for k, d in stats.items()}}, indent=2))
    return out
