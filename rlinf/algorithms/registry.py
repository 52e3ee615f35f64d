"""Name -> function registries, so a config string selects an algorithm.

Each registry is filled with a one-line decorator at definition time::

    @register_advantage("grpo")
    def compute_grpo_advantages(...): ...

and read back with :func:`get_advantage_fn` (or the matching getter). An unknown name
raises ``ValueError`` listing the registered names.
"""

from __future__ import annotations

from typing import Callable, TypeVar

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


ADVANTAGES = Registry("advantage type (adv_type)")
POLICY_LOSSES = Registry("policy loss type (loss_type)")
KL_PENALTIES = Registry("kl_penalty_type")


def register_advantage(*names: str) -> Callable[[F], F]:
    """Register an advantage estimator; it returns ``(advantages, returns)``."""
    return ADVANTAGES.register(*names)


def register_policy_loss(*names: str) -> Callable[[F], F]:
    """Register a policy loss; it returns ``(loss, metrics)``."""
    return POLICY_LOSSES.register(*names)


def register_kl_penalty(*names: str) -> Callable[[F], F]:
    """Register a token-level KL estimator ``fn(logprobs, ref_logprobs) -> kl``."""
    return KL_PENALTIES.register(*names)


def get_advantage_fn(name: str) -> Callable:
    """Advantage function registered as ``name`` (e.g. ``"grpo"``, ``"gae"``).

    >>> get_advantage_fn("grpo").__name__
    'compute_grpo_advantages'
    """
    import rlinf.algorithms.advantages  # noqa: F401  (fills the registry)
    import rlinf.algorithms.gae  # noqa: F401

    return ADVANTAGES.get(name)


def get_policy_loss_fn(name: str) -> Callable:
    """Policy loss registered as ``name`` (``"ppo"``, ``"decoupled_ppo"``).

    >>> get_policy_loss_fn("ppo").__name__
    'compute_ppo_loss'
    """
    import rlinf.algorithms.policy_loss  # noqa: F401

    return POLICY_LOSSES.get(name)


def get_kl_fn(name: str) -> Callable:
    """KL estimator registered as ``name`` (``"k1"``, ``"abs"``, ``"k2"``, ``"k3"``, ...).

    >>> get_kl_fn("low_var_kl").__name__
    'kl_k3'
    """
    import rlinf.algorithms.kl  # noqa: F401

    return KL_PENALTIES.get(name)
