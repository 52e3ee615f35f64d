"""What every recipe's root config shares: loading (one ``from_dict`` / ``from_hydra``) and the
check of the names under ``cluster.component_placement``.

A root config is a frozen dataclass that subclasses :class:`RootConfig` and sets
:attr:`RootConfig.COMPONENTS` (the components its recipe can place), :attr:`RootConfig.REQUIRED`
(those it must place) and :attr:`RootConfig.RUN_KIND` (its words in errors). It may override
:meth:`RootConfig.prepare_raw` (rewrite the raw tree before parsing) and define ``check_paths()``
(files and folders the run reads).

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class DemoConfig(RootConfig):
    ...     COMPONENTS = ("env", "policy")
    ...     REQUIRED = ("policy",)
    ...     RUN_KIND = "a demo run"
    ...     cluster: ClusterConfig
    ...     def validate(self, path):
    ...         self.check_component_names()
    >>> DemoConfig.from_dict({"cluster": {"component_placement": {"policy": 0}}}).placed_components
    ('policy',)
    >>> DemoConfig.from_dict({"cluster": {"component_placement": {"env,polcy": 0}}})
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: cluster.component_placement.polcy: unknown component; a demo run places env, policy
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from rlinf.scheduler.config import ClusterConfig
from rlinf.utils.typed_config import check, parse_section

T = TypeVar("T", bound="RootConfig")

#: top-level keys Hydra adds, dropped before parsing
HYDRA_KEYS = ("hydra", "defaults")


class RootConfig:
    """Base of the recipes' root configs (``MathConfig``, ``EmbodiedConfig``, ``WebAgentConfig``)."""

    #: components this kind of run can place
    COMPONENTS: ClassVar[tuple[str, ...]] = ()
    #: components it must place
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    #: how errors name this kind of run ("a math run")
    RUN_KIND: ClassVar[str] = "this run"
    #: an example placement shown when a required component is missing
    PLACEMENT_EXAMPLE: ClassVar[str] = ""

    #: every root config has a ``cluster:`` section (a field of the subclass)
    cluster: ClusterConfig

    @classmethod
    def prepare_raw(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """Rewrite the raw tree before parsing (default: unchanged)."""
        return raw

    @classmethod
    def from_dict(cls: type[T], raw: Mapping[str, Any], check_paths: bool = True) -> T:
        """Parse a resolved config tree (Hydra's own keys dropped); with ``check_paths`` also run
        ``check_paths()`` (files and folders the run reads) when the class defines it."""
        raw = cls.prepare_raw({k: v for k, v in raw.items() if k not in HYDRA_KEYS})
        cfg = parse_section(cls, raw, "")
        if check_paths and hasattr(cfg, "check_paths"):
            cfg.check_paths()
        return cfg

    @classmethod
    def from_hydra(cls: type[T], cfg: Any, check_paths: bool = True) -> T:
        """Resolve a Hydra ``DictConfig`` (with rlinf's resolvers) and parse it."""
        return cls.from_dict(resolve_hydra(cfg), check_paths=check_paths)

    @classmethod
    def load(cls: type[T], raw: Any, check_paths: bool = True) -> T:
        """:meth:`from_dict` for a plain dict, :meth:`from_hydra` for a ``DictConfig`` (which is a
        mapping too, but unresolved)."""
        if isinstance(raw, dict):
            return cls.from_dict(raw, check_paths=check_paths)
        return cls.from_hydra(raw, check_paths=check_paths)

    @property
    def placed_components(self) -> tuple[str, ...]:
        """The components ``cluster.component_placement`` names, in :attr:`COMPONENTS` order."""
        names = set(component_names(self.cluster.component_placement))
        return tuple(c for c in self.COMPONENTS if c in names)

    def check_component_names(self) -> list[str]:
        """Every placed name is one of :attr:`COMPONENTS` and every :attr:`REQUIRED` one is
        placed; returns the placed names (as written)."""
        names = component_names(self.cluster.component_placement)
        for name in names:
            check(name in self.COMPONENTS, f"cluster.component_placement.{name}",
                  f"unknown component; {self.RUN_KIND} places {', '.join(self.COMPONENTS)}")
        for required in self.REQUIRED:
            example = f"; e.g. {self.PLACEMENT_EXAMPLE}" if self.PLACEMENT_EXAMPLE else ""
            check(required in names, "cluster.component_placement", f"missing component {required!r}{example}")
        return names


def component_names(placement: Mapping[str, Any]) -> list[str]:
    """The component names of a placement mapping (``"actor,rollout"`` keys split).

    >>> component_names({"actor,rollout": "all", "env": 0})
    ['actor', 'rollout', 'env']
    """
    return [n.strip() for key in placement for n in str(key).split(",")]


def resolve_hydra(cfg: Any) -> dict[str, Any]:
    """A Hydra ``DictConfig`` as a plain resolved dict (rlinf's resolvers registered)."""
    # lazy: omegaconf (~0.2 s) only for Hydra configs (the caller's DictConfig loaded it already)
    from omegaconf import OmegaConf

    # lazy: omegaconf (~0.2 s) only for Hydra configs (the caller's DictConfig loaded it already)
    from rlinf.config.resolvers import register_resolvers

    register_resolvers()
    return OmegaConf.to_container(cfg, resolve=True)
