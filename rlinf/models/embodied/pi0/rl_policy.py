"""π0 / π0.5 as an embodied policy trained with πRL (``model_type: pi0`` / ``pi05``).

:class:`Pi0RLPolicy` wraps a loaded :class:`~.policy.Pi0Policy` (the checkpoint, its tokenizer and
statistics) behind :class:`~rlinf.models.embodied.base.EmbodiedPolicy`, with the log-probabilities of
:mod:`rlinf.algorithms.flow_logprob` (the same functions and ``raw_actions`` layout as ``flow_mlp``):

* Observations: ``images`` fill the first camera slot (openpi's ``base_0_rgb``), ``wrist_images``
  the second (``left_wrist_0_rgb``) when ``num_images`` is 2; the rest are absent (masked), as
  openpi's LIBERO and RLinf's ManiSkill inputs. ``instructions`` are the prompts; ``states`` the raw
  robot state (normalised with the checkpoint's statistics; π0's state token, π0.5's state prompt
  when ``discrete_state_input``).
* One call runs the PaliGemma prefix once (:meth:`Pi0Model.prefix_cache`) and the action expert
  once per denoising step against it (:meth:`Pi0Model.velocity_cached`): ``x_0 ~ N(0, I)`` ``[B, H,
  32]`` is denoised in ``num_steps`` steps. Flow-SDE: one step ``k`` (the same for the batch) is
  stochastic with diffusion ``noise_level`` (with ``noise_anneal`` RLinf's linear schedule over
  ``noise_params`` at the training step :meth:`set_global_step` gave); Flow-Noise: every step,
  with the std of a noise head (RLinf's ``ExploreNoiseNet``: ``tanh`` MLP 128, 64 on each action
  token's expert output, squashed into ``noise_logvar_range``). ``deterministic`` runs the ODE (no
  stochastic step) from random noise, as openpi and RLinf's evaluation.
* ``logprobs`` ``[B, K, A]``: the chain's element-wise log-prob (:func:`combine_logprobs`, joint for
  ``joint_logprob``) on the first ``K = action_chunk`` actions and ``A = action_env_dim`` dimensions
  of the normalised, padded chunk (RLinf slices the same way); ``algorithm.logprob_type``
  ``chunk_level`` sums them into one ratio per chunk, ``token_level`` keeps one per element.
  ``entropy`` (Flow-Noise only) is the mean Gaussian entropy of the stochastic steps.
* ``raw_actions`` ``[B, K, W]``: the whole chain ``[B, S+1, H, 32]`` and each step's noise level
  (0: deterministic; the Flow-SDE level it was sampled with, which ``noise_anneal`` moves over
  training; :func:`pack_chain`); :meth:`evaluate` unpacks them and recomputes the same log-probs
  (the prefix once, then the expert once over the stochastic ``(row, step)`` pairs gathered,
  :func:`chain_logprob_gathered`: Flow-SDE one expert pass per row instead of one per step that
  any row sampled; Flow-Noise in chunks of ``B`` pairs).
* Env actions: the first ``K`` rows of ``x_S`` un-normalised with the checkpoint's statistics, cut
  to ``A`` dimensions; ``extra_delta_transform`` adds the raw state's first 6 values to the first 6
  action dimensions (openpi's ``AbsoluteActions`` of the ``pi0_libero`` preset); clipped to the
  env's bounds.
* Value head (RLinf's ``ValueHead``: ReLU MLP, names ``value_head.mlp.*``): on the mean of the
  expert's action-token outputs at the chain's first step (``x_0``, ``t = 1``), or with
  ``value_after_vlm`` on the mean of the VLM's valid prefix outputs. Both are functions of what
  the rollout stores (the observation and ``x_0``), so :meth:`evaluate` recomputes the rollout's
  values exactly; ``detach_critic_input`` stops the critic's gradient at that input.
  :meth:`value` (bootstrap values) draws a fresh ``x_0``.
* ``train_expert_only`` freezes the PaliGemma part (SigLIP, projector, Gemma): the prefix runs
  without gradients, the expert, its projections and the heads train.

RLinf's ``value_head.*`` / ``noise_head.*`` tensors of an RLinf folder (``Pi0Policy.extras``) are
loaded into the heads (their sizes read from the tensors); without them the heads start fresh.
:meth:`save_pretrained` writes the checkpoint in the layout it was loaded from with the heads as
those tensors.

Example (a tiny checkpoint in RLinf's real layout):
    >>> import tempfile, torch
    >>> from rlinf.models.embodied.pi0 import Pi0Options, load_pi0
    >>> from rlinf.models.embodied.pi0.tiny import TINY_ASSET_ID, write_tiny_pi0
    >>> tmp = tempfile.TemporaryDirectory()
    >>> pi0 = load_pi0(write_tiny_pi0(tmp.name, layout="rlinf"), Pi0Options(asset_id=TINY_ASSET_ID))
    >>> policy = Pi0RLPolicy(pi0, Pi0RLConfig(action_chunk=2, action_env_dim=7, num_steps=3))
    >>> obs = dict(states=torch.zeros(2, 8), images=torch.zeros(2, 16, 16, 3, dtype=torch.uint8),
    ...            instructions=["pick up the cube"] * 2)
    >>> out = policy.act(**obs, generator=torch.Generator().manual_seed(0))
    >>> out.actions.shape, out.logprobs.shape, out.values.shape
    (torch.Size([2, 2, 7]), torch.Size([2, 2, 7]), torch.Size([2]))
    >>> bool(torch.allclose(policy.evaluate(out.raw_actions, **obs).logprobs, out.logprobs, atol=1e-4))
    True
    >>> tmp.cleanup()
"""

