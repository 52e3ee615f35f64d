"""Name -> function registries, so a config string selects an algorithm.

Each registry is filled with a one-line decorator at definition time::

    @register_policy_loss("ppo")
    def compute_ppo_loss(...): ...

and read back with :func:`get_policy_loss_fn` (or the matching getter). An unknown name
raises ``ValueError`` listing the registered names.

Advantage estimators
--------------------
An advantage estimator is one function with one signature,
``estimator(inputs: AdvantageInputs) -> AdvantageOutputs``, registered with what it needs
(``needs_critic``: the values of a value model / head; ``needs_groups``: ``group_size > 1``
samples of one prompt / start state). Callers never compare estimator names: the config's
checks and the code that fills :class:`AdvantageInputs` read these flags. Two registries hold
them, by the layout of the data:

- :data:`ADVANTAGES` (``algorithm.adv_type`` of math / LLM runs): token batches, sequence
  rewards ``[batch]`` and a ``response_mask`` ``[batch, seq]``; outputs ``[batch, seq]``.
- :data:`EMBODIED_ADVANTAGES` (``algorithm.adv_type`` of embodied runs): time-major rollouts,
  per-step rewards ``[T, N]`` / ``[T, N, K]`` with ``dones``; outputs of the rewards' shape.

``algorithm.adv_type`` accepts exactly the names of both registries (its allowed values are
read from them), and each root config refuses a name its own registry lacks.

How to add an advantage estimator: write one function taking :class:`AdvantageInputs` and
returning :class:`AdvantageOutputs`, put its formula in its docstring, decorate it with
``@register_advantage("name", needs_critic=..., needs_groups=...)`` in a module of
``rlinf/algorithms/`` listed in ``_ADVANTAGE_MODULES`` (``advantages.py`` holds the
outcome-reward ones), and add a test whose expected values are worked out by hand.
``algorithm.adv_type: name`` then selects it; regenerate ``docs/config_reference.md``
(``python -m rlinf.runners.reference_doc``). A toy one, registered in a scratch registry so the
real one stays as shipped:

    >>> import torch
    >>> toy = AdvantageRegistry("toy advantage type")
    >>> @toy.register("sign", needs_groups=False)
    ... def sign_advantages(inputs: AdvantageInputs) -> AdvantageOutputs:
    ...     '''A_{i,t} = sign(R_i) * mask_{i,t}; returns = advantages.'''
    ...     adv = torch.sign(inputs.rewards).view(-1, 1) * inputs.response_mask
    ...     return AdvantageOutputs(adv, adv.clone())
    >>> est = toy.get("sign")
    >>> est.name, est.needs_critic, est.needs_groups
    ('sign', False, False)
    >>> est(AdvantageInputs(torch.tensor([2.0, -3.0]), torch.tensor([[1.0, 0.0], [1.0, 1.0]]))).advantages
    tensor([[ 1.,  0.],
            [-1., -1.]])
    >>> toy.get("nope")
    Traceback (most recent call last):
    ...
    ValueError: unknown toy advantage type 'nope'; registered: sign
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch

F = TypeVar("F", bound=Callable)


class Registry:
    """A case-sensitive mapping from names to functions of one kind.

    Args:
        kind: What the registry holds, used in error messages (e.g. ``"advantage"``).

    Example:
        >>> reg = Registry("toy")
        >>> @reg.register("double", "x2")
        ... def double(x):
        ...     return 2 * x
        >>> reg.get("x2")(4)
        8
        >>> reg.names()
        ['double', 'x2']
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._fns: dict[str, Callable] = {}

    def register(self, *names: str) -> Callable[[F], F]:
        """Decorator registering the function under every given name (aliases allowed).

        Raises:
            ValueError: If no name is given, a name is not a non-empty string, or a name
                is already registered.
        """
        if not names:
            raise ValueError(f"register needs at least one {self.kind} name")
        for name in names:
            if not isinstance(name, str) or not name:
                raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")
            if name in self._fns:
                raise ValueError(f"{self.kind} name {name!r} is already registered")

        def decorator(fn: F) -> F:
            for name in names:
                self._fns[name] = fn
            return fn

        return decorator

    def get(self, name: str) -> Callable:
        """Return the function registered as ``name``.

        Raises:
            ValueError: If ``name`` is not registered; the message lists the known names.
        """
        try:
            return self._fns[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown {self.kind} {name!r}; registered: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._fns)

    def __contains__(self, name: object) -> bool:
        return name in self._fns


@dataclass(frozen=True)
class AdvantageInputs:
    """Everything an advantage estimator may read; each takes the fields it needs.

    Token batches (:data:`ADVANTAGES`):
        rewards: ``[batch]`` sequence rewards (after ``reward_clip`` / ``reward_norm``), batch =
            n_prompts * group_size with each prompt's samples consecutive.
        response_mask: ``[batch, seq]`` 1 on the response tokens that count.
        values: ``[batch, seq]`` value-model estimates V_t (``needs_critic``).
        kl_penalty: ``[batch, seq]`` per-token penalty already scaled by the KL weight
            (``kl_in_reward``), subtracted from the token rewards; None = none.

    Time-major rollouts (:data:`EMBODIED_ADVANTAGES`):
        rewards: ``[T, N]`` (one per policy step) or ``[T, N, K]`` (one per action of a chunk).
        values: ``[T + 1, N]`` / ``[T + 1, N, K]``, the last row the value after the last step.
        dones: ``[T, N]`` bool, the episode of env n ended with step t.
        bootstrap_values: ``[T, N]`` V(final observation) of episodes cut by a time limit, else 0.

    Both: ``group_size`` (samples / envs per group), ``gamma`` (discount), ``lam`` (GAE lambda),
    ``normalize_advantages`` (whiten as the estimator documents).
    """

    rewards: torch.Tensor
    response_mask: torch.Tensor | None = None
    group_size: int = 1
    values: torch.Tensor | None = None
    kl_penalty: torch.Tensor | None = None
    dones: torch.Tensor | None = None
    bootstrap_values: torch.Tensor | None = None
    gamma: float = 1.0
    lam: float = 1.0
    normalize_advantages: bool = True


