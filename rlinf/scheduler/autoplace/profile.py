"""The profile the placement planner reads: per role, how long a sample takes and how much memory
it holds on one accelerator, plus the cluster's figures.

A profile is a YAML mapping, written by ``python -m toolkits.autoplace CONFIG --measure-steps K``
or by hand for a cluster one does not have yet. The minimal form::

    accelerators_per_node: 8
    nodes: 1
    accelerator_memory_gib: 80
    samples_per_step: 512
    offload_s: 3.0          # one offload + onload of a collocated phase switch; null = impossible
    weight_sync_s: 1.0
    roles:
      rollout: {seconds_per_sample: 2.0, memory_gib: 30}   # on one accelerator
      actor:   {seconds_per_sample: 0.5, memory_gib: 60}

Every key has its effect on the prediction (docs/placement_planner.md); an unknown key, a missing
figure or a negative one is refused with a message naming it (:class:`ProfileError`).

Work of a role per step (seconds on one accelerator), in this order of precedence:

* ``seconds_per_token`` x the profile's ``tokens_per_sample`` (both given), else
* ``seconds_per_env_step`` x the profile's ``env_steps_per_sample`` (both given), else
* ``seconds_per_sample``;

times ``samples_per_step``. A role given several of them must agree within 10 % (two figures
that contradict each other are bad input, not a silent pick).

Example:
    >>> p = parse_profile({"accelerators_per_node": 8, "nodes": 1, "accelerator_memory_gib": 80,
    ...     "samples_per_step": 512, "offload_s": 3.0, "weight_sync_s": 1.0,
    ...     "roles": {"rollout": {"seconds_per_sample": 2.0, "memory_gib": 30},
    ...               "actor": {"seconds_per_sample": 0.5, "memory_gib": 60}}})
    >>> p.role("actor").work_s(p), p.role("rollout").seconds_on(4, p)
    (256.0, 256.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from rlinf.utils.typed_config import ConfigError, check, parse_section

__all__ = ["NodeGroupFigures", "Profile", "ProfileError", "RoleFigures", "parse_profile"]


class ProfileError(ConfigError):
    """A bad profile: one line naming the key (``profile.roles.actor.memory_gib: ...``)."""


def _positive(value: float | None, key: str, *, zero_ok: bool = False) -> None:
    if value is None:
        return
    if zero_ok:
        check(value >= 0 and math.isfinite(value), key, f"must be a finite number >= 0, got {value!r}")
    else:
        check(value > 0 and math.isfinite(value), key, f"must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class RoleFigures:
    """One role's figures, on ONE accelerator (or one process, for a role without accelerators).

    Attributes:
        seconds_per_sample: seconds of work per sample of a step.
        memory_gib: memory the role holds on its accelerator (all of it, unsharded).
        shardable: the role can spread over several accelerators (FSDP, tensor parallel): its memory
            divides by the accelerators it gets; without it, more accelerators mean data-parallel
            copies, each holding ``memory_gib``.
        seconds_per_sample_at: measured seconds per sample when given N accelerators (``{4: 0.6}``);
            between and beyond the points the planner interpolates in log-log (never better than
            linear). Absent: linear scaling is assumed (and said in the output).
        seconds_per_token: seconds per token of a sample (used with the profile's ``tokens_per_sample``).
        seconds_per_env_step: seconds per simulator step (used with ``env_steps_per_sample``).
        wait_s_per_step: seconds per step the role waits without using its accelerators (tool calls,
            HTTP), after its work, when the step waits for its slowest sample (not with streaming);
            on one unit when ``wait_s_per_step_at`` is given, else on any number.
        wait_s_per_step_at: measured waits when given N units (``{2: 1.3}``): fewer samples per
            unit wait for a shorter tail. Between points the wait is interpolated in log-log; beyond
            the last it stays at the last point's (the slowest of fewer samples need not keep
            shrinking: on the tool workload 2.65 s on one process, 1.06 s on two, and three were
            no faster) (:meth:`wait_on`).
        threads_per_process: CPU cores one process keeps busy (only with the profile's
            ``cores_per_node``: the simulator shares a node's cores among running processes).
        processes_per_accelerator: processes the role may run on each accelerator (env workers):
            the candidates try each; the work splits over them, the cores are shared.
        accelerator: false for a role that needs no accelerator (a CPU simulator, a rule reward):
            it may run on CPU-only node groups and never counts against accelerator memory.
    """

    seconds_per_sample: float | None = None
    memory_gib: float | None = None
    shardable: bool = False
    seconds_per_sample_at: dict[int, float] | None = None
    seconds_per_token: float | None = None
    seconds_per_env_step: float | None = None
    wait_s_per_step: float = 0.0
    wait_s_per_step_at: dict[int, float] | None = None
    threads_per_process: float = 1.0
    processes_per_accelerator: tuple[int, ...] = (1,)
    accelerator: bool = True

    def validate(self, path: str) -> None:
        check(self.memory_gib is not None, f"{path}.memory_gib", "missing (required): GiB on one accelerator")
        check(any(v is not None for v in (self.seconds_per_sample, self.seconds_per_token, self.seconds_per_env_step)),
              f"{path}.seconds_per_sample", "missing (required): seconds per sample on one accelerator")
        for name in ("seconds_per_sample", "seconds_per_token", "seconds_per_env_step", "threads_per_process"):
            _positive(getattr(self, name), f"{path}.{name}")
        _positive(self.memory_gib, f"{path}.memory_gib", zero_ok=True)
        _positive(self.wait_s_per_step, f"{path}.wait_s_per_step", zero_ok=True)
        for n, s in (self.seconds_per_sample_at or {}).items():
            check(isinstance(n, int) and not isinstance(n, bool) and n >= 1, f"{path}.seconds_per_sample_at",
                  f"keys are accelerator counts >= 1, got {n!r}")
            _positive(s, f"{path}.seconds_per_sample_at.{n}")
        for n, s in (self.wait_s_per_step_at or {}).items():
            check(isinstance(n, int) and not isinstance(n, bool) and n >= 1, f"{path}.wait_s_per_step_at",
                  f"keys are unit counts >= 1, got {n!r}")
            _positive(s, f"{path}.wait_s_per_step_at.{n}", zero_ok=True)
        check(bool(self.processes_per_accelerator) and all(k >= 1 for k in self.processes_per_accelerator),
              f"{path}.processes_per_accelerator", f"a list of ints >= 1, got {self.processes_per_accelerator!r}")

    def per_sample_s(self, profile: Profile) -> float:
        """Seconds per sample on one accelerator (see the module docstring for the precedence)."""
        return self._per_sample(profile, "")

    def _per_sample(self, profile: Profile, key: str) -> float:
        figures = []
        if self.seconds_per_token is not None and profile.tokens_per_sample is not None:
            figures.append(("seconds_per_token x tokens_per_sample",
                            self.seconds_per_token * profile.tokens_per_sample))
        if self.seconds_per_env_step is not None and profile.env_steps_per_sample is not None:
            figures.append(("seconds_per_env_step x env_steps_per_sample",
                            self.seconds_per_env_step * profile.env_steps_per_sample))
        if self.seconds_per_sample is not None:
            figures.append(("seconds_per_sample", self.seconds_per_sample))
        if not figures:
            raise ProfileError(key or "profile.roles", "no figure gives seconds per sample (a per-token or "
                               "per-env-step figure needs the profile's tokens_per_sample / env_steps_per_sample)")
        name, value = figures[0]
        for other, v in figures[1:]:
            if abs(v - value) > 0.1 * max(v, value):
                raise ProfileError(key or "profile.roles", f"{name} = {value:.4g} s but {other} = {v:.4g} s "
                                   "per sample; they must agree within 10 %")
        return value

    def speedup(self, n: int, base: float | None = None) -> float:
        """How many times faster the role's work goes on ``n`` accelerators than on one; ``base``:
        its seconds per sample on one (default ``seconds_per_sample``; pass
        :meth:`per_sample_s` for a role given per-token or per-env-step figures).

        >>> RoleFigures(seconds_per_sample=1.0, memory_gib=1).speedup(4)
        4.0
        >>> RoleFigures(seconds_per_sample=1.0, memory_gib=1, seconds_per_sample_at={4: 0.5}).speedup(2)
        1.4142135623730951
        """
        if n <= 1:
            return 1.0
        points = {1: 1.0}
        base = base if base is not None else self.seconds_per_sample
        for k, s in sorted((self.seconds_per_sample_at or {}).items()):
            if base is not None and k > 1:
                points[k] = min(float(k), base / s)
        if len(points) == 1:
            return float(n)
        ks = sorted(points)
        lo = max((k for k in ks if k <= n), default=ks[0])
        hi = min((k for k in ks if k >= n), default=None)
        if hi is None:  # beyond the last point: the last segment's exponent, capped at linear
            a, b = ks[-2], ks[-1]
            slope = min(1.0, math.log(points[b] / points[a]) / math.log(b / a))
            return points[b] * (n / b) ** slope
        if hi == lo:
            return points[lo]
        slope = math.log(points[hi] / points[lo]) / math.log(hi / lo)
        return points[lo] * (n / lo) ** slope

    def wait_on(self, n: int) -> float:
        """Seconds per step the role waits on ``n`` units (see ``wait_s_per_step_at``).

        >>> RoleFigures(seconds_per_sample=1.0, memory_gib=1, wait_s_per_step=2.0).wait_on(4)
        2.0
        >>> f = RoleFigures(seconds_per_sample=1.0, memory_gib=1, wait_s_per_step=2.0, wait_s_per_step_at={4: 0.5})
        >>> f.wait_on(4), f.wait_on(2), f.wait_on(8)
        (0.5, 1.0, 0.5)
        """
        points = {1: self.wait_s_per_step, **(self.wait_s_per_step_at or {})}
        if len(points) == 1 or n in points:
            return points.get(n, self.wait_s_per_step)
        ks = sorted(points)
        if n > ks[-1]:
            return points[ks[-1]]
        lo = max(k for k in ks if k <= n)
        hi = min(k for k in ks if k >= n)
        a, b = points[lo], points[hi]
        if a <= 0 or b <= 0:
            return b if n >= hi else a
        return a * (n / lo) ** (math.log(b / a) / math.log(hi / lo))

    def work_s(self, profile: Profile) -> float:
        """Seconds of work per step on one accelerator: ``samples_per_step`` x seconds per sample."""
        return profile.samples_per_step * self.per_sample_s(profile)

    def seconds_on(self, n: int, profile: Profile) -> float:
        """The role's work per step on ``n`` accelerators (no contention)."""
        return self.work_s(profile) / self.speedup(n, self.per_sample_s(profile))


@dataclass(frozen=True)
class NodeGroupFigures:
    """Figures of one node group of the config's ``cluster.node_groups`` (heterogeneous nodes).

    Attributes:
        speed: how fast every role runs there relative to the profile's figures (0.5 = half speed).
        accelerator_memory_gib: memory of one of its accelerators (default: the profile's).
        cores_per_node: cores of one of its nodes (default: the profile's ``cores_per_node``).
    """

    speed: float = 1.0
    accelerator_memory_gib: float | None = None
    cores_per_node: int | None = None

    def validate(self, path: str) -> None:
        _positive(self.speed, f"{path}.speed")
        _positive(self.accelerator_memory_gib, f"{path}.accelerator_memory_gib")
        check(self.cores_per_node is None or self.cores_per_node >= 1, f"{path}.cores_per_node", "must be >= 1")


@dataclass(frozen=True)
class Profile:
    """A whole profile (see the module docstring).

    Attributes:
        accelerators_per_node, nodes, accelerator_memory_gib: the cluster (they win over the
            config's; ``--nodes`` / ``--accelerators-per-node`` win over both).
        samples_per_step: samples per step (default: the config's batch, filled in by the caller).
        offload_s: one offload + onload of a collocated phase switch; ``None``: offload impossible
            (collocated roles must then fit in memory together).
        weight_sync_s: sending the trained weights to the roles that generate, once per step.
        roles: role name -> :class:`RoleFigures`.
        tokens_per_sample, env_steps_per_sample: what per-token / per-env-step figures multiply.
        cores_per_node: CPU cores per node: when given, the simulator shares them among the
            processes running at each moment (a CPU run's slots are not cores).
        driver_s_per_step: seconds per step the driver works between the flow's last role and the
            weight sync (advantages, logging; one core of node 0), whatever the placement.
        node_groups: figures per node group label (:class:`NodeGroupFigures`).
        source: where the profile came from (the file name given to :func:`parse_profile`), named
            by the search's messages; not a YAML key.
    """

    weight_sync_s: float
    roles: dict[str, RoleFigures]
    accelerators_per_node: int | None = None
    nodes: int | None = None
    accelerator_memory_gib: float | None = None
    samples_per_step: int | None = None
    offload_s: float | None = None
    tokens_per_sample: float | None = None
    env_steps_per_sample: float | None = None
    cores_per_node: int | None = None
    driver_s_per_step: float = 0.0
    node_groups: dict[str, NodeGroupFigures] = field(default_factory=dict)
    source: str = field(default="", init=False, compare=False)  # not a YAML key: set by parse_profile

    def validate(self, path: str) -> None:
        check(bool(self.roles), f"{path}.roles", "no roles: give each placed role its figures")
        check(self.accelerators_per_node is None or self.accelerators_per_node >= 0,
              f"{path}.accelerators_per_node", f"must be >= 0, got {self.accelerators_per_node}")
        check(self.nodes is None or self.nodes >= 1, f"{path}.nodes", f"must be >= 1, got {self.nodes}")
        check(self.samples_per_step is None or self.samples_per_step >= 1, f"{path}.samples_per_step",
              f"must be >= 1, got {self.samples_per_step}")
        check(self.cores_per_node is None or self.cores_per_node >= 1, f"{path}.cores_per_node",
              f"must be >= 1, got {self.cores_per_node}")
        for name in ("accelerator_memory_gib", "tokens_per_sample", "env_steps_per_sample"):
            _positive(getattr(self, name), f"{path}.{name}")
        for name in ("offload_s", "weight_sync_s", "driver_s_per_step"):
            _positive(getattr(self, name), f"{path}.{name}", zero_ok=True)
        for name, role in self.roles.items():
            role._per_sample(self, f"{path}.roles.{name}")

    def role(self, name: str) -> RoleFigures:
        """The figures of role ``name``."""
        try:
            return self.roles[name]
        except KeyError:
            raise ProfileError("profile.roles", f"no figures for role {name!r} "
                               f"(the profile has {', '.join(self.roles) or 'none'})") from None

    def group(self, label: str | None) -> NodeGroupFigures:
        """The figures of node group ``label`` (defaults for ``None`` or an unlisted group)."""
        return self.node_groups.get(label, NodeGroupFigures()) if label else NodeGroupFigures()

    def node_labels(self, cluster) -> dict[int, str]:
        """Node rank -> its node group's label, for the nodes of ``cluster`` that are in a group."""
        return {n: g.label for g in cluster.node_groups for n in g.node_ranks}

    def memory_on(self, cluster, node: int) -> float | None:
        """GiB of one accelerator of ``node`` (its group's figure, else the profile's)."""
        own = self.group(self.node_labels(cluster).get(node)).accelerator_memory_gib
        return own if own is not None else self.accelerator_memory_gib

    def cores_on(self, cluster, node: int) -> int | None:
        """CPU cores of ``node`` (its group's figure, else the profile's ``cores_per_node``)."""
        own = self.group(self.node_labels(cluster).get(node)).cores_per_node
        return own if own is not None else self.cores_per_node


def parse_profile(raw: object, source: str = "profile") -> Profile:
    """A :class:`Profile` from a YAML mapping; :class:`ProfileError` (one line, naming the key)
    on an unknown key, a missing figure, a negative or non-finite one."""
    if not isinstance(raw, Mapping):
        raise ProfileError("profile", f"{source}: expected a mapping with roles and cluster figures, got "
                           f"{type(raw).__name__}")
    raw = dict(raw)
    required = {"weight_sync_s": "seconds to send the trained weights once",
                "offload_s": "seconds of one offload + onload of a collocated phase switch (null: impossible)",
                "accelerator_memory_gib": "GiB of one accelerator"}
    for key, what in required.items():
        if key not in raw:
            raise ProfileError(f"profile.{key}", f"missing (required): {what}")
    try:
        profile = parse_section(Profile, raw, "profile")
    except ProfileError:
        raise
    except ConfigError as exc:
        raise ProfileError(exc.key, str(exc).split(": ", 1)[1]) from None
    object.__setattr__(profile, "source", source)
    return profile
