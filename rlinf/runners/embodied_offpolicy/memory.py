"""What the off-policy recipe adds to the embodied memory estimate: the replay buffer (and the
demonstrations, RLPD) that the actor process preallocates, ``replay_buffer.capacity`` x the bytes
of one transition (:func:`~rlinf.data.replay_buffer.transition_bytes`: two states, the action,
reward, discount and the termination flag).

The state size is the train simulator's: what the checks before Ray probed (``start``), or, from
the placement CLI (no checks run), the same probe run here (one environment built and reset, a few
seconds for ManiSkill; cached per process). A probe that fails leaves the buffer out with a note.

Example (the toy task: 4-number states, 2-number actions)::

    >>> from rlinf.config.embodied_offpolicy import OffPolicyEmbodiedConfig
    >>> cfg = OffPolicyEmbodiedConfig.from_dict({"cluster": {"num_nodes": 1, "accelerators_per_node": 1,
    ...     "component_placement": {"env,rollout,actor": "all"}}, "runner": {"task_type": "embodied"},
    ...     "algorithm": {"loss_type": "embodied_sac", "replay_buffer": {"capacity": 1000}},
    ...     "env": {"train": {"env_type": "toy", "total_num_envs": 4, "auto_reset": True},
    ...     "eval": {"env_type": "toy", "total_num_envs": 4}},
    ...     "actor": {"model": {"model_type": "sac_mlp", "action_dim": 2}, "global_batch_size": 8}})
    >>> (item,), notes = buffer_items(cfg)
    >>> item.name, item.bytes, item.note, notes
    ('replay buffer', 49000, '1000 transitions x 49 B (4-number states)', ())
"""

from __future__ import annotations

from typing import Any

from rlinf.data.replay_buffer import transition_bytes
from rlinf.runners.embodied.sim_probe import probe_obs_spec
from rlinf.scheduler.memory import MemoryItem
from rlinf.utils.typed_config import ConfigError

__all__ = ["buffer_items"]


def _state_dim(cfg: Any, start: Any) -> int:
    if start is not None:
        return int(start.obs_specs["train"].state_dim)
    return int(probe_obs_spec(cfg.env.train, "env.train").state_dim)


def buffer_items(cfg: Any, start: Any = None) -> tuple[tuple[MemoryItem, ...], tuple[str, ...]]:
    """The actor's host items (the replay buffer; the demonstrations once ``start`` has read
    them) and notes on what could not be sized."""
    cap = cfg.algorithm.replay_buffer.capacity
    try:
        obs_dim = _state_dim(cfg, start)
    except ConfigError as exc:
        return (), (f"replay buffer ({cap} transitions) not estimated: the state size is unknown: {exc}",)
    row = transition_bytes(obs_dim, int(cfg.actor.model.policy.action_dim))
    items = [MemoryItem("replay buffer", cap * row, where="host",
                        note=f"{cap} transitions x {row} B ({obs_dim}-number states)")]
    notes: tuple[str, ...] = ()
    demos = getattr(start, "demos", None)
    if demos is not None:
        n = int(demos["reward"].shape[0])
        items.append(MemoryItem("demonstrations", n * row, where="host", note=f"{n} transitions x {row} B"))
    elif cfg.algorithm.demo_buffer is not None:
        notes = (f"demonstrations ({cfg.algorithm.demo_buffer.load_path}) are sized at start, once the file is read",)
    return tuple(items), notes