@dataclass(frozen=True)
class AdvantageOutputs:
    """``advantages`` and ``returns`` (the value targets), detached, zero where nothing counts."""

    advantages: torch.Tensor
    returns: torch.Tensor


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered estimator: ``fn(AdvantageInputs) -> AdvantageOutputs`` and what it needs.

    Attributes:
        name: the ``algorithm.adv_type`` value that selects it.
        fn: the estimator.
        needs_critic: reads ``values`` (a value model / value head must be trained).
        needs_groups: compares the samples of a group (``group_size`` > 1 needed).
    """

    name: str
    fn: Callable[[AdvantageInputs], AdvantageOutputs]
    needs_critic: bool = False
    needs_groups: bool = False

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutputs:
        return self.fn(inputs)


class AdvantageRegistry(Registry):
    """A :class:`Registry` of :class:`AdvantageEstimator`, one name each (no aliases, so the
    config's list of allowed values is the list of estimators)."""

    def register(self, name: str, *, needs_critic: bool = False,  # type: ignore[override]
                 needs_groups: bool = False) -> Callable[[F], F]:
        """Decorator registering ``fn(AdvantageInputs) -> AdvantageOutputs`` as ``name``."""
        add = super().register(name)

        def decorator(fn: F) -> F:
            add(AdvantageEstimator(name, fn, needs_critic=needs_critic, needs_groups=needs_groups))
            return fn

        return decorator

    def get(self, name: str) -> AdvantageEstimator:
        return super().get(name)


ADVANTAGES = AdvantageRegistry("advantage type (adv_type)")
EMBODIED_ADVANTAGES = AdvantageRegistry("embodied advantage type (adv_type)")
POLICY_LOSSES = Registry("policy loss type (loss_type)")
KL_PENALTIES = Registry("kl_penalty_type")

#: the modules whose import fills each advantage registry
_ADVANTAGE_MODULES = {
    "llm": ("rlinf.algorithms.advantages", "rlinf.algorithms.gae"),
    "embodied": ("rlinf.algorithms.embodied",),
}


def register_advantage(name: str, *, needs_critic: bool = False, needs_groups: bool = False) -> Callable[[F], F]:
    """Register ``fn(AdvantageInputs) -> AdvantageOutputs`` for token batches (math / LLM runs)."""
    return ADVANTAGES.register(name, needs_critic=needs_critic, needs_groups=needs_groups)


def register_embodied_advantage(name: str, *, needs_critic: bool = False,
                                needs_groups: bool = False) -> Callable[[F], F]:
    """Register ``fn(AdvantageInputs) -> AdvantageOutputs`` for time-major embodied rollouts."""
    return EMBODIED_ADVANTAGES.register(name, needs_critic=needs_critic, needs_groups=needs_groups)


def advantage_registry(kind: str = "llm") -> AdvantageRegistry:
    """The filled registry of ``kind`` (``"llm"`` or ``"embodied"``).

    >>> advantage_registry("llm").names()
    ['gae', 'grpo', 'reinpp', 'reinpp_baseline', 'rloo']
    >>> advantage_registry("embodied").names()
    ['gae', 'grpo']
    """
    if kind not in _ADVANTAGE_MODULES:
        raise ValueError(f"advantage registry kind must be one of {sorted(_ADVANTAGE_MODULES)}, got {kind!r}")
    for module in _ADVANTAGE_MODULES[kind]:
        importlib.import_module(module)
    return ADVANTAGES if kind == "llm" else EMBODIED_ADVANTAGES


def get_advantage_estimator(name: str, kind: str = "llm") -> AdvantageEstimator:
    """Estimator registered as ``name`` (e.g. ``"grpo"``, ``"gae"``) for ``kind`` of run.

    >>> est = get_advantage_estimator("gae")
    >>> est.fn.__name__, est.needs_critic, est.needs_groups
    ('gae_estimator', True, False)
    """
    return advantage_registry(kind).get(name)


def register_policy_loss(*names: str) -> Callable[[F], F]:
    """Register a policy loss; it returns ``(loss, metrics)``."""
    return POLICY_LOSSES.register(*names)


def register_kl_penalty(*names: str) -> Callable[[F], F]:
    """Register a token-level KL estimator ``fn(logprobs, ref_logprobs) -> kl``."""
    return KL_PENALTIES.register(*names)


def get_policy_loss_fn(name: str) -> Callable:
    """Policy loss registered as ``name`` (``"ppo"``, ``"decoupled_ppo"``).

    >>> get_policy_loss_fn("ppo").__name__
    'compute_ppo_loss'
    """
    # lazy: breaks the cycle registry <-> policy_loss / kl (they register into it)
    import rlinf.algorithms.policy_loss  # noqa: F401

    return POLICY_LOSSES.get(name)


def get_kl_fn(name: str) -> Callable:
    """KL estimator registered as ``name`` (``"k1"``, ``"abs"``, ``"k2"``, ``"k3"``, ...).

    >>> get_kl_fn("low_var_kl").__name__
    'kl_k3'
    """
    # lazy: breaks the cycle registry <-> policy_loss / kl (they register into it)
    import rlinf.algorithms.kl  # noqa: F401

    return KL_PENALTIES.get(name)
