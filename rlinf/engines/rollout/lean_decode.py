"""A lean batched decode loop over an HF Llama-family model's own modules.

``transformers``' ``generate`` pays a fixed cost per step (cache objects, mask building,
input preparation, stopping criteria) that dominates on small models: on the tiny math model
(0.6M parameters) most of a rollout is that overhead. This loop runs the same model — the HF
module's own parameters, no copy, so weight updates apply at once — with a preallocated key /
value cache and one boolean mask per batch, and applies the same logits processors and the same
sampling rule as ``generate``:

    scores = processors(tokens so far, float32 logits of the last position)
    next   = multinomial(softmax(scores)) if sampling else argmax(scores)
    rows that already emitted an EOS id get the pad id; stop when every row has

Architectures: the Llama family as ``transformers`` writes it (``qwen2``, ``qwen3``, ``llama``,
``mistral``): pre-norm decoder layers with ``self_attn.{q,k,v,o}_proj`` (optional ``q_norm`` /
``k_norm``), ``mlp``, rotary embeddings from ``model.model.rotary_emb``; no sliding-window
layers. :func:`lean_decode_problem` says why another model is not taken (the engine then uses
``generate``).

Numerics: the same operations in the same dtype, but attention runs over the preallocated cache
(masked key slots) rather than a growing one, so logits agree with ``generate``'s to float
rounding, not bit for bit (tests: greedy tokens equal, log-probs within 1e-5).

Example:
    >>> import torch
    >>> from transformers import Qwen2Config, Qwen2ForCausalLM
    >>> torch.manual_seed(0) and None
    >>> model = Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)).eval()
    >>> lean_decode_problem(model) is None
    True
    >>> ids = torch.tensor([[0, 5, 6], [7, 8, 9]]); mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    >>> out = lean_generate(model, ids, mask, max_new_tokens=4, processors=[], do_sample=False,
    ...                     eos_token_ids=[], pad_token_id=0)
    >>> out.shape
    torch.Size([2, 7])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

#: ``config.model_type`` values this loop runs
LEAN_MODEL_TYPES = ("qwen2", "qwen3", "llama", "mistral")


def lean_decode_problem(model) -> str | None:
    """None when :func:`lean_generate` can run ``model``, else the reason it cannot."""
    model_type = getattr(model.config, "model_type", None)
    if model_type not in LEAN_MODEL_TYPES:
        return f"model_type {model_type!r} is not one of {', '.join(LEAN_MODEL_TYPES)}"
    body = getattr(model, "model", None)
    if body is None or not hasattr(body, "layers") or not hasattr(body, "rotary_emb"):
        return "the model has no .model.layers / .model.rotary_emb"
    for layer in body.layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
            return "a decoder layer has no self_attn.{q,k,v,o}_proj"
        if getattr(attn, "sliding_window", None):
            return "sliding-window attention layers"
    if getattr(body.rotary_emb, "rope_type", "default") != "default":
        return f"rope_type {body.rotary_emb.rope_type!r} (only the default rotary embedding)"
    return None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


class _Cache:
    """Per-layer key / value buffers ``[b, kv_heads, max_len, head_dim]`` filled left to right."""

    def __init__(self, layers: int, b: int, kv_heads: int, max_len: int, head_dim: int, dtype, device):
        shape = (b, kv_heads, max_len, head_dim)
        self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)]


def _forward(model, ids: torch.Tensor, positions: torch.Tensor, cache: _Cache, start: int,
             mask: torch.Tensor) -> torch.Tensor:
    """Float32 logits of the last position of ``ids`` ``[b, s]`` (written at cache slots
    ``start .. start + s``); ``mask`` ``[b, 1, s, start + s]`` is True where a query may attend."""
    body = model.model
    hidden = body.embed_tokens(ids)
    cos, sin = body.rotary_emb(hidden, positions)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    b, s = ids.shape
    end = start + s
    for i, layer in enumerate(body.layers):
        attn = layer.self_attn
        x = layer.input_layernorm(hidden)
        q = attn.q_proj(x).view(b, s, -1, attn.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(b, s, -1, attn.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(b, s, -1, attn.head_dim).transpose(1, 2)
        if hasattr(attn, "q_norm"):  # qwen3
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        cache.k[i][:, :, start:end] = k
        cache.v[i][:, :, start:end] = v
        keys, values = cache.k[i][:, :, :end], cache.v[i][:, :, :end]
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling,
                                             enable_gqa=keys.shape[1] != q.shape[1])
        hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(b, s, -1))
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    last = body.norm(hidden[:, -1:])
    return model.lm_head(last)[:, -1].float()


@torch.no_grad()
def lean_generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, max_new_tokens: int,
                  processors: Sequence[Callable], do_sample: bool, eos_token_ids: Sequence[int],
                  pad_token_id: int, stop_check: Callable | None = None,
                  should_stop: Callable[[], bool] | None = None) -> torch.Tensor:
    """``[b, P + n]`` prompt + generated tokens, as ``generate`` returns them (``n`` <=
    ``max_new_tokens``: the loop stops early once every row has emitted an EOS id, or when
    ``should_stop`` returns True; finished rows are padded with ``pad_token_id``).

    Args:
        model: an HF causal LM that :func:`lean_decode_problem` accepts, in eval mode.
        input_ids, attention_mask: ``[b, P]`` left-padded prompts and their mask (1 = token).
        processors: logits processors called as ``p(tokens_so_far, scores) -> scores``, in order.
        do_sample: sample from ``softmax(scores)`` (else argmax).
        eos_token_ids: ids that finish a row.
        pad_token_id: what finished rows emit.
        stop_check: ``f(tokens_so_far) -> [b] bool``, called after each step: True finishes a
            row as an EOS id does (the stop-string watcher).
        should_stop: ``f() -> bool``, polled after each step that leaves a row decoding and is
            not the last: True returns the tokens so far (rows not ended are cut short).
    """
    device = input_ids.device
    b, prompt_len = input_ids.shape
    total = prompt_len + max_new_tokens
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dtype = model.model.embed_tokens.weight.dtype
    cache = _Cache(len(model.model.layers), b, cfg.num_key_value_heads, total, head_dim, dtype, device)
    tokens = torch.full((b, total), pad_token_id, dtype=torch.long, device=device)
    tokens[:, :prompt_len] = input_ids
    keep = torch.ones((b, total), dtype=torch.bool, device=device)  # key slots a query may see
    keep[:, :prompt_len] = attention_mask.bool()
    positions = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
    # prefill: causal within the prompt, pads hidden; a pad query sees itself (no empty rows)
    causal = torch.ones((prompt_len, prompt_len), dtype=torch.bool, device=device).tril()
    mask = causal[None] & keep[:, None, :prompt_len]
    mask |= torch.eye(prompt_len, dtype=torch.bool, device=device)[None]
    logits = _forward(model, input_ids, positions, cache, 0, mask[:, None])
    next_pos = positions[:, -1:] + 1
    eos = torch.as_tensor(list(eos_token_ids), dtype=torch.long, device=device)
    unfinished = torch.ones(b, dtype=torch.bool, device=device)
    length = prompt_len
    for step in range(max_new_tokens):
        scores = logits
        for proc in processors:
            scores = proc(tokens[:, :length], scores)
        if do_sample:
            chosen = torch.multinomial(F.softmax(scores, dim=-1), num_samples=1).squeeze(1)
        else:
            chosen = scores.argmax(dim=-1)
        chosen = torch.where(unfinished, chosen, torch.full_like(chosen, pad_token_id))
        tokens[:, length] = chosen
        length += 1
        if eos.numel():
            unfinished &= ~torch.isin(chosen, eos)
        if stop_check is not None and bool(unfinished.any()):
            unfinished &= ~stop_check(tokens[:, :length])
        if not bool(unfinished.any()) or step == max_new_tokens - 1:
            break
        if should_stop is not None and should_stop():
            break
        logits = _forward(model, chosen[:, None], next_pos, cache, length - 1,
                          keep[:, None, None, :length])
        next_pos = next_pos + 1
    return tokens[:, :length]
