"""OpenVLA-OFT-style vision-language-action policy built from transformers' own classes.

Architecture (:class:`VLACore`):

* Vision: a ``SiglipVisionModel`` (last layer's patch tokens, no pooling head), optionally fused
  patch-wise with a ``Dinov2Model`` (CLS dropped) as in OpenVLA's DINO-SigLIP backbone.
  Images are resized, optionally centre-cropped and normalised inside the model (SigLIP: mean /
  std 0.5; DINOv2: ImageNet statistics). With ``num_images_in_input = 2`` the wrist image goes
  through the same tower and its patches follow the main camera's.
* Projector to the LM width: ``Linear - GELU - Linear`` (OpenVLA's fused variant,
  ``Linear(4x) - GELU - Linear - GELU - Linear``, with DINOv2).
* A causal LM (``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` ... from ``text_config``).
* Input sequence, one forward pass: ``<s>``, image patch embeddings, [proprio token], the prompt
  tokens (``In: What action should the robot take to {instruction}?\\nOut:``), then ``K * A``
  learned action query embeddings (OFT's parallel decoding: no autoregressive loop). Prompts of
  different lengths are padded inside the prompt block; padded positions are masked out and
  position ids skip them, so a sample's outputs do not depend on its batch.
* Attention: causal by default; ``action_attention = "bidirectional"`` lets the action queries
  see each other too (OFT), through a 4D mask (eager / sdpa attention).
* Action head: the LM head's rows of the last ``n_action_bins`` vocabulary ids give bin logits at
  each action position; see :mod:`.action_tokenizer` for bins and un-normalisation.
* Value head (actor-critic): ``Linear - GELU - Linear(1)`` on the LM's last hidden states: the
  last action position for ``chunk_level`` (``[N]``), the last dimension of every action for
  ``action_level`` (``[N, K]``).

Sampling: ``softmax(bin_logits / temperature)`` per token; ``logprobs`` and ``entropy`` are those
of this tempered distribution, in act and evaluate alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, Dinov2Model, PreTrainedModel, SiglipVisionModel

from rlinf.models.embodied.base import EmbodiedPolicy, PolicyOutput, check_value_type, preprocess_images, to_tensor
from rlinf.models.embodied.openvla_oft.action_tokenizer import (
    ActionTokenizer,
    normalize_actions,
    unnormalize_actions,
)
from rlinf.models.embodied.openvla_oft.configuration import MODEL_TYPE, OpenVLAOFTConfig
from rlinf.models.embodied.openvla_oft.text_tokenizer import (
    load_instruction_tokenizer,
    save_instruction_tokenizer,
)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _size(image_size: Any) -> tuple[int, int]:
    return (int(image_size), int(image_size)) if isinstance(image_size, int) else tuple(int(s) for s in image_size)


class VLACore(nn.Module):
    """The VLA's modules (what LoRA wraps): vision tower(s), projector, LM, action queries,
    proprio projector and value head.

    Args:
        config: the model config.
    """

    def __init__(self, config: OpenVLAOFTConfig):
        super().__init__()
        vcfg, dcfg, tcfg = config.vision_config, config.dino_config, config.text_config
        hidden = tcfg.hidden_size
        self.vision_tower = SiglipVisionModel(vcfg)
        self.dino_tower = None
        vis_dim = vcfg.hidden_size
        if dcfg is not None:
            if _size(dcfg.image_size) != _size(vcfg.image_size) or _size(dcfg.patch_size) != _size(vcfg.patch_size):
                raise ValueError("dino_config must use the vision tower's image_size and patch_size")
            self.dino_tower = Dinov2Model(dcfg)
            vis_dim += dcfg.hidden_size
            self.projector = nn.Sequential(nn.Linear(vis_dim, 4 * vis_dim), nn.GELU(), nn.Linear(4 * vis_dim, hidden),
                                           nn.GELU(), nn.Linear(hidden, hidden))
        else:
            self.projector = nn.Sequential(nn.Linear(vis_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.language_model = AutoModelForCausalLM.from_config(tcfg)
        self.action_queries = nn.Embedding(config.num_action_tokens, hidden)
        self.proprio_projector = (nn.Sequential(nn.Linear(config.proprio_dim, hidden), nn.GELU(),
                                                nn.Linear(hidden, hidden)) if config.use_proprio else None)
        self.value_head = (nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))
                           if config.add_value_head else None)

    def lora_target_names(self) -> list[str]:
        """Names of the linear layers LoRA adapts: every ``nn.Linear`` except the LM head and the
        value head (towers, projectors, LM decoder layers)."""
        skip = ("language_model.lm_head", "value_head")
        return [name for name, m in self.named_modules()
                if isinstance(m, nn.Linear) and not name.startswith(skip)]


class OpenVLAOFTPolicy(PreTrainedModel, EmbodiedPolicy):
    """The VLA as an :class:`~rlinf.models.embodied.base.EmbodiedPolicy` and an HF model.

    ``save_pretrained`` / ``from_pretrained`` round-trip the weights, the config (including the
    normalisation statistics) and the instruction tokenizer in one local folder. After loading,
    set ``unnorm_key`` (which statistics un-normalise actions; None = the only entry, if there is
    exactly one), ``temperature``, ``value_type`` and the env action bounds
    (:meth:`set_action_bounds`) as needed; :func:`rlinf.models.build_policy` does this from
    ``actor.model``.

    LoRA (:meth:`enable_lora`, needs ``peft``): adapters on every linear layer except the LM head
    and the value head; the value head stays fully trainable (``modules_to_save``), everything
    else is frozen. :meth:`save_lora_adapter` writes the adapter folder that ``lora_path`` loads;
    ``save_pretrained`` of a LoRA model writes the merged weights.

    Runtime attributes (not architecture; the factory sets them, ``save_pretrained`` keeps only
    what lives in ``config``):

    Attributes:
        tokenizer: the instruction tokenizer (``with_tokenizer`` / loaded with the folder).
        temperature: softmax temperature of the bin distribution (sampling, log-probs, entropy).
        value_type: chunk_level (values ``[N]``) or action_level (``[N, K]``).
        unnorm_key: which ``norm_stats`` entry un-normalises actions.
        use_value_head: False = values are None even if the folder has a value head (GRPO).
        do_sample: the config's ``do_sample``; ``act(deterministic=...)`` decides per call.

    Args:
        config: the model config.

    Example:
        >>> import torch
        >>> from rlinf.models.embodied.openvla_oft.text_tokenizer import build_instruction_tokenizer
        >>> cfg = OpenVLAOFTConfig(action_dim=2, num_action_chunks=2)  # a minimal default model
        >>> policy = OpenVLAOFTPolicy(cfg).with_tokenizer(build_instruction_tokenizer())
        >>> out = policy.act(images=torch.zeros(3, 32, 32, 3, dtype=torch.uint8),
        ...                  instructions=["pick up the cube"] * 3)
        >>> out.actions.shape, out.values.shape, int(out.raw_actions.min()) >= 512
        (torch.Size([3, 2, 2]), torch.Size([3]), True)
    """

    config_class = OpenVLAOFTConfig
    config: OpenVLAOFTConfig
    base_model_prefix = "vla"
    main_input_name = "pixel_values"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_attention_backend = True

    def __init__(self, config: OpenVLAOFTConfig):
        super().__init__(config)
        self.vla = VLACore(config)
        self.tokenizer = None
        self.temperature = 1.0
        self.value_type = check_value_type(config.value_type)
        self.unnorm_key: str | None = None
        self.do_sample = True
        self.action_tokenizer = ActionTokenizer(config.n_action_bins, config.text_config.vocab_size)
        self.use_value_head = bool(config.add_value_head)
        self._lora_enabled = False
        self._action_low: torch.Tensor | None = None
        self._action_high: torch.Tensor | None = None
        self.post_init()

    # ----------------------------------------------------------------------------------- basics

    @property
    def action_dim(self) -> int:  # type: ignore[override]
        """``A``."""
        return self.config.action_dim

    @property
    def num_action_chunks(self) -> int:  # type: ignore[override]
        """``K``."""
        return self.config.num_action_chunks

    @property
    def core(self) -> VLACore:
        """The :class:`VLACore` (under the peft wrapper when LoRA is on)."""
        return self.vla.get_base_model() if self._lora_enabled else self.vla

    @property
    def lora_enabled(self) -> bool:
        """Whether LoRA adapters are attached."""
        return self._lora_enabled

    def with_tokenizer(self, tokenizer) -> "OpenVLAOFTPolicy":
        """Attaches the instruction tokenizer (saved with the model); returns ``self``."""
        self.tokenizer = tokenizer
        return self

    def set_action_bounds(self, low: Sequence[float] | torch.Tensor | None,
                          high: Sequence[float] | torch.Tensor | None) -> None:
        """Clip env actions to ``[low, high]`` after un-normalisation (None: no clipping)."""
        self._action_low = None if low is None else torch.as_tensor(low, dtype=torch.float32)
        self._action_high = None if high is None else torch.as_tensor(high, dtype=torch.float32)

    def action_norm_stats(self, unnorm_key: str | None = None) -> dict | None:
        """The action statistics ``{q01, q99, mask}`` for ``unnorm_key`` (default: the
        ``unnorm_key`` attribute; None with a single entry = that entry; no stats = None).

        Raises:
            KeyError: the key is unknown, or several entries exist and no key is given.
        """
        stats = self.config.norm_stats or {}
        key = unnorm_key if unnorm_key is not None else self.unnorm_key
        if not stats:
            if key is not None:
                raise KeyError(f"unnorm_key {key!r} given but the model has no norm_stats")
            return None
        if key is None:
            if len(stats) != 1:
                raise KeyError(f"the model has several norm_stats {sorted(stats)}; set unnorm_key")
            key = next(iter(stats))
        if key not in stats:
            raise KeyError(f"unnorm_key {key!r} not in norm_stats {sorted(stats)}")
        entry = stats[key]
        return entry.get("action", entry) if isinstance(entry, Mapping) else entry

    def _proprio_stats(self) -> dict | None:
        stats = self.config.norm_stats or {}
        if not stats:
            return None
        key = self.unnorm_key if self.unnorm_key is not None else (next(iter(stats)) if len(stats) == 1 else None)
        entry = stats.get(key) if key is not None else None
        return entry.get("proprio") if isinstance(entry, Mapping) else None

    # ------------------------------------------------------------------------------- the forward

    def _encode_images(self, images, wrist_images) -> torch.Tensor:
        cfg = self.config
        core = self.core
        dtype = core.vision_tower.embeddings.patch_embedding.weight.dtype
        size = _size(cfg.vision_config.image_size)
        batch = [images]
        if cfg.num_images_in_input == 2:
            if wrist_images is None:
                raise ValueError("this model takes two images (num_images_in_input=2); pass wrist_images")
            batch.append(wrist_images)
        n = images.shape[0]
        pix01 = torch.cat([preprocess_images(im, size, cfg.center_crop, mean=(0.0,) * 3, std=(1.0,) * 3,
                                             device=self.device) for im in batch])

        def norm(mean, std):
            m = torch.tensor(mean, device=pix01.device).view(1, 3, 1, 1)
            s = torch.tensor(std, device=pix01.device).view(1, 3, 1, 1)
            return ((pix01 - m) / s).to(dtype)

        feats = core.vision_tower(pixel_values=norm(cfg.image_mean, cfg.image_std)).last_hidden_state
        if core.dino_tower is not None:
            dino = core.dino_tower(pixel_values=norm(IMAGENET_MEAN, IMAGENET_STD)).last_hidden_state[:, 1:]
            feats = torch.cat([feats, dino.to(feats.dtype)], dim=-1)
        patches = core.projector(feats)  # [n * num_images, P, H]
        return patches.reshape(len(batch), n, *patches.shape[1:]).transpose(0, 1).flatten(1, 2)

    def _prompt_ids(self, instructions, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.tokenizer is None:
            raise RuntimeError("no tokenizer attached (load with from_pretrained or call with_tokenizer)")
        if instructions is None:
            instructions = [""] * n
        if isinstance(instructions, str):
            instructions = [instructions] * n
        if len(instructions) != n:
            raise ValueError(f"got {len(instructions)} instructions for {n} observations")
        texts = [self.config.prompt_template.format(instruction=str(t).strip().rstrip(".").lower())
                 for t in instructions]
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        width = max(len(x) for x in ids)
        pad = self.tokenizer.pad_token_id or 0
        out = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.bool)
        for i, x in enumerate(ids):  # left-pad: text ends right before the action queries
            if x:
                out[i, width - len(x):] = torch.tensor(x)
                mask[i, width - len(x):] = True
        return out.to(self.device), mask.to(self.device)

    def _forward(self, states=None, images=None, wrist_images=None, instructions=None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(bin_logits [N, K*A, n_bins] fp32, action hidden states [N, K*A, H])``."""
        cfg = self.config
        core = self.core
        if images is None:
            raise ValueError("OpenVLAOFTPolicy needs images [N, H, W, 3]")
        images = to_tensor(images)
        n = images.shape[0]
        lm = core.language_model
        embed = lm.get_input_embeddings()
        dtype = embed.weight.dtype
        bos_id = self.tokenizer.bos_token_id if self.tokenizer is not None else None
        bos = embed(torch.full((n, 1), 1 if bos_id is None else bos_id, dtype=torch.long, device=self.device))
        parts = [bos, self._encode_images(images, wrist_images).to(dtype)]
        if core.proprio_projector is not None:
            if states is None:
                raise ValueError("this model uses proprio (use_proprio); pass states")
            s = to_tensor(states, self.device).float()
            s = normalize_actions(s, self._proprio_stats())
            parts.append(core.proprio_projector(s.to(dtype)).unsqueeze(1))
        text_ids, text_mask = self._prompt_ids(instructions, n)
        parts.append(embed(text_ids))
        num_act = cfg.num_action_tokens
        parts.append(core.action_queries.weight.unsqueeze(0).expand(n, -1, -1).to(dtype))
        inputs = torch.cat(parts, dim=1)
        seq = inputs.shape[1]
        prefix = seq - text_mask.shape[1] - num_act
        valid = torch.cat([torch.ones(n, prefix, dtype=torch.bool, device=self.device), text_mask,
                           torch.ones(n, num_act, dtype=torch.bool, device=self.device)], dim=1)
        position_ids = (valid.long().cumsum(1) - 1).clamp_min(0)
        if cfg.action_attention == "bidirectional":
            idx = torch.arange(seq, device=self.device)
            allowed = (idx.view(1, -1) <= idx.view(-1, 1)).unsqueeze(0) & valid.unsqueeze(1)
            is_act = idx >= seq - num_act
            allowed = allowed | (is_act.view(-1, 1) & is_act.view(1, -1)).unsqueeze(0)
            allowed = allowed | torch.eye(seq, dtype=torch.bool, device=self.device).unsqueeze(0)
            attn = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
            attn = attn.masked_fill(~allowed, torch.finfo(dtype).min).unsqueeze(1)
        else:
            attn = valid.long()
        out = lm.get_decoder()(inputs_embeds=inputs, attention_mask=attn, position_ids=position_ids, use_cache=False)
        hidden = out.last_hidden_state[:, -num_act:]
        head = lm.get_output_embeddings()
        w = head.weight[-cfg.n_action_bins:]
        b = head.bias[-cfg.n_action_bins:] if getattr(head, "bias", None) is not None else None
        logits = F.linear(hidden, w, b).float()
        return logits, hidden

    def _values(self, hidden: torch.Tensor) -> torch.Tensor | None:
        core = self.core
        if core.value_head is None or not self.use_value_head:
            return None
        if self.value_type == "chunk_level":
            return core.value_head(hidden[:, -1]).float().squeeze(-1)
        n = hidden.shape[0]
        last = hidden.view(n, self.num_action_chunks, self.action_dim, -1)[:, :, -1]
        return core.value_head(last).float().squeeze(-1)

    def _output(self, logits: torch.Tensor, hidden: torch.Tensor, bins: torch.Tensor,
                raw: torch.Tensor | None = None) -> PolicyOutput:
        n = logits.shape[0]
        shape = (n, self.num_action_chunks, self.action_dim)
        logp_all = torch.log_softmax(logits / self.temperature, dim=-1)
        logprobs = logp_all.gather(-1, bins.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        actions = unnormalize_actions(self.action_tokenizer.bins_to_actions(bins.detach()).view(shape),
                                      self.action_norm_stats())
        if self._action_low is not None:
            actions = torch.maximum(actions, self._action_low.to(actions.device))
        if self._action_high is not None:
            actions = torch.minimum(actions, self._action_high.to(actions.device))
        if raw is None:
            raw = (bins + self.action_tokenizer.first_id).float().view(shape)
        return PolicyOutput(actions=actions.float(), raw_actions=raw, logprobs=logprobs.view(shape),
                            values=self._values(hidden), entropy=entropy.view(shape))

    # --------------------------------------------------------------------------- the interface

    def act(self, states=None, images=None, wrist_images=None, instructions=None,
            deterministic: bool = False, generator: torch.Generator | None = None) -> PolicyOutput:
        """See :meth:`EmbodiedPolicy.act`; ``raw_actions`` are the sampled token ids as float."""
        logits, hidden = self._forward(states, images, wrist_images, instructions)
        if deterministic:
            bins = logits.argmax(-1)
        else:
            probs = torch.softmax(logits.detach() / self.temperature, dim=-1)
            dev = generator.device if generator is not None else probs.device
            flat = torch.multinomial(probs.view(-1, probs.shape[-1]).to(dev), 1, generator=generator)
            bins = flat.view(probs.shape[:-1]).to(probs.device)
        return self._output(logits, hidden, bins)

    def evaluate(self, raw_actions: torch.Tensor, states=None, images=None, wrist_images=None,
                 instructions=None) -> PolicyOutput:
        """See :meth:`EmbodiedPolicy.evaluate`; ``raw_actions`` are token ids (float or int)."""
        logits, hidden = self._forward(states, images, wrist_images, instructions)
        raw = to_tensor(raw_actions, logits.device)
        n = logits.shape[0]
        if tuple(raw.shape) != (n, self.num_action_chunks, self.action_dim):
            raise ValueError(f"raw_actions must be {(n, self.num_action_chunks, self.action_dim)}, "
                             f"got {tuple(raw.shape)}")
        bins = self.action_tokenizer.token_ids_to_bins(raw).view(n, -1)
        return self._output(logits, hidden, bins, raw=raw)

    def value(self, states=None, images=None, wrist_images=None, instructions=None) -> torch.Tensor:
        """See :meth:`EmbodiedPolicy.value`."""
        if self.core.value_head is None or not self.use_value_head:
            raise RuntimeError("this model has no value head in use (add_value_head=False)")
        _, hidden = self._forward(states, images, wrist_images, instructions)
        return self._values(hidden)

    def forward(self, mode: str = "act", **kwargs: Any):
        """Dispatches to ``act`` / ``evaluate`` / ``value`` (see :class:`EmbodiedPolicy`)."""
        return EmbodiedPolicy.forward(self, mode, **kwargs)

    # ------------------------------------------------------------------------------------ LoRA

    def enable_lora(self, rank: int = 32, alpha: float | None = None, lora_path: str | None = None,
                    target_modules: Sequence[str] | None = None) -> None:
        """Attaches LoRA adapters (fresh, or loaded from ``lora_path``) and freezes the rest.

        Fresh adapters: rank ``rank``, ``lora_alpha = alpha or rank``, no dropout (so ``act`` and
        ``evaluate`` agree), on :meth:`VLACore.lora_target_names` unless ``target_modules`` is
        given; B starts at zero, so outputs are unchanged until training moves them. The value
        head is trained in full. ``lora_path`` loads a folder written by
        :meth:`save_lora_adapter` (its own rank and targets), trainable.

        Raises:
            RuntimeError: LoRA is already enabled.
            ImportError: ``peft`` is not installed (``pip install 'rlinf[embodied]'``).
        """
        if self._lora_enabled:
            raise RuntimeError("LoRA is already enabled")
        from peft import LoraConfig, PeftModel, get_peft_model

        if lora_path is not None:
            if not (Path(lora_path) / "adapter_config.json").is_file():
                raise FileNotFoundError(f"lora_path {lora_path!r} has no adapter_config.json")
            self.vla = PeftModel.from_pretrained(self.vla, str(lora_path), is_trainable=True)
        else:
            lora_cfg = LoraConfig(
                r=int(rank), lora_alpha=float(alpha if alpha is not None else rank), lora_dropout=0.0,
                target_modules=list(target_modules) if target_modules else self.vla.lora_target_names(),
                modules_to_save=["value_head"] if self.vla.value_head is not None and self.use_value_head else None,
            )
            self.vla = get_peft_model(self.vla, lora_cfg)
        self._lora_enabled = True

    def save_lora_adapter(self, path: str | Path) -> None:
        """Writes the adapter (and the value head) to ``path``; ``enable_lora(lora_path=path)`` on
        the same base model restores this policy."""
        if not self._lora_enabled:
            raise RuntimeError("LoRA is not enabled")
        self.vla.save_pretrained(str(path))

    def merged_state_dict(self) -> dict[str, torch.Tensor]:
        """The state dict of the equivalent plain model (LoRA deltas merged into the base
        weights, the trained value head in place); the plain state dict without LoRA."""
        if not self._lora_enabled:
            return {k: v for k, v in self.state_dict().items()}
        from peft.tuners.lora import LoraLayer

        core = self.core
        out: dict[str, torch.Tensor] = {}
        for name, module in core.named_modules():
            if isinstance(module, LoraLayer):
                base = module.get_base_layer()
                delta = sum(module.get_delta_weight(a) for a in module.active_adapters)
                out[f"{name}.weight"] = (base.weight + delta).detach()
                if getattr(base, "bias", None) is not None:
                    out[f"{name}.bias"] = base.bias.detach()
        for key, value in core.state_dict().items():
            if ".lora_" in key or ".base_layer." in key or ".original_module." in key:
                continue
            out[key.replace(".modules_to_save.default.", ".")] = value
        return {f"{self.base_model_prefix}.{k}": v for k, v in out.items()}

    # ---------------------------------------------------------------------------- save / load

    def save_pretrained(self, save_directory: str | Path, **kwargs: Any) -> None:
        """HF ``save_pretrained`` plus the instruction tokenizer; with LoRA, the merged weights."""
        if self._lora_enabled and kwargs.get("state_dict") is None:
            kwargs["state_dict"] = self.merged_state_dict()
        super().save_pretrained(save_directory, **kwargs)
        if self.tokenizer is not None:
            save_instruction_tokenizer(self.tokenizer, save_directory)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, *args: Any, **kwargs: Any):
        """HF ``from_pretrained`` from a local folder, plus its instruction tokenizer."""
        kwargs.setdefault("local_files_only", True)
        model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        path = Path(pretrained_model_name_or_path)
        if (path / "tokenizer.json").is_file():
            model.tokenizer = load_instruction_tokenizer(path)
        return model


try:  # AutoConfig / AutoModel.from_pretrained on such a folder
    AutoConfig.register(MODEL_TYPE, OpenVLAOFTConfig)
    AutoModel.register(OpenVLAOFTConfig, OpenVLAOFTPolicy)
except ValueError:  # already registered (module reloaded)
    pass
