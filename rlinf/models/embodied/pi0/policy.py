"""A loaded π0 / π0.5 checkpoint with its input pipeline: :class:`Pi0Policy`.

It owns the :class:`~.modeling.Pi0Model`, the PaliGemma tokenizer, the statistics of one robot
(asset id) and the folder facts needed to write the checkpoint back. :meth:`Pi0Policy.prepare`
turns raw observations (camera images, instructions, raw state) into
:class:`~.modeling.Pi0Inputs`; :meth:`Pi0Policy.predict_action` samples and un-normalises a chunk.
Build it with :func:`rlinf.models.embodied.pi0.loading.load_pi0`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rlinf.models.embodied.pi0.modeling import Pi0Inputs, Pi0Model
from rlinf.models.embodied.pi0.normalization import NormStats
from rlinf.models.embodied.pi0.processing import PaliGemmaTokenizer, camera_batch, discretize_state

MODEL_TYPES = ("pi0", "pi05")


@dataclass
class Pi0Options:
    """How a checkpoint is run (the folder decides the rest).

    Attributes:
        model_type: ``pi0`` / ``pi05``; must match the checkpoint (None: from the tensors).
        asset_id: which statistics un-normalise actions (None: the only set).
        action_horizon: ``H`` (None: config.json's ``action_horizon`` / ``chunk_size``, else 50).
        max_token_len: prompt length (None: LeRobot's ``tokenizer_max_length``, else openpi's
            48 for π0 / 200 for π0.5).
        discrete_state_input: π0.5's state-in-prompt format (None: True, openpi's ``Pi0Config``
            default and LeRobot's only format; openpi's ``pi05_libero`` sets False).
        tokenizer_path: the PaliGemma SentencePiece ``.model`` (None: ``paligemma_tokenizer.model``
            or ``tokenizer.model`` in the folder).
        num_steps: Euler steps of :meth:`Pi0Policy.predict_action`.
        vision_heads: SigLIP heads (not visible in the tensors; 16 in every release).
    """

    model_type: str | None = None
    asset_id: str | None = None
    action_horizon: int | None = None
    max_token_len: int | None = None
    discrete_state_input: bool | None = None
    tokenizer_path: str | None = None
    num_steps: int = 10
    vision_heads: int = 16

    def __post_init__(self):
        if self.model_type is not None and self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {self.model_type!r}")
        if self.num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {self.num_steps}")


class Pi0Policy(nn.Module):
    """A π0 / π0.5 checkpoint ready to act (see the module docstring).

    Attributes:
        model: the network.
        tokenizer: the PaliGemma tokenizer.
        stats: the chosen statistics (None: actions stay normalised, the state is used as given).
        cameras: the camera slot names (openpi's three, or LeRobot's VISUAL features).
        prompt_format: see :mod:`.processing`.
        max_token_len: prompt length.
        layout: ``openpi`` / ``rlinf`` / ``lerobot`` (what saving writes).
        extras: RLinf's ``value_head.*`` / ``noise_head.*`` tensors (names as stored), for the
            caller.
        carried: tensors no forward uses (``gemma_expert.lm_head``, a second copy of the tied
            embedding), written back unchanged.
    """

    def __init__(self, model: Pi0Model, tokenizer: PaliGemmaTokenizer, stats: NormStats | None,
                 cameras: Sequence[str], prompt_format: str, max_token_len: int, layout: str,
                 num_steps: int = 10):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.stats = stats
        self.cameras = list(cameras)
        self.prompt_format = prompt_format
        self.max_token_len = int(max_token_len)
        self.layout = layout
        self.num_steps = num_steps
        self.extras: dict[str, torch.Tensor] = {}
        self.carried: dict[str, torch.Tensor] = {}
        self.embed_names: list[str] = []
        self.config: dict[str, Any] = {}
        self.source_path = None
        self.source_dtype = torch.float32
        self.asset_id: str | None = None

    @property
    def model_type(self) -> str:
        """``pi0`` or ``pi05``."""
        return "pi05" if self.model.spec.pi05 else "pi0"

    @property
    def action_dim(self) -> int:
        """Width of the un-normalised actions (the statistics'), else the model's padded width."""
        return self.stats.action_dim if self.stats is not None else self.model.spec.action_dim

    def prepare(self, cameras: Sequence, instructions: Sequence[str], states=None) -> Pi0Inputs:
        """Raw observations -> model inputs.

        Args:
            cameras: per camera slot ``[N, H, W, 3]`` uint8 images or None (absent), in the order
                of :attr:`cameras`; fewer entries than slots leave the rest absent.
            instructions: ``N`` task strings.
            states: ``[N, D]`` raw robot state (π0, and π0.5 with the state prompt; π0.5 with π0's
                prompt does not read it, so it is ignored there), or None.

        Raises:
            ValueError: a missing state, a state whose length ``D`` differs from the checkpoint's
                state statistics (both lengths named) or is wider than the model's, mismatched
                batch sizes.
        """
        spec = self.model.spec
        images, masks = camera_batch(list(cameras), len(self.cameras), spec.vision.image_size)
        n = images.shape[0]
        if len(instructions) != n:
            raise ValueError(f"{len(instructions)} instructions for {n} images")
        needs_state = not spec.pi05 or self.prompt_format == "pi05_state"
        width = spec.state_dim if not spec.pi05 else spec.action_dim
        padded = torch.zeros(n, width)
        bins = None
        if states is not None and needs_state:
            raw = torch.as_tensor(states, dtype=torch.float32).reshape(n, -1)
            norm = self.stats.normalize_state(raw) if self.stats is not None else raw
            if norm.shape[1] > width:
                raise ValueError(f"the state has {norm.shape[1]} values; the model reads at most {width}")
            padded[:, : norm.shape[1]] = norm
            bins = discretize_state(norm)
        elif needs_state:
            raise ValueError(f"{self.model_type} with the {self.prompt_format} prompt needs the robot state")
        tokens, token_mask = self.tokenizer.batch(instructions, self.prompt_format, self.max_token_len, bins)
        return Pi0Inputs(images=images, image_masks=masks, tokens=tokens, token_mask=token_mask, state=padded)

    @torch.no_grad()
    def predict_action(self, cameras: Sequence, instructions: Sequence[str], states=None,
                       num_steps: int | None = None, noise: torch.Tensor | None = None,
                       generator: torch.Generator | None = None) -> torch.Tensor:
        """Samples a chunk and un-normalises it: ``[N, H, action_dim]`` fp32 (normalised and padded
        when the folder has no statistics).

        Args:
            cameras, instructions, states: see :meth:`prepare`.
            num_steps: Euler steps (default: the options').
            noise: the initial noise ``[N, H, A]`` (default: drawn with ``generator``).
            generator: CPU generator for the noise (a seed gives the same chunk on any device).
        """
        device = next(self.model.parameters()).device
        inputs = self.prepare(cameras, instructions, states).to(device)
        x = self.model.sample_actions(inputs, noise=noise, num_steps=num_steps or self.num_steps,
                                      generator=generator)
        return self.stats.unnormalize_actions(x.cpu()) if self.stats is not None else x.cpu()

    def save_pretrained(self, out_dir, dtype: torch.dtype | None = None):
        """Writes the checkpoint in the layout it was loaded from (see
        :func:`rlinf.models.embodied.pi0.loading.save_pi0`)."""
        # lazy: breaks the cycle policy <-> loading (loading builds Pi0Policy)
        from rlinf.models.embodied.pi0.loading import save_pi0

        return save_pi0(self, out_dir, dtype=dtype)
