"""OpenVLA and OpenVLA-OFT as embodied policies, built from transformers' classes.

One module, :class:`OpenVLAPolicy`, holds what a real checkpoint holds, under its names:
``vision_backbone`` (:class:`~.modules.VisionBackbone`), ``projector``, ``language_model`` (a
``LlamaForCausalLM`` from ``text_config``), plus RLinf's ``value_head`` and OFT's
``proprio_projector`` when used. The two model types differ only in how they decode the
``K x A`` action tokens (``K = num_action_chunks``, ``A = action_dim``):

* ``openvla``: autoregressively, one token per forward (KV cache), as ``generate`` does.
* ``openvla_oft``: in parallel, one forward over ``K x A`` zeroed placeholder embeddings
  appended to the prompt (OFT's layout; causal attention as in RLinf, which runs the stock
  transformers Llama).

Input sequence: ``[BOS, image patches (main, then wrist), (proprio token), pad..., prompt...,
▁]`` (:mod:`.prompt`). The logits of action token ``j`` are read at the position before it:
the ``▁`` for ``j = 0``, then the previous action (openvla) or placeholder (oft). The value head
reads the hidden state at the ``▁`` position (the last prompt token), as RLinf does.

RL distribution: softmax over the 256 action ids only (``[V - 256, V)``), logits divided by
``temperature``; ``raw_actions`` are the token ids (float). Env actions are the token values
(:mod:`.action_tokens`) un-normalised with the ``unnorm_key`` statistics and clipped to the env
bounds. :meth:`OpenVLAPolicy.predict_action` is the original tools' greedy path (arg-max over the
whole vocabulary, ids outside the action range clipped as the original decode does), for
checking a checkpoint.

Load with :func:`rlinf.models.embodied.openvla.loading.load_openvla`; write back with
:func:`~rlinf.models.embodied.openvla.loading.save_openvla`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rlinf.models.embodied.base import EmbodiedPolicy, PolicyOutput, check_value_type, preprocess_images, to_tensor
from rlinf.models.embodied.openvla.action_tokens import (
    ActionTokens,
    normalize_proprio,
    select_stats,
    unnormalize_actions,
)
from rlinf.models.embodied.openvla.modules import Projector, ProprioProjector, ValueHead, VisionBackbone
from rlinf.models.embodied.openvla.prompt import SpecialIds, batch_prompt_ids
from rlinf.models.embodied.openvla.vision import TowerSpec

MODEL_TYPES = ("openvla", "openvla_oft")


@dataclass
class OpenVLAOptions:
    """How a checkpoint is run (the ``actor.model`` keys; the checkpoint decides the rest).

    Attributes:
        model_type: ``openvla`` (autoregressive) or ``openvla_oft`` (parallel decoding).
        action_dim: ``A`` (7 for the released checkpoints).
        num_action_chunks: ``K`` (1 for OpenVLA; OFT's LIBERO / ManiSkill bases use 8).
        unnorm_key: which statistics un-normalise actions (None = the only entry).
        value_type: ``chunk_level`` (values ``[N]``) or ``action_level`` (``[N, K]``).
        add_value_head: build / use the value head (PPO); False for critic-free GRPO.
        use_proprio: OFT's proprio token (needs ``proprio_dim``).
        proprio_dim: length of the state vector the proprio projector reads (None: the folder's
            ``proprio_projector--*.pt`` decides).
        num_images_in_input: 1 (main camera) or 2 (+ wrist camera).
        center_crop: crop the centre 90 % of the image area before resizing (OpenVLA at eval).
        temperature: softmax temperature of the action-token distribution.
        norm_type: ``bounds_q99`` (q01 / q99) or ``bounds`` (min / max).
    """

    model_type: str = "openvla"
    action_dim: int = 7
    num_action_chunks: int = 1
    unnorm_key: str | None = None
    value_type: str = "chunk_level"
    add_value_head: bool = False
    use_proprio: bool = False
    proprio_dim: int | None = None
    num_images_in_input: int = 1
    center_crop: bool = False
    temperature: float = 1.0
    norm_type: str = "bounds_q99"

    def __post_init__(self):
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {self.model_type!r}")
        if self.action_dim < 1 or self.num_action_chunks < 1:
            raise ValueError("action_dim and num_action_chunks must be >= 1")
        if self.num_images_in_input not in (1, 2):
            raise ValueError(f"num_images_in_input must be 1 or 2, got {self.num_images_in_input}")
        self.value_type = check_value_type(self.value_type)


class OpenVLAPolicy(EmbodiedPolicy):
    """An OpenVLA / OpenVLA-OFT checkpoint as an :class:`~rlinf.models.embodied.base.EmbodiedPolicy`.

    Build through :func:`~rlinf.models.embodied.openvla.loading.load_openvla` (weights from a
    folder); the constructor makes the modules with random weights.

    Args:
        config: the checkpoint's ``config.json``.
        towers: the vision tower specs (from the weights).
        options: how to run it.
        tokenizer: the checkpoint's tokenizer.
        ids: its special ids.
        norm_stats: the checkpoint's statistics (``dataset_statistics.json``).
        attn_implementation: transformers attention implementation for the LM (None = default).
    """

    def __init__(self, config: Mapping[str, Any], towers: list[TowerSpec], options: OpenVLAOptions,
                 tokenizer, ids: SpecialIds, norm_stats: Mapping[str, Any] | None,
                 attn_implementation: str | None = None):
        super().__init__()
        # lazy: transformers (~2 s) only when a model is built; the pre-Ray folder check imports this package
        from transformers import AutoModelForCausalLM
        from transformers.models.auto import CONFIG_MAPPING

        self.config = dict(config)
        self.options = options
        self.tokenizer, self.ids = tokenizer, ids
        self.norm_stats = dict(norm_stats) if norm_stats else None
        text = dict(config["text_config"])
        text_cfg = CONFIG_MAPPING[text.pop("model_type", "llama")](**text)
        if attn_implementation:
            text_cfg._attn_implementation = attn_implementation
        hidden = text_cfg.hidden_size
        self.vision_backbone = VisionBackbone(towers)
        self.projector = Projector(config.get("arch_specifier", ""), self.vision_backbone.feature_dim, hidden)
        self.language_model = AutoModelForCausalLM.from_config(text_cfg)
        self.proprio_projector = (ProprioProjector(options.proprio_dim, hidden) if options.use_proprio else None)
        out = 1 if options.value_type == "chunk_level" else options.num_action_chunks
        self.value_head = ValueHead(hidden, out) if options.add_value_head else None
        n_bins = int(config.get("n_action_bins", 256))
        base_vocab = int(text_cfg.vocab_size) - int(config.get("pad_to_multiple_of", 0) or 0)
        self.tokens = ActionTokens(n_bins, base_vocab)
        self.value_type = options.value_type
        self.temperature = float(options.temperature)
        self.unnorm_key, self._action_stats = self._pick_stats(options.unnorm_key)
        self._action_low: torch.Tensor | None = None
        self._action_high: torch.Tensor | None = None
        #: checkpoint tensors the forward never uses (last vision blocks, norms, attn_pool),
        #: written back unchanged by save_openvla.
        self.carried: dict[str, torch.Tensor] = {}
        #: OFT extras of the source folder that are not run here (e.g. the L1 action head).
        self.extras: dict[str, dict[str, torch.Tensor]] = {}

    # ------------------------------------------------------------------------------- basics

    @property
    def action_dim(self) -> int:  # type: ignore[override]
        return self.options.action_dim

    @property
    def num_action_chunks(self) -> int:  # type: ignore[override]
        return self.options.num_action_chunks

    @property
    def num_action_tokens(self) -> int:
        """``K * A``."""
        return self.options.action_dim * self.options.num_action_chunks

    @property
    def device(self) -> torch.device:
        return self.language_model.get_input_embeddings().weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.language_model.get_input_embeddings().weight.dtype

    def _pick_stats(self, unnorm_key: str | None):
        if self.norm_stats is None:
            if unnorm_key is not None:
                raise KeyError(f"unnorm_key {unnorm_key!r} given but the checkpoint has no statistics")
            return None, None
        key, entry = select_stats(self.norm_stats, unnorm_key)
        return key, entry

    def action_stats(self) -> Mapping[str, Any] | None:
        """The ``action`` statistics in use (None: actions stay in [-1, 1])."""
        return None if self._action_stats is None else self._action_stats.get("action", self._action_stats)

    def proprio_stats(self) -> Mapping[str, Any] | None:
        """The ``proprio`` statistics of the chosen dataset, or None."""
        return None if self._action_stats is None else self._action_stats.get("proprio")

    def set_action_bounds(self, low: Sequence[float] | None, high: Sequence[float] | None) -> None:
        """Clip env actions to ``[low, high]`` after un-normalisation (None: no clipping)."""
        self._action_low = None if low is None else torch.as_tensor(low, dtype=torch.float32)
        self._action_high = None if high is None else torch.as_tensor(high, dtype=torch.float32)

    # ---------------------------------------------------------------------------- the prefix

    def _pixels(self, images: torch.Tensor) -> list[torch.Tensor]:
        size = self.vision_backbone.image_size
        return [preprocess_images(images, (size, size), self.options.center_crop, mean=s.mean_std[0],
                                  std=s.mean_std[1], device=self.device, dtype=self.dtype, mode="bicubic")
                for s in self.vision_backbone.specs]

    def patch_embeddings(self, images, wrist_images=None) -> torch.Tensor:
        """Projected patches ``[N, images * P, H]`` (main camera first)."""
        cams = [to_tensor(images)]
        if self.options.num_images_in_input == 2:
            if wrist_images is None:
                raise ValueError("this policy takes two images (num_images_in_input=2); pass wrist_images")
            cams.append(to_tensor(wrist_images))
        feats = [self.projector(self.vision_backbone(self._pixels(c))) for c in cams]
        return torch.cat(feats, dim=1)

    def _prefix(self, states, images, wrist_images, instructions) -> tuple[torch.Tensor, torch.Tensor]:
        """``(embeddings [N, L, H], mask [N, L] bool)``; position ``L - 1`` is the ``▁`` token."""
        if images is None:
            raise ValueError("OpenVLA needs images [N, H, W, 3]")
        n = to_tensor(images).shape[0]
        if instructions is None or isinstance(instructions, str):
            instructions = [instructions or ""] * n
        if len(instructions) != n:
            raise ValueError(f"got {len(instructions)} instructions for {n} observations")
        embed = self.language_model.get_input_embeddings()
        dev = self.device
        text, text_mask = batch_prompt_ids(self.tokenizer, self.ids, instructions)
        limit = getattr(self, "max_prompt_length", None)
        if limit is not None and text.shape[1] > limit:
            longest = max(range(n), key=lambda i: int(text_mask[i].sum()))
            raise ValueError(f"runner.max_prompt_length: the prompt of task {instructions[longest]!r} is "
                             f"{int(text_mask[longest].sum())} tokens, more than {limit}")
        bos = embed(torch.full((n, 1), self.ids.bos, dtype=torch.long, device=dev))
        parts = [bos, self.patch_embeddings(images, wrist_images).to(bos.dtype)]
        if self.proprio_projector is not None:
            if states is None:
                raise ValueError("this policy reads proprio (use_proprio); pass states")
            s = normalize_proprio(to_tensor(states, dev).float(), self.proprio_stats(), self.options.norm_type)
            parts.append(self.proprio_projector(s.to(bos.dtype)).unsqueeze(1))
        parts.append(embed(text.to(dev)))
        prefix = sum(p.shape[1] for p in parts[:-1])
        mask = torch.cat([torch.ones(n, prefix, dtype=torch.bool, device=dev), text_mask.to(dev)], dim=1)
        return torch.cat(parts, dim=1), mask

    def _decoder(self, embeds, mask, cache=None, positions=None):
        if positions is None:
            positions = (mask.long().cumsum(1) - 1).clamp_min(0)
        out = self.language_model.model(inputs_embeds=embeds, attention_mask=mask.long(), position_ids=positions,
                                        past_key_values=cache, use_cache=cache is not None)
        return out.last_hidden_state, out.past_key_values

    def _action_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM-head logits of the action ids only, ``[..., n_bins]`` fp32 (bin ``b`` = id ``V - n + b``)."""
        head = self.language_model.get_output_embeddings()
        t = self.tokens
        w = head.weight[t.first_id:t.base_vocab]
        for name in getattr(head, "active_adapters", ()):  # a LoRA-wrapped head: add its rows' delta
            a, b_rows = head.lora_A[name].weight, head.lora_B[name].weight[t.first_id:t.base_vocab]
            w = w + head.scaling[name] * (b_rows @ a).to(w.dtype)
        b = head.bias[t.first_id:t.base_vocab] if getattr(head, "bias", None) is not None else None
        return F.linear(hidden, w, b).float()

    # ----------------------------------------------------------------------------- decoding

    def _teacher_forced(self, states, images, wrist_images, instructions, token_ids: torch.Tensor | None):
        """``(action logits [N, K*A, n], value hidden [N, H])`` with the given tokens fed back
        (openvla) or the placeholders (oft)."""
        embeds, mask = self._prefix(states, images, wrist_images, instructions)
        n, m = embeds.shape[0], self.num_action_tokens
        if self.options.model_type == "openvla_oft":
            tail = torch.zeros(n, m, embeds.shape[-1], dtype=embeds.dtype, device=embeds.device)
        else:
            tail = self.language_model.get_input_embeddings()(token_ids[:, :-1])
        full_mask = torch.cat([mask, torch.ones(n, tail.shape[1], dtype=torch.bool, device=mask.device)], 1)
        hidden, _ = self._decoder(torch.cat([embeds, tail], 1), full_mask)
        start = embeds.shape[1] - 1
        return self._action_logits(hidden[:, start:start + m]), hidden[:, start]

    def _sample(self, logits: torch.Tensor, deterministic: bool, generator) -> torch.Tensor:
        if deterministic:
            return logits.argmax(-1)
        probs = torch.softmax(logits.detach() / self.temperature, dim=-1)
        dev = generator.device if generator is not None else probs.device
        flat = torch.multinomial(probs.reshape(-1, probs.shape[-1]).to(dev), 1, generator=generator)
        return flat.view(probs.shape[:-1]).to(probs.device)

    def _generate(self, states, images, wrist_images, instructions, deterministic, generator):
        """Autoregressive decoding (openvla): ``(logits [N, K*A, n], bins [N, K*A], value hidden)``."""
        # lazy: transformers (~2 s) only when a model is built; the pre-Ray folder check imports this package
        from transformers import DynamicCache

        embeds, mask = self._prefix(states, images, wrist_images, instructions)
        positions = (mask.long().cumsum(1) - 1).clamp_min(0)
        hidden, cache = self._decoder(embeds, mask, DynamicCache(), positions)
        value_hidden = hidden[:, -1]
        embed = self.language_model.get_input_embeddings()
        logits_all, bins_all = [], []
        last = hidden[:, -1:]
        for j in range(self.num_action_tokens):
            logits = self._action_logits(last)[:, 0]
            bins = self._sample(logits, deterministic, generator)
            logits_all.append(logits)
            bins_all.append(bins)
            if j + 1 == self.num_action_tokens:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            positions = positions[:, -1:] + 1
            last, cache = self._decoder(embed((bins + self.tokens.first_id).unsqueeze(1)), mask, cache, positions)
        return torch.stack(logits_all, 1), torch.stack(bins_all, 1), value_hidden

    def _output(self, logits, bins, value_hidden, raw=None) -> PolicyOutput:
        n = logits.shape[0]
        shape = (n, self.num_action_chunks, self.action_dim)
        logp = torch.log_softmax(logits / self.temperature, dim=-1)
        logprobs = logp.gather(-1, bins.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        ids = bins.detach() + self.tokens.first_id
        actions = self.env_actions(ids.view(shape))
        if raw is None:
            raw = ids.float().view(shape)
        return PolicyOutput(actions=actions, raw_actions=raw, logprobs=logprobs.view(shape),
                            values=self._values(value_hidden), entropy=entropy.view(shape))

    def env_actions(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Token ids ``[..., A]`` -> un-normalised env actions (fp32), clipped to the env bounds."""
        actions = unnormalize_actions(self.tokens.decode(token_ids), self.action_stats(), self.options.norm_type)
        if self._action_low is not None:
            actions = torch.maximum(actions, self._action_low.to(actions.device))
        if self._action_high is not None:
            actions = torch.minimum(actions, self._action_high.to(actions.device))
        return actions

    def _values(self, hidden: torch.Tensor) -> torch.Tensor | None:
        if self.value_head is None:
            return None
        v = self.value_head(hidden).float()
        return v.squeeze(-1) if self.value_type == "chunk_level" else v

    # --------------------------------------------------------------------------- interface

    def act(self, states=None, images=None, wrist_images=None, instructions=None,
            deterministic: bool = False, generator: torch.Generator | None = None) -> PolicyOutput:
        """See :meth:`EmbodiedPolicy.act`; ``raw_actions`` are the action token ids (float)."""
        if self.options.model_type == "openvla":
            logits, bins, vh = self._generate(states, images, wrist_images, instructions, deterministic, generator)
        else:
            logits, vh = self._teacher_forced(states, images, wrist_images, instructions, None)
            bins = self._sample(logits, deterministic, generator)
        return self._output(logits, bins, vh)

    def evaluate(self, raw_actions: torch.Tensor, states=None, images=None, wrist_images=None,
                 instructions=None) -> PolicyOutput:
        """See :meth:`EmbodiedPolicy.evaluate` (one teacher-forced forward for both types)."""
        raw = to_tensor(raw_actions, self.device)
        n = raw.shape[0]
        if tuple(raw.shape[1:]) != (self.num_action_chunks, self.action_dim):
            raise ValueError(f"raw_actions must be [N, {self.num_action_chunks}, {self.action_dim}], "
                             f"got {tuple(raw.shape)}")
        bins = self.tokens.ids_to_bins(raw).view(n, -1)
        logits, vh = self._teacher_forced(states, images, wrist_images, instructions, bins + self.tokens.first_id)
        return self._output(logits, bins, vh, raw=raw)

    def value(self, states=None, images=None, wrist_images=None, instructions=None) -> torch.Tensor:
        """See :meth:`EmbodiedPolicy.value` (the hidden state at the last prompt token)."""
        if self.value_head is None:
            raise RuntimeError("this policy has no value head (add_value_head=False)")
        embeds, mask = self._prefix(states, images, wrist_images, instructions)
        hidden, _ = self._decoder(embeds, mask)
        return self._values(hidden[:, -1])

    @torch.no_grad()
    def predict_action(self, images, instructions, wrist_images=None, states=None) -> torch.Tensor:
        """The original tools' greedy actions ``[N, K, A]``: arg-max over the WHOLE vocabulary at
        every action position (openvla: fed back token by token; oft: one pass over the
        placeholders), decoded with the original clipping, un-normalised (no env-bound clip)."""
        embeds, mask = self._prefix(states, images, wrist_images, instructions)
        n, m = embeds.shape[0], self.num_action_tokens
        head = self.language_model.get_output_embeddings()
        if self.options.model_type == "openvla_oft":
            tail = torch.zeros(n, m, embeds.shape[-1], dtype=embeds.dtype, device=embeds.device)
            full = torch.cat([mask, torch.ones(n, m, dtype=torch.bool, device=mask.device)], 1)
            hidden, _ = self._decoder(torch.cat([embeds, tail], 1), full)
            ids = head(hidden[:, embeds.shape[1] - 1:embeds.shape[1] - 1 + m]).argmax(-1)
        else:
            out = []
            for _ in range(m):
                hidden, _ = self._decoder(embeds, mask)
                nxt = head(hidden[:, -1]).argmax(-1)
                out.append(nxt)
                embeds = torch.cat([embeds, self.language_model.get_input_embeddings()(nxt).unsqueeze(1)], 1)
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            ids = torch.stack(out, 1)
        values = self.tokens.decode(ids.view(n, self.num_action_chunks, self.action_dim))
        return unnormalize_actions(values, self.action_stats(), self.options.norm_type)


def _save_pretrained(self: OpenVLAPolicy, path, state=None) -> None:
    """Writes the policy as a real-format folder (:func:`~.loading.save_openvla`)."""
    # lazy: breaks the cycle modeling <-> loading (loading builds OpenVLAPolicy)
    from rlinf.models.embodied.openvla.loading import save_openvla

    save_openvla(self, path, state=state)


OpenVLAPolicy.save_pretrained = _save_pretrained  # the name the actor's export and the tests call
