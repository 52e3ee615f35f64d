"""The interface every embodied policy implements, and helpers the Gaussian and VLA policies share.

An embodied policy maps a batch of ``N`` observations to a chunk of ``K`` actions of ``A``
dimensions each (``K = num_action_chunks``, ``A = action_dim``). Three calls:

* :meth:`EmbodiedPolicy.act` samples (or picks greedily) an action chunk and returns a
  :class:`PolicyOutput`: env actions ``[N, K, A]`` ready for ``env.step``, the raw actions the
  log-probs are defined on, per-dimension log-probs (one "token" per action dimension), values and
  entropy.
* :meth:`EmbodiedPolicy.evaluate` recomputes differentiable log-probs / values / entropy of given
  ``raw_actions`` (the PPO update). For the same weights and inputs its log-probs equal the ones
  :meth:`~EmbodiedPolicy.act` returned.
* :meth:`EmbodiedPolicy.value` gives bootstrap values.

Observations are keyword arguments, all optional (a policy reads the ones it needs): ``states``
``[N, D]`` float, ``images`` ``[N, H, W, 3]`` uint8 (main camera), ``wrist_images`` like
``images``, ``instructions`` ``list[str]``.

Values are ``[N]`` when ``value_type`` is ``chunk_level`` (one value per action chunk) and
``[N, K]`` when it is ``action_level`` (one per action of the chunk).

Example:
    >>> import torch
    >>> gaussian_entropy(torch.zeros(2)).tolist()  # 0.5 * log(2 pi e) per dimension at std 1
    [1.4189385175704956, 1.4189385175704956]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

ValueType = Literal["chunk_level", "action_level"]
VALUE_TYPES = ("chunk_level", "action_level")

#: OpenVLA's centre crop keeps 90% of the image area (side ``sqrt(0.9)``) before resizing.
CENTER_CROP_AREA = 0.9

_LOG_2PI = math.log(2.0 * math.pi)


@dataclass
class PolicyOutput:
    """What :meth:`EmbodiedPolicy.act` / :meth:`EmbodiedPolicy.evaluate` return.

    Attributes:
        actions: ``[N, K, A]`` float32 env actions, un-normalised and clipped to the action
            bounds, ready for ``env.step``.
        raw_actions: ``[N, K, A]`` what the log-probs are evaluated on: the Gaussian sample before
            clipping (continuous policies) or the sampled token ids as float (VLA).
        logprobs: ``[N, K, A]`` fp32 log-prob of each action dimension ("token").
        values: ``[N]`` (chunk_level) or ``[N, K]`` (action_level); None without a value head.
        entropy: ``[N, K, A]`` entropy of each action dimension's distribution, or None.
    """

    actions: torch.Tensor
    raw_actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor | None = None
    entropy: torch.Tensor | None = None

    def detach(self) -> PolicyOutput:
        """A copy with every tensor detached (for storing a rollout).

        Returns:
            The detached output.
        """
        return PolicyOutput(
            *(None if t is None else t.detach() for t in
              (self.actions, self.raw_actions, self.logprobs, self.values, self.entropy))
        )


@dataclass(frozen=True)
class ObsSpec:
    """What the environment gives a policy, so :func:`~rlinf.models.build_policy` can size it.

    Attributes:
        state_dim: length of the proprioceptive / state vector (0 = none).
        image_shape: ``(H, W, C)`` of the main camera image, or None (state-only env).
        has_wrist: a wrist camera image of the same shape comes with every observation.
        action_low: lower action bounds, one per action dimension; None = -1 everywhere.
        action_high: upper action bounds; None = +1 everywhere.

    Example:
        >>> ObsSpec(state_dim=42).image_shape is None
        True
    """

    state_dim: int = 0
    image_shape: tuple[int, int, int] | None = None
    has_wrist: bool = False
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None

    def bounds(self, action_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The action bounds as two float32 tensors ``[action_dim]`` (default ``[-1, 1]``).

        Args:
            action_dim: number of action dimensions.

        Returns:
            ``(low, high)``.

        Raises:
            ValueError: a bound's length differs from ``action_dim`` or low > high.
        """
        low = torch.full((action_dim,), -1.0) if self.action_low is None else torch.tensor(
            self.action_low, dtype=torch.float32)
        high = torch.full((action_dim,), 1.0) if self.action_high is None else torch.tensor(
            self.action_high, dtype=torch.float32)
        if low.shape != (action_dim,) or high.shape != (action_dim,):
            raise ValueError(f"action bounds must have {action_dim} entries, got "
                             f"{tuple(low.shape)} and {tuple(high.shape)}")
        if bool((low > high).any()):
            raise ValueError("action_low must be <= action_high")
        return low, high