from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rlinf.algorithms.flow_logprob import (
    NOISE_METHODS,
    chain_logprob_gathered,
    flow_sde_level,
    pack_chain,
    sample_chain,
    squashed_std,
    stochastic_mask,
    unpack_chain,
    unpack_step_levels,
)
from rlinf.models.embodied.base import EmbodiedPolicy, PolicyOutput, to_tensor
from rlinf.models.embodied.pi0.modeling import Pi0Inputs
from rlinf.models.embodied.pi0.policy import Pi0Policy

#: openpi's ``AbsoluteActions(make_bool_mask(6, -1))``: the first 6 action dimensions are deltas of
#: the first 6 state values (``pi0_libero``'s ``extra_delta_transform``).
DELTA_DIMS = 6
#: RLinf's value head widths: its π0.5 LIBERO / ManiSkill presets, and the others.
VALUE_SIZES = {"pi05": (1024, 512, 256), "pi0": (512, 256, 128)}
#: RLinf's noise head widths (``ExploreNoiseNet(hidden_dims=[128, 64])``).
NOISE_SIZES = (128, 64)


class Pi0HeadError(ValueError):
    """Stored head tensors that do not fit the configuration; ``key`` names the ``actor.model``
    key at fault."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Pi0RLConfig:
    """How :class:`Pi0RLPolicy` samples and what it trains (RLinf's ``actor.model`` names).

    Attributes:
        action_chunk: ``K``, actions per call sent to the env (the first ``K`` of the ``H``).
        action_env_dim: ``A``, the env's action dimensions (the first ``A`` of the padded 32).
        num_steps: denoising steps ``S``.
        noise_method: flow_sde or flow_noise.
        noise_level: Flow-SDE diffusion ``a`` (without ``noise_anneal``).
        noise_anneal: the Flow-SDE level follows :func:`~rlinf.algorithms.flow_logprob.annealed_noise_level`
            over ``noise_params`` ``(start, end, anneal_steps)`` at the policy's ``global_step``.
        noise_params: ``(start, end, anneal_steps)`` of ``noise_anneal`` (RLinf's default).
        noise_logvar_range: Flow-Noise ``(min_std, max_std)``.
        joint_logprob: log-prob = mean over ``[x_0, stochastic steps]``.
        ignore_last: Flow-SDE never samples the last step.
        add_value_head: build the critic.
        value_after_vlm: the critic reads the VLM's prefix output instead of the expert's.
        detach_critic_input: the critic's gradient stops at its input.
        train_expert_only: freeze SigLIP, the projector and the Gemma VLM.
        num_images: camera slots filled from the env (1: main camera, 2: + wrist).
        extra_delta_transform: add the raw state's first 6 values to the first 6 action dims.
        value_hidden_sizes: the critic's widths (None: RLinf's by model type, or the stored head's).
        action_low, action_high: env bounds the actions are clipped to (None: [-1, 1]).
    """

    action_chunk: int = 5
    action_env_dim: int = 7
    num_steps: int = 4
    noise_method: str = "flow_sde"
    noise_level: float = 0.5
    noise_anneal: bool = False
    noise_params: tuple[float, float, int] = (0.7, 0.3, 400)
    noise_logvar_range: tuple[float, float] = (0.08, 0.16)
    joint_logprob: bool = False
    ignore_last: bool = False
    add_value_head: bool = True
    value_after_vlm: bool = False
    detach_critic_input: bool = False
    train_expert_only: bool = False
    num_images: int = 1
    extra_delta_transform: bool = False
    value_hidden_sizes: tuple[int, ...] | None = None
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None


# ---- RLinf's heads, under its module names -------------------------------------------------------


class ValueHead(nn.Module):
    """RLinf's ``ValueHead``: ``mlp`` = ``[Linear, ReLU] x n, Linear(-> 1)`` (kaiming fan-out init,
    the last layer N(0, 0.02), zero biases)."""

    def __init__(self, in_dim: int, hidden_sizes: Sequence[int]):
        super().__init__()
        layers: list[nn.Module] = []
        d = in_dim
        for h in hidden_sizes:
            layers += [nn.Linear(d, h), nn.ReLU()]
            d = h
        layers.append(nn.Linear(d, 1))
        self.mlp = nn.Sequential(*layers)
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                if m is self.mlp[-1]:
                    nn.init.normal_(m.weight, std=0.02)
                else:
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


class _MLP(nn.Module):
    """RLinf's ``MLP`` layout: ``moduleList[i]`` = ``Sequential(linear_1, act_1)``."""

    def __init__(self, dims: Sequence[int]):
        super().__init__()
        self.moduleList = nn.ModuleList()  # RLinf's parameter names
        for i in range(len(dims) - 1):
            act = nn.Tanh() if i < len(dims) - 2 else nn.Identity()
            self.moduleList.append(nn.Sequential(OrderedDict(linear_1=nn.Linear(dims[i], dims[i + 1]), act_1=act)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.moduleList:
            x = m(x)
        return x


class NoiseHead(nn.Module):
    """RLinf's ``ExploreNoiseNet`` (``learn`` schedule): ``mlp_logvar`` (tanh MLP) on each action
    token's expert output -> per-element std squashed into ``std_range``
    (:func:`~rlinf.algorithms.flow_logprob.squashed_std`); its ``logvar_min`` / ``logvar_max``
    buffers (``log std^2``) are kept for the checkpoint format and set from ``std_range``."""

    def __init__(self, in_dim: int, hidden_sizes: Sequence[int], out_dim: int, std_range: tuple[float, float]):
        super().__init__()
        self.mlp_logvar = _MLP([in_dim, *hidden_sizes, out_dim])
        self.std_range = (float(std_range[0]), float(std_range[1]))
        self.register_buffer("logvar_min", torch.tensor([2 * math.log(self.std_range[0])]))
        self.register_buffer("logvar_max", torch.tensor([2 * math.log(self.std_range[1])]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return squashed_std(self.mlp_logvar(x).float(), self.std_range)


def _layer_dims(tensors: Mapping[str, torch.Tensor], prefix: str, suffix: str) -> list[tuple[int, int]]:
    """``[(in, out), ...]`` of the Linear layers ``prefix{i}suffix.weight`` in index order."""
    found = {}
    for name, t in tensors.items():
        if name.startswith(prefix) and name.endswith(f"{suffix}.weight"):
            index = name[len(prefix):-len(f"{suffix}.weight")].rstrip(".")
            if index.isdigit():
                found[int(index)] = (int(t.shape[1]), int(t.shape[0]))
    return [found[i] for i in sorted(found)]


# ---- the policy ----------------------------------------------------------------------------------


class Pi0RLPolicy(EmbodiedPolicy):
    """π0 / π0.5 with πRL log-probs, value and noise heads (see the module docstring).

    Args:
        pi0: the loaded checkpoint (:func:`~rlinf.models.embodied.pi0.loading.load_pi0`); it needs
            statistics (the env takes un-normalised actions).
        config: sampling and training settings.

    Raises:
        ValueError: no statistics, sizes the checkpoint cannot give (``action_env_dim`` above the
            statistics' or the padded width, ``action_chunk`` above ``H``, more cameras than slots).
        Pi0HeadError: stored heads that do not fit (``key`` names the setting).
    """

    def __init__(self, pi0: Pi0Policy, config: Pi0RLConfig):
        super().__init__()
        if config.noise_method not in NOISE_METHODS:
            raise ValueError(f"noise_method must be one of {NOISE_METHODS}, got {config.noise_method!r}")
        spec = pi0.model.spec
        if pi0.stats is None:
            raise ValueError(f"{pi0.source_path}: no action statistics; the env needs un-normalised actions")
        if config.action_env_dim > min(spec.action_dim, pi0.stats.action_dim):
            raise ValueError(f"action_env_dim {config.action_env_dim}: the checkpoint predicts {spec.action_dim} "
                             f"(padded) dimensions with statistics for {pi0.stats.action_dim}")
        if config.action_chunk > spec.action_horizon:
            raise ValueError(f"action_chunk {config.action_chunk}: the checkpoint predicts {spec.action_horizon} "
                             "actions per chunk")
        if not 1 <= config.num_images <= len(pi0.cameras):
            raise ValueError(f"num_images {config.num_images}: the checkpoint has {len(pi0.cameras)} camera slots")
        self.pi0 = pi0
        self.config = config
        self.action_dim, self.num_action_chunks = config.action_env_dim, config.action_chunk
        self.value_type = "chunk_level"
        self.horizon, self.padded_dim = spec.action_horizon, spec.action_dim
        self.reads_state = not spec.pi05 or pi0.prompt_format == "pi05_state"
        dtype = pi0.model.dtype
        extras = dict(pi0.extras)
        if config.add_value_head:
            self.value_head = self._value_head(extras).to(dtype)
        if config.noise_method == "flow_noise":
            self.noise_head = self._noise_head(extras).to(dtype)
        if config.train_expert_only:
            for p in pi0.model.paligemma_with_expert.paligemma.parameters():
                p.requires_grad_(False)
        low = torch.full((self.action_dim,), -1.0) if config.action_low is None else torch.tensor(config.action_low)
        high = torch.full((self.action_dim,), 1.0) if config.action_high is None else torch.tensor(config.action_high)
        self.register_buffer("action_low", low.float(), persistent=False)
        self.register_buffer("action_high", high.float(), persistent=False)

    # ---- heads ---------------------------------------------------------------------------------
    def _value_head(self, extras: Mapping[str, torch.Tensor]) -> ValueHead:
        spec = self.pi0.model.spec
        width = spec.vlm.width if self.config.value_after_vlm else spec.expert.width
        stored = {k[len("value_head."):]: v for k, v in extras.items() if k.startswith("value_head.")}
        if not stored:
            sizes = self.config.value_hidden_sizes or VALUE_SIZES["pi05" if spec.pi05 else "pi0"]
            return ValueHead(width, sizes)
        dims = _layer_dims(stored, "mlp.", "")
        if not dims or dims[-1][1] != 1:
            raise Pi0HeadError("model_path", f"{self.pi0.source_path}: value_head.* tensors are not a ValueHead "
                               "(mlp.<i>.weight ending in one output)")
        if dims[0][0] != width:
            where = "VLM prefix" if self.config.value_after_vlm else "expert suffix"
            raise Pi0HeadError("value_after_vlm", f"the checkpoint's value_head reads {dims[0][0]} features, the "
                               f"{where} output has {width} (value_after_vlm: {self.config.value_after_vlm})")
        sizes = tuple(d[1] for d in dims[:-1])
        if self.config.value_hidden_sizes is not None and tuple(self.config.value_hidden_sizes) != sizes:
            raise Pi0HeadError("critic_hidden_sizes", f"{list(self.config.value_hidden_sizes)} differs from the "
                               f"checkpoint's value_head ({list(sizes)}); remove it")
        head = ValueHead(width, sizes)
        head.load_state_dict({k: v.float() for k, v in stored.items()}, strict=True)
        return head

    def _noise_head(self, extras: Mapping[str, torch.Tensor]) -> NoiseHead:
        spec = self.pi0.model.spec
        stored = {k[len("noise_head."):]: v for k, v in extras.items() if k.startswith("noise_head.")}
        stored.pop("logvar_min", None), stored.pop("logvar_max", None)  # the config's range wins
        rng = self.config.noise_logvar_range
        if not stored:
            return NoiseHead(spec.expert.width, NOISE_SIZES, spec.action_dim, rng)
        dims = _layer_dims(stored, "mlp_logvar.moduleList.", ".linear_1")
        if not dims or dims[0][0] != spec.expert.width or dims[-1][1] != spec.action_dim:
            raise Pi0HeadError("model_path", f"{self.pi0.source_path}: noise_head.* tensors do not map the expert's "
                               f"{spec.expert.width} features to {spec.action_dim} stds ({dims})")
        head = NoiseHead(dims[0][0], tuple(d[1] for d in dims[:-1]), dims[-1][1], rng)
        missing, unexpected = head.load_state_dict({k: v.float() for k, v in stored.items()}, strict=False)
        if unexpected or [k for k in missing if not k.startswith("logvar_")]:
            raise Pi0HeadError("model_path", f"{self.pi0.source_path}: noise_head.* tensors do not fit RLinf's "
                               f"ExploreNoiseNet (missing {missing}, unexpected {unexpected})")
        return head

    def head_tensors(self) -> dict[str, torch.Tensor]:
        """The heads under RLinf's checkpoint names (``value_head.*``, ``noise_head.*``), on the CPU."""
        out = {}
        for name in ("value_head", "noise_head"):
            module = getattr(self, name, None)
            if module is not None:
                out.update({f"{name}.{k}": v.detach().cpu().clone() for k, v in module.state_dict().items()})
        return out

    # ---- inputs and the pieces of a call ----------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.action_low.device

    def _inputs(self, states, images, wrist_images, instructions) -> tuple[Pi0Inputs, torch.Tensor | None]:
        """Observations -> ``(model inputs on the device, raw states [B, D] on the device or None)``."""
        if images is None:
            raise ValueError("π0 needs camera images [N, H, W, 3]")
        cams = [to_tensor(images).cpu()]
        if self.config.num_images >= 2:
            if wrist_images is None:
                raise ValueError("this policy reads two cameras (num_images_in_input 2); pass wrist_images")
            cams.append(to_tensor(wrist_images).cpu())
        n = cams[0].shape[0]
        if instructions is None or isinstance(instructions, str):
            instructions = [instructions or ""] * n
        raw = None if states is None else to_tensor(states).float().cpu().reshape(n, -1)
        if raw is None and (self.reads_state or self.config.extra_delta_transform):
            raise ValueError(f"{self.pi0.model_type} reads the robot state here; pass states [N, D]")
        inputs = self.pi0.prepare(cams, list(instructions), raw if self.reads_state else None)
        return inputs.to(self.device), None if raw is None else raw.to(self.device)

    def _prefix(self, inputs: Pi0Inputs):
        """``(kv cache, prefix valid mask, prefix output)``; without gradients when the VLM is frozen."""
        frozen = self.config.train_expert_only or not torch.is_grad_enabled()
        with torch.no_grad() if frozen else contextlib.nullcontext():
            return self.pi0.model.prefix_cache(inputs)

    def _velocity_fn(self, kv, pad, state: torch.Tensor, seen: dict):
        """The :data:`~rlinf.algorithms.flow_logprob.VelocityFn` of this observation; records the
        action tokens' expert output of the ``t = 1`` step in ``seen["first"]``."""
        model, h = self.pi0.model, self.horizon
        noise = self.config.noise_method == "flow_noise"

        def velocity(x: torch.Tensor, t: torch.Tensor):
            v, out = model.velocity_cached(kv, pad, state, x, t)
            feats = out[:, -h:]
            if "first" not in seen and float(t[0]) == 1.0:
                seen["first"] = feats
            return v, (self.noise_head(feats.to(next(self.noise_head.parameters()).dtype)) if noise else None)

        return velocity

    def _rows_velocity_fn(self, kv, pad, state: torch.Tensor | None, first: dict):
        """The :data:`~rlinf.algorithms.flow_logprob.RowsVelocityFn` of this observation batch for
        :func:`chain_logprob_gathered`: point ``m`` reads row ``rows[m]``'s cached prefix. Runs in
        chunks of at most ``B`` points (the memory of one step-by-step call: a gathered KV cache is
        ``chunk / B`` copies of the batch's). The expert outputs of the ``t = 1`` points land in
        ``first[row]`` (the value head's input when ``value_after_vlm`` is false)."""
        model, h, b = self.pi0.model, self.horizon, pad.shape[0]
        noise = self.config.noise_method == "flow_noise"

        def velocity(x: torch.Tensor, t: torch.Tensor, rows: torch.Tensor):
            vs, stds = [], []
            for lo in range(0, x.shape[0], b):
                r = rows[lo:lo + b]
                kv_r = [(k[r], v[r]) for k, v in kv]
                v, out = model.velocity_cached(kv_r, pad[r], None if state is None else state[r], x[lo:lo + b],
                                               t[lo:lo + b])
                feats = out[:, -h:]
                for i in (t[lo:lo + b] == 1.0).nonzero().flatten().tolist():
                    first[int(r[i])] = feats[i]
                vs.append(v)
                if noise:
                    stds.append(self.noise_head(feats.to(next(self.noise_head.parameters()).dtype)))
            return torch.cat(vs), (torch.cat(stds) if noise else None)

        return velocity

    def _values(self, prefix_out: torch.Tensor, pad: torch.Tensor, first: torch.Tensor | None) -> torch.Tensor | None:
        if not self.config.add_value_head:
            return None
        if self.config.value_after_vlm:
            m = pad.to(torch.float32)[..., None]
            feat = (prefix_out.float() * m).sum(1) / m.sum(1).clamp_min(1.0)
        else:
            feat = first.float().mean(1)
        if self.config.detach_critic_input:
            feat = feat.detach()
        return self.value_head(feat.to(next(self.value_head.parameters()).dtype)).squeeze(-1).float()

    def _first_features(self, kv, pad, state: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """The action tokens' expert output at ``t = 1`` for the initial noise ``x0``."""
        _, out = self.pi0.model.velocity_cached(kv, pad, state, x0, torch.ones(x0.shape[0], device=x0.device))
        return out[:, -self.horizon:]

    def env_actions(self, final: torch.Tensor, raw_states: torch.Tensor | None) -> torch.Tensor:
        """The chain's last value ``[B, H, 32]`` -> env actions ``[B, K, A]`` (see the module docstring)."""
        k, a = self.num_action_chunks, self.action_dim
        actions = self.pi0.stats.unnormalize_actions(final[:, :k].detach().float().cpu())[..., :a].to(self.device)
        if self.config.extra_delta_transform:
            d = min(DELTA_DIMS, a)
            actions = torch.cat([actions[..., :d] + raw_states[:, None, :d].float(), actions[..., d:]], dim=-1)
        return torch.maximum(torch.minimum(actions, self.action_high), self.action_low)

    def _cut(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :self.num_action_chunks, :self.action_dim]

    # ---- EmbodiedPolicy --------------------------------------------------------------------------
    def act(self, states=None, images=None, wrist_images=None, instructions=None,
            deterministic: bool = False, generator: torch.Generator | None = None) -> PolicyOutput:
        inputs, raw_states = self._inputs(states, images, wrist_images, instructions)
        return self.act_inputs(inputs, raw_states, deterministic, generator)

    def act_inputs(self, inputs: Pi0Inputs, raw_states: torch.Tensor | None = None, deterministic: bool = False,
                   generator: torch.Generator | None = None) -> PolicyOutput:
        """:meth:`act` on already prepared model inputs (``raw_states``: for ``extra_delta_transform``)."""
        cfg = self.config
        kv, pad, prefix_out = self._prefix(inputs)
        b = inputs.tokens.shape[0]
        x0 = self.pi0.model.initial_noise(b, generator, self.device)
        mask = stochastic_mask(cfg.noise_method, b, cfg.num_steps, cfg.ignore_last, deterministic, generator,
                               self.device)
        seen: dict = {}
        level = flow_sde_level(cfg.noise_level, cfg.noise_anneal, cfg.noise_params, self.global_step, x0.dtype)
        sample = sample_chain(self._velocity_fn(kv, pad, inputs.state, seen), x0, cfg.noise_method, cfg.num_steps,
                              level, cfg.joint_logprob, mask, generator)
        chain = sample.chain.detach()
        entropy = self._cut(sample.entropy) if cfg.noise_method == "flow_noise" else None
        raw = pack_chain(chain, mask, self.num_action_chunks, level if cfg.noise_method == "flow_sde" else 1.0)
        return PolicyOutput(self.env_actions(chain[:, -1], raw_states), raw, self._cut(sample.logprobs),
                            self._values(prefix_out, pad, seen.get("first")), entropy)

    def evaluate(self, raw_actions: torch.Tensor, states=None, images=None, wrist_images=None,
                 instructions=None) -> PolicyOutput:
        inputs, raw_states = self._inputs(states, images, wrist_images, instructions)
        return self.evaluate_inputs(raw_actions, inputs, raw_states)

    def evaluate_inputs(self, raw_actions: torch.Tensor, inputs: Pi0Inputs,
                        raw_states: torch.Tensor | None = None) -> PolicyOutput:
        """:meth:`evaluate` on already prepared model inputs."""
        cfg = self.config
        raw = to_tensor(raw_actions, self.device)
        chain, mask = unpack_chain(raw, cfg.num_steps, self.horizon, self.padded_dim)
        kv, pad, prefix_out = self._prefix(inputs)
        seen: dict = {}
        velocity = self._rows_velocity_fn(kv, pad, inputs.state, seen)
        logprobs, entropy = chain_logprob_gathered(velocity, chain, mask, cfg.noise_method,
                                                   unpack_step_levels(raw, cfg.num_steps), cfg.joint_logprob)
        first = None
        if cfg.add_value_head and not cfg.value_after_vlm:
            missing = torch.tensor([r for r in range(chain.shape[0]) if r not in seen], dtype=torch.long,
                                   device=chain.device)
            if missing.numel():  # rows whose step 0 was not stochastic: the t = 1 pass for them only
                velocity(chain[missing, 0], torch.ones(missing.numel(), device=chain.device), missing)
            first = torch.stack([seen[r] for r in range(chain.shape[0])])
        return PolicyOutput(self.env_actions(chain[:, -1], raw_states), raw_actions, self._cut(logprobs),
                            self._values(prefix_out, pad, first),
                            self._cut(entropy) if cfg.noise_method == "flow_noise" else None)

    def value(self, states=None, images=None, wrist_images=None, instructions=None) -> torch.Tensor:
        if not self.config.add_value_head:
            raise ValueError("this π0 policy has no value head (add_value_head: false)")
        inputs, _ = self._inputs(states, images, wrist_images, instructions)
        kv, pad, prefix_out = self._prefix(inputs)
        first = None
        if not self.config.value_after_vlm:
            x0 = self.pi0.model.initial_noise(inputs.tokens.shape[0], None, self.device)
            first = self._first_features(kv, pad, inputs.state, x0)
        return self._values(prefix_out, pad, first)

    # ---- saving --------------------------------------------------------------------------------
    def save_pretrained(self, out_dir, dtype: torch.dtype | None = None) -> Path:
        """Writes the checkpoint (:func:`~rlinf.models.embodied.pi0.loading.save_pi0`, the layout it
        was loaded from) with the trained weights and the heads as RLinf's ``value_head.*`` /
        ``noise_head.*`` tensors (stored heads this policy does not use are written back as read)."""
        extras = dict(self.pi0.extras)
        self.pi0.extras = {**extras, **self.head_tensors()}
        try:
            return self.pi0.save_pretrained(out_dir, dtype=dtype)
        finally:
            self.pi0.extras = extras
