"""Memory arithmetic of a decoder-only LM: training state, activations, vocabulary log-softmax,
KV cache. Pure arithmetic on a :class:`ModelShape` (read from the model folder's ``config.json``);
the per-role estimates of a run are built from it by each recipe (:mod:`rlinf.runners.memory_check`).

Bytes per rank of a training step (``N`` parameters, ``T`` trainable ones (``N`` or the LoRA
adapters), ``m`` bytes of the master dtype, ``c`` of the compute dtype, ``S`` ranks sharing the
state, ``b`` samples per micro-batch of ``s`` tokens, ``r`` of them through the LM head)::

    weights      = N * m / S_w                 (S_w = S when the weights are sharded, else 1)
    gradients    = T * m / S_g                 (unsharded T * m when micro-batches accumulate with
                                                FSDP2 over S > 1 ranks: it keeps them until the sync)
    optimizer    = 2 * T * m / S_o             (AdamW: exp_avg and exp_avg_sq, in the master dtype)
    gathered     = (root + 2 * layer) * c      (FSDP2's unsharded copies: the root unit stays
                                                gathered, one layer plus the prefetched one;
                                                all N * c without resharding after forward)
    activations  = b * s * L * A               (A per token and layer, below; with gradient
                                                checkpointing b * s * (L * h * c + A))
    logits       = b * r * V * (c + 8)         (fp32 logits / temperature, log-softmax, its grad;
                                                with the entropy term b * r * V * (c + 25): its
                                                log-softmax, exp, mask, product and their grads)

with ``A = 2 * (4 + c) * h + c * (5h + 2h' + 4 * kv + 4I)`` (HF Llama / Qwen2 layer with SDPA:
two RMSNorms keep their fp32 input and the normalised output; q, k, v, the rotary inputs and
outputs, k and v repeated for grouped-query attention (``h' = h`` when ``kv_heads < heads``),
the attention output and o_proj's input, the MLP's gate, up, SiLU and product), plus
``2 * heads * s * c`` for eager attention (its probabilities).

Example (a 2-layer model, hand-checked in tests/config/test_memory_estimate.py):
    >>> shape = ModelShape(vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128)
    >>> shape.params  # 256 x 64 embedding + 64 final norm + 2 x 37,120 per layer
    90688
    >>> items = {i.name: i.bytes for i in training_items(TrainSetup(shape, micro_batch=2, seq=32, response=16))}
    >>> items["activations"] == 2 * 32 * 2 * (2 * 8 * 64 + 4 * (5 * 64 + 2 * 64 + 4 * 32 + 4 * 128)) + 2 * 32 * 64 * 8
    True
    >>> items["optimizer"], items["logits"]  # 2 x 90,688 x 4 B; 2 x 16 tokens x 256 x (4 + 8) B
    (725504, 98304)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

from rlinf.scheduler.memory import MemoryItem
from rlinf.utils.typed_config import ConfigError

#: bytes per element of the dtype names the configs use
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only LM (Llama / Qwen2 family layout).

    Attributes:
        vocab, hidden, layers, heads, kv_heads, intermediate: as in the HF ``config.json``.
        head_dim: per-head width (default ``hidden // heads``).
        tied: the LM head shares the embedding matrix.
        qkv_bias: q / k / v projections have biases (Qwen2).
    """

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    head_dim: int = 0
    tied: bool = True
    qkv_bias: bool = True

    def __post_init__(self):
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """One decoder layer: attention (with q/k/v biases when ``qkv_bias``), SwiGLU MLP, 2 norms."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_width
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return h * q + 2 * h * kv + q * h + bias + 3 * h * self.intermediate + 2 * h

    @property
    def root_params(self) -> int:
        """What is not in a layer: embedding, final norm, an untied LM head."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.root_params + self.layers * self.layer_params

    def lora_params(self, rank: int, targets: tuple[str, ...]) -> int:
        """LoRA A and B matrices (``rank x (in + out)``) on the named Linear layers of every layer."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_width, self.intermediate
        dims = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
        return self.layers * sum(rank * sum(dims[t]) for t in targets if t in dims)

    def describe(self) -> str:
        return (f"{self.params / 1e6:.1f}M params: hidden {self.hidden}, {self.layers} layers, {self.heads} heads "
                f"({self.kv_heads} kv), intermediate {self.intermediate}, vocab {self.vocab}")

    @classmethod
    def from_hf_config(cls, cfg: dict) -> ModelShape:
        """From a parsed ``config.json`` (a VLA's language model under ``text_config``)."""
        text = cfg.get("text_config") or cfg
        heads = int(text["num_attention_heads"])
        return cls(vocab=int(text["vocab_size"]), hidden=int(text["hidden_size"]),
                   layers=int(text["num_hidden_layers"]), heads=heads,
                   kv_heads=int(text.get("num_key_value_heads") or heads),
                   intermediate=int(text["intermediate_size"]), head_dim=int(text.get("head_dim") or 0),
                   tied=bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
                   qkv_bias=bool(text.get("attention_bias", text.get("model_type") == "qwen2")))

    @classmethod
    def from_folder(cls, folder: str, key: str) -> ModelShape:
        """From ``folder/config.json``; :class:`ConfigError` naming ``key`` when it cannot be read."""
        path = os.path.join(folder, "config.json")
        try:
            with open(path, encoding="utf-8") as f:
                return cls.from_hf_config(json.load(f))
        except OSError as exc:
            raise ConfigError(key, f"cannot read {path}: {exc.strerror or exc}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(key, f"{path} is not a decoder LM config the estimate reads ({exc!r})") from None


@dataclass(frozen=True)
class TrainSetup:
    """One training rank's setting (see the module docstring for the formulas).

    Attributes:
        shape: the model.
        micro_batch, seq, response: samples per micro-batch, tokens per sample, tokens per sample
            through the LM head (0: a value model, no vocabulary).
        master, compute, reduce: dtype bytes of the master weights, the compute copies, the
            gradient reduction.
        shard_weights, shard_grads, shard_optim: ranks sharing each state (FSDP full shard: all
            three; ZeRO-1: optimizer only; Megatron: tensor x pipeline sizes for all three).
        accumulate_unsharded: micro-batches accumulate unsharded gradients (FSDP2 without sync).
        reshard_after_forward: FSDP2 frees gathered weights after the forward pass.
        grad_ckpt: activations recomputed in the backward pass (layer inputs kept).
        entropy: the loss takes the token entropy (its log-softmax terms are kept too).
        eager: eager attention (probabilities kept) instead of SDPA.
        trainable: trainable parameters (None: all; LoRA: the adapters).
        act_divisor: activations split over this many ranks (Megatron tensor parallelism).
        act_layers: layers whose activations one rank holds, times micro-batches in flight
            (None: all layers once).
        offload: weights, gradients and optimizer state live on the host (FSDP cpu_offload).
        offload_in_turns: the state leaves the device while a collocated component works.
    """

    shape: ModelShape
    micro_batch: int
    seq: int
    response: int
    master: int = 4
    compute: int = 4
    reduce: int = 4
    shard_weights: int = 1
    shard_grads: int = 1
    shard_optim: int = 1
    accumulate_unsharded: bool = False
    reshard_after_forward: bool = True
    grad_ckpt: bool = False
    entropy: bool = False
    eager: bool = False
    trainable: int | None = None
    act_divisor: int = 1
    act_layers: float | None = None
    offload: bool = False
    offload_in_turns: bool = False


def layer_activation_bytes(shape: ModelShape, compute: int, seq: int, eager: bool = False) -> int:
    """``A``: bytes one layer keeps for the backward pass per token (module docstring)."""
    h, kv, c = shape.hidden, shape.kv_width, compute
    repeat = h if shape.kv_heads < shape.heads else 0
    out = 2 * (4 + c) * h + c * (5 * h + 2 * repeat + 4 * kv + 4 * shape.intermediate)
    return out + (2 * shape.heads * seq * c if eager else 0)


def logits_bytes_per_token(vocab: int, compute: int, entropy: bool) -> int:
    """Bytes per LM-head token of the log-prob computation over the vocabulary (module docstring)."""
    return vocab * (compute + (25 if entropy else 8))


def training_items(t: TrainSetup) -> list[MemoryItem]:
    """The parts of one training rank's peak (module docstring); bytes per rank."""
    s, n = t.shape, t.shape.params
    trainable = n if t.trainable is None else t.trainable
    where = "host" if t.offload else "device"
    state_phase = t.offload_in_turns and not t.offload
    grads = trainable * t.reduce if t.accumulate_unsharded else trainable * t.master // t.shard_grads
    items = [
        MemoryItem("weights", n * t.master // t.shard_weights, state_phase, where,
                   f"{n / 1e6:.1f}M x {t.master} B / {t.shard_weights}"),
        MemoryItem("gradients", grads, state_phase, where,
                   f"{trainable / 1e6:.2f}M x {t.reduce if t.accumulate_unsharded else t.master} B"
                   + ("" if t.accumulate_unsharded else f" / {t.shard_grads}")),
        MemoryItem("optimizer", 2 * trainable * t.master // t.shard_optim, state_phase, where,
                   f"AdamW 2 x {trainable / 1e6:.2f}M x {t.master} B / {t.shard_optim}"),
    ]
    sharded = t.shard_weights > 1 or t.compute != t.master or t.offload
    if not t.reshard_after_forward and sharded:
        items.append(MemoryItem("gathered", n * t.compute, True, note="all weights gathered (no reshard)"))
    elif sharded:
        items.append(MemoryItem("gathered", (s.root_params + 2 * s.layer_params) * t.compute, True,
                                note="root unit + 2 layers unsharded"))
    tokens = t.micro_batch * t.seq
    per_layer = layer_activation_bytes(s, t.compute, t.seq, t.eager)
    layers = s.layers if t.act_layers is None else t.act_layers
    if t.grad_ckpt:
        act = tokens * (layers * s.hidden * t.compute + per_layer)
        how = f"{t.micro_batch} x {t.seq} tokens, checkpointed: {layers:g} layer inputs + 1 layer"
    else:
        act = tokens * layers * per_layer
        how = f"{t.micro_batch} x {t.seq} tokens x {layers:g} layers x {per_layer / 1024:.1f} KiB"
    items.append(MemoryItem("activations", int(act // t.act_divisor) + tokens * s.hidden * (4 + t.compute),
                            True, note=how))
    if t.response:
        per = logits_bytes_per_token(s.vocab, t.compute, t.entropy)
        items.append(MemoryItem("logits", t.micro_batch * t.response * per, True,
                                note=f"{t.micro_batch} x {t.response} tokens x vocab {s.vocab} x "
                                     f"{per // s.vocab} B" + (" (with entropy)" if t.entropy else "")))
    return items


def frozen_items(shape: ModelShape, dtype_bytes: int, shard: int, micro_batch: int, seq: int, response: int,
                 name: str = "weights", in_turns: bool = False) -> list[MemoryItem]:
    """A forward-only model (reference / inference log-probs): weights and one micro-batch's
    forward (no grad: one layer's activations at a time, the log-softmax over the vocabulary)."""
    n = shape.params
    fwd = micro_batch * seq * layer_activation_bytes(shape, dtype_bytes, seq) + micro_batch * response * (
        shape.vocab * (dtype_bytes + 8))
    return [MemoryItem(name, n * dtype_bytes // shard, in_turns, note=f"{n / 1e6:.1f}M x {dtype_bytes} B / {shard}"),
            MemoryItem("forward", fwd, True, note=f"{micro_batch} x {seq} tokens, no grad")]


def kv_cache_bytes(shape: ModelShape, sequences: int, length: int, dtype_bytes: int) -> int:
    """``sequences x length x layers x 2 (k, v) x kv_heads x head_dim x dtype``."""
    return sequences * length * shape.layers * 2 * shape.kv_width * dtype_bytes


def generate_items(shape: ModelShape, dtype_bytes: int, sequences: int, prompt: int, new_tokens: int,
                   in_turns: bool = False) -> list[MemoryItem]:
    """HF generate: weights, the KV cache of ``sequences`` x (prompt + new) tokens, the prefill's
    largest transient (one layer's MLP over the prompt plus the attention mask) and the fp32
    logits of a decode step (logits, the log-prob recorder's log-softmax, sampling's softmax)."""
    n, c = shape.params, dtype_bytes
    kv = kv_cache_bytes(shape, sequences, prompt + new_tokens, c)
    prefill = sequences * prompt * (c * (3 * shape.intermediate + 4 * shape.hidden) + prompt + new_tokens)
    step = sequences * shape.vocab * 4 * 4
    return [MemoryItem("weights", n * c, in_turns, note=f"{n / 1e6:.1f}M x {c} B"),
            MemoryItem("kv_cache", kv, True, note=f"{sequences} seqs x {prompt + new_tokens} tokens"),
            MemoryItem("prefill", max(prefill, step), True, note="largest transient of prefill / a decode step")]


def with_batch(t: TrainSetup, micro_batch: int) -> TrainSetup:
    """``t`` with another micro-batch size (what-if for the remedies)."""
    return replace(t, micro_batch=micro_batch)