class EmbodiedPolicy(nn.Module):
    """Base class of the embodied policies (see the module docstring for the conventions).

    Subclasses set ``action_dim``, ``num_action_chunks`` and ``value_type`` and implement
    :meth:`act`, :meth:`evaluate` and :meth:`value`. ``forward(mode=..., **obs)`` dispatches to
    them, so wrappers that hook ``forward`` (DDP, FSDP) see every call.

    Attributes:
        action_dim: ``A``, dimensions per action.
        num_action_chunks: ``K``, actions per chunk.
        value_type: ``chunk_level`` (values ``[N]``) or ``action_level`` (values ``[N, K]``).
        do_sample: the config's ``do_sample``, for callers that choose ``deterministic`` from it;
            ``act(deterministic=...)`` alone decides whether a call samples.
        global_step: the training step of the weights (:meth:`set_global_step`; 0 at start).

    Example:
        >>> from rlinf.models.embodied.mlp_policy import MLPPolicy, MLPPolicyConfig
        >>> policy = MLPPolicy(MLPPolicyConfig(state_dim=3, action_dim=2, hidden_sizes=(8,)))
        >>> isinstance(policy, EmbodiedPolicy), policy(mode="value", states=torch.zeros(4, 3)).shape
        (True, torch.Size([4]))
    """

    action_dim: int
    num_action_chunks: int
    value_type: str = "chunk_level"
    do_sample: bool = True
    global_step: int = 0

    def set_global_step(self, step: int) -> None:
        """Records the training step whose weights the policy holds (the rollout worker calls it
        at every weight sync, RLinf's ``set_global_step``); a policy with a schedule over
        training (the flow policies' ``noise_anneal``) reads ``global_step``, the others ignore it."""
        self.global_step = int(step)

    def act(self, states=None, images=None, wrist_images=None, instructions=None,
            deterministic: bool = False, generator: torch.Generator | None = None) -> PolicyOutput:
        """Samples (or, with ``deterministic``, picks the mode of) an action chunk.

        Args:
            states: ``[N, D]`` float.
            images: ``[N, H, W, 3]`` uint8, main camera.
            wrist_images: like ``images``, or None.
            instructions: ``N`` task strings, or None.
            deterministic: take the mean / argmax instead of sampling.
            generator: random generator for the sample (reproducible rollouts).

        Returns:
            A :class:`PolicyOutput`.
        """
        raise NotImplementedError

    def evaluate(self, raw_actions: torch.Tensor, states=None, images=None, wrist_images=None,
                 instructions=None) -> PolicyOutput:
        """Differentiable log-probs, values and entropy of ``raw_actions`` ``[N, K, A]``.

        Args:
            raw_actions: the ``raw_actions`` an earlier :meth:`act` returned.
            states, images, wrist_images, instructions: the observations of that call.

        Returns:
            A :class:`PolicyOutput` whose ``raw_actions`` is the input.
        """
        raise NotImplementedError

    def value(self, states=None, images=None, wrist_images=None, instructions=None) -> torch.Tensor:
        """Bootstrap values ``[N]`` or ``[N, K]`` (see ``value_type``).

        Args:
            states, images, wrist_images, instructions: the observations.

        Returns:
            The values, fp32.
        """
        raise NotImplementedError

    def forward(self, mode: str = "act", **kwargs: Any):
        """Dispatches to ``act`` / ``evaluate`` / ``value`` by ``mode``; every differentiable
        tensor it returns is a tensor of its own, never a view (:func:`own_outputs`).

        Args:
            mode: ``act``, ``evaluate`` or ``value``.
            **kwargs: the arguments of that method.

        Returns:
            What the method returns.
        """
        if mode == "act":
            return own_outputs(self.act(**kwargs))
        if mode == "evaluate":
            return own_outputs(self.evaluate(**kwargs))
        if mode == "value":
            return own_outputs(self.value(**kwargs))
        raise ValueError(f"mode must be act, evaluate or value, got {mode!r}")


def own_outputs(out: PolicyOutput | torch.Tensor | None) -> PolicyOutput | torch.Tensor | None:
    """``out`` with each grad-requiring tensor that is a view (a value head's ``squeeze(-1)``,
    a ``view(N, K, A)`` of per-token log-probs) replaced by a copy.

    FSDP2 hooks the tensors a wrapped module's forward returns to gather the weights before
    backward; an in-place op on a returned view (``x += y``) would drop that hook and skip the
    gather, so FSDP2 warns "returned a view tensor". A policy's forward returns its own tensors,
    which leaves nothing to warn about and nothing to break. Gradients are unchanged (a copy's
    gradient is the identity).

    >>> v = torch.ones(4, 1, requires_grad=True) * 2
    >>> own_outputs(v.squeeze(-1))._is_view(), v.squeeze(-1)._is_view()
    (False, True)
    >>> out = own_outputs(PolicyOutput(actions=torch.zeros(4, 1, 1), raw_actions=torch.zeros(4, 1, 1),
    ...                                logprobs=v.view(4, 1, 1), values=v.squeeze(-1)))
    >>> out.logprobs._is_view(), out.values._is_view(), out.values.tolist()
    (False, False, [2.0, 2.0, 2.0, 2.0])
    """
    if isinstance(out, torch.Tensor):
        return out.clone() if out.requires_grad and out._is_view() else out
    if isinstance(out, PolicyOutput):
        for f in fields(out):
            value = getattr(out, f.name)
            if isinstance(value, torch.Tensor) and value.requires_grad and value._is_view():
                setattr(out, f.name, value.clone())
    return out


# ---------------------------------------------------------------------------------------------
# Helpers shared by the policies.


def check_value_type(value_type: str | None) -> str:
    """``value_type`` with None meaning ``chunk_level``; raises ValueError on anything else.

    >>> check_value_type(None)
    'chunk_level'
    """
    value_type = value_type or "chunk_level"
    if value_type not in VALUE_TYPES:
        raise ValueError(f"value_type must be one of {VALUE_TYPES}, got {value_type!r}")
    return value_type


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Element-wise log-density of ``N(mean, exp(log_std)^2)`` at ``x`` (fp32).

    >>> round(gaussian_log_prob(torch.zeros(1), torch.zeros(1), torch.zeros(1)).item(), 6)
    -0.918939
    """
    x, mean, log_std = x.float(), mean.float(), log_std.float()
    return -0.5 * ((x - mean) * torch.exp(-log_std)) ** 2 - log_std - 0.5 * _LOG_2PI


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Element-wise entropy ``0.5 * log(2 pi e) + log_std`` of a Gaussian (fp32)."""
    return 0.5 + 0.5 * _LOG_2PI + log_std.float()


def to_tensor(x: Any, device: torch.device | None = None) -> torch.Tensor:
    """``x`` (tensor, numpy array or nested list) as a tensor on ``device``."""
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    return t if device is None else t.to(device)


def preprocess_images(images: Any, size: Sequence[int], center_crop: bool = False,
                      mean: Sequence[float] = (0.5, 0.5, 0.5), std: Sequence[float] = (0.5, 0.5, 0.5),
                      device: torch.device | None = None, dtype: torch.dtype = torch.float32,
                      mode: str = "bilinear") -> torch.Tensor:
    """Camera images ``[N, H, W, C]`` (uint8, or float on the same 0..255 scale) -> model input.

    Steps: scale to [0, 1]; optional centre crop keeping :data:`CENTER_CROP_AREA` of the area (as
    OpenVLA at evaluation); antialiased resize (``mode``: bilinear or bicubic, OpenVLA's towers
    use bicubic) to ``size``; ``(x - mean) / std`` per channel.

    Args:
        images: ``[N, H, W, C]``.
        size: ``(h, w)`` (or one int for a square).
        center_crop: crop the centre first.
        mean, std: per-channel normalisation.
        device, dtype: of the result.
        mode: interpolation of the resize.

    Returns:
        ``[N, C, h, w]`` tensor.

    >>> preprocess_images(torch.full((2, 10, 12, 3), 255, dtype=torch.uint8), (4, 4)).shape
    torch.Size([2, 3, 4, 4])
    """
    x = to_tensor(images, device)
    if x.dim() != 4:
        raise ValueError(f"images must be [N, H, W, C], got shape {tuple(x.shape)}")
    x = x.permute(0, 3, 1, 2).float() / 255.0
    if center_crop:
        h, w = x.shape[-2:]
        side = math.sqrt(CENTER_CROP_AREA)
        ch, cw = max(1, round(h * side)), max(1, round(w * side))
        top, left = (h - ch) // 2, (w - cw) // 2
        x = x[..., top:top + ch, left:left + cw]
    size = (int(size), int(size)) if isinstance(size, int) else tuple(int(s) for s in size)
    if tuple(x.shape[-2:]) != size:
        x = F.interpolate(x, size=size, mode=mode, align_corners=False, antialias=True)
    m = torch.tensor(mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return ((x - m) / s).to(dtype)


def layer_init(layer: nn.Module, std: float = math.sqrt(2.0), bias: float = 0.0) -> nn.Module:
    """Orthogonal weight init with gain ``std`` and constant bias (CleanRL's ``layer_init``)."""
    nn.init.orthogonal_(layer.weight, std)
    if getattr(layer, "bias", None) is not None:
        nn.init.constant_(layer.bias, bias)
    return layer


def mlp(in_dim: int, hidden_sizes: Sequence[int], out_dim: int, activation: type[nn.Module] = nn.Tanh,
        out_std: float = 1.0) -> nn.Sequential:
    """An MLP with orthogonal init: hidden layers gain ``sqrt(2)``, the output layer ``out_std``.

    >>> mlp(3, (8, 8), 2)(torch.zeros(5, 3)).shape
    torch.Size([5, 2])
    """
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden_sizes:
        layers += [layer_init(nn.Linear(d, h)), activation()]
        d = h
    layers.append(layer_init(nn.Linear(d, out_dim), std=out_std))
    return nn.Sequential(*layers)
