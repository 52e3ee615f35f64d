"""The embodied recipes' memory estimate (:meth:`~rlinf.runners.embodied.recipe.EmbodiedRecipe.memory_estimate`;
the off-policy recipe adds its replay buffer): simulators by measured figures per process and per
env, the policy by its parameter count (MLP / CNN), a VLA's language model by its ``config.json``,
π0 / π0.5 by its checkpoint's headers. docs/memory.md lists what each role counts.

Example (the toy task with an MLP policy on a CPU run)::

    >>> from rlinf.config.embodied import EmbodiedConfig
    >>> from rlinf.scheduler.memory import Capacity
    >>> cfg = EmbodiedConfig.from_dict({"cluster": {"num_nodes": 1, "accelerators_per_node": 1,
    ...     "component_placement": {"env,rollout,actor": "all"}}, "runner": {"task_type": "embodied"},
    ...     "algorithm": {"adv_type": "gae"}, "critic": {"use_critic_model": True},
    ...     "env": {"train": {"env_type": "toy", "total_num_envs": 4},
    ...             "eval": {"env_type": "toy", "total_num_envs": 4}},
    ...     "actor": {"model": {"model_type": "mlp", "action_dim": 2, "num_action_chunks": 1},
    ...               "micro_batch_size": 4, "global_batch_size": 8}})
    >>> est = embodied_memory(cfg, cfg.cluster.plan(), Capacity(kind="cpu"), False)
    >>> est.components["env"].note, [i.name for i in est.components["actor"].items]
    ('toy env: numpy arrays only', ['weights', 'gradients', 'optimizer'])
"""

from __future__ import annotations

import math

from rlinf.config.memory import DTYPE_BYTES, ModelShape, frozen_items, training_items
from rlinf.runners.memory_check import MIB, dtype_size, fsdp_remedies, fsdp_setup
from rlinf.scheduler.memory import Capacity, ComponentMemory, MemoryEstimate, MemoryItem
from rlinf.utils.typed_config import ConfigError

__all__ = ["embodied_memory"]

#: Measured here (bench/README.md "Memory estimate"): RSS of a spawned ManiSkill PushCube simulator
#: process with one CPU-simulated env (state obs; Python, torch, SAPIEN), and each further env in it.
MANISKILL_PROCESS = 559 * MIB
MANISKILL_ENV = int(2.3 * MIB)
#: ManiSkill's first env inside the env worker itself (``sim_in_worker``: no process of its own).
MANISKILL_IN_WORKER = 164 * MIB
#: LIBERO: one simulator process with one env (robosuite + MuJoCo with EGL rendering, two 128 x 128
#: cameras, libero_spatial task 0), measured here.
LIBERO_PROCESS = 2083 * MIB


def _pi0_params(path: str) -> tuple[int, int]:
    """``(all, PaliGemma's)`` parameters of a π0 / π0.5 folder, from its safetensors headers
    (zeros when unreadable: the preflight names the folder's problem)."""
    from rlinf.models.embodied.pi0 import Pi0CheckpointError, inspect_pi0_folder  # lazy: torch (~3 s) only for π0

    try:
        shapes = inspect_pi0_folder(path).shapes()
    except (Pi0CheckpointError, OSError):
        return 0, 0
    vlm = sum(math.prod(v) for k, v in shapes.items() if k.startswith("paligemma_with_expert.paligemma."))
    return sum(math.prod(v) for v in shapes.values()), vlm


def _pi0_memory(cfg, out: dict, ws: int) -> None:
    """π0 / π0.5 weights in ``actor.model.precision`` (the rollout's whole, the actor's sharded over
    its ``ws`` ranks by FSDP2); gradients and AdamW state (same dtype) for the trained part (without
    PaliGemma under ``train_expert_only``). Activations not estimated."""
    model = cfg.actor.model
    total, vlm = _pi0_params(model.model_path)
    size = DTYPE_BYTES.get(model.precision, 4)
    trained = total - vlm if model.policy.train_expert_only else total
    note = f"~{total / 1e9:.2f}B params ({model.precision})"
    w = [MemoryItem("weights", total * size // ws, note=note + (f" / {ws} ranks" if ws > 1 else ""))]
    train = w + [MemoryItem("gradients", trained * size // ws, note=f"~{trained / 1e9:.2f}B trained params"),
                 MemoryItem("optimizer", 2 * trained * size // ws)]
    out["rollout"] = ComponentMemory("rollout", (MemoryItem("weights", total * size, note=note),),
                                     note="activations not estimated")
    out["actor"] = ComponentMemory("actor", tuple(train), ("actor.micro_batch_size",
                                                           "actor.model.train_expert_only: true"),
                                   "activations not estimated")


def _policy_shape(cfg) -> tuple[ModelShape | None, int]:
    """An embodied policy's LM shape (VLAs) or None, and a parameter count for small policies."""
    model = cfg.actor.model
    if (model.model_type or "").lower() in ("openvla", "openvla_oft") and model.model_path:
        return ModelShape.from_folder(model.model_path, "actor.model.model_path"), 0
    widths = list(model.policy.policy_hidden_sizes or (256, 256, 256))
    dims = [128] + widths + [model.policy.action_dim or 8]
    mlp = sum(a * b + b for a, b in zip(dims, dims[1:]))
    return None, 2 * mlp + (2_000_000 if (model.model_type or "") == "cnn" else 0)


def embodied_memory(cfg, plan, capacity: Capacity, on_gpu: bool) -> MemoryEstimate:
    """An embodied run's roles: env (simulators, measured per process and env), rollout and actor
    (the policy: an MLP / CNN by its parameter count, a VLA's language model, π0 / π0.5 from
    its checkpoint's headers)."""
    out: dict[str, ComponentMemory] = {}
    env = cfg.env.train
    ews = plan.component("env").world_size
    per_proc = -(-max(env.total_num_envs or 1, cfg.env.eval.total_num_envs or 1) // ews)
    if env.env_type == "maniskill" and env.init_params.sim_backend == "gpu":
        out["env"] = ComponentMemory("env", (), note="ManiSkill GPU simulation: not estimated")
    elif env.env_type == "maniskill":
        if env.sim_in_worker:
            b = MANISKILL_IN_WORKER + (per_proc - 1) * MANISKILL_ENV
        else:
            procs = -(-per_proc // env.envs_per_process)
            b = procs * MANISKILL_PROCESS + (per_proc - procs) * MANISKILL_ENV
        out["env"] = ComponentMemory("env", (MemoryItem("simulators", b, where="host",
                                                        note=f"{per_proc} ManiSkill envs (measured per env)"),),
                                     ("env.train.total_num_envs", "more env ranks (cluster.component_placement)"))
    elif env.env_type == "libero":
        out["env"] = ComponentMemory("env", (MemoryItem("simulators", per_proc * LIBERO_PROCESS, where="host",
                                                        note=f"{per_proc} LIBERO processes (measured)"),),
                                     ("env.train.total_num_envs", "more env ranks (cluster.component_placement)"))
    elif env.env_type == "toy":
        out["env"] = ComponentMemory("env", (), note="toy env: numpy arrays only")
    else:
        out["env"] = ComponentMemory("env", (), note=f"{env.env_type} simulators: not estimated")
    try:
        shape, small = _policy_shape(cfg)
    except ConfigError as exc:
        return MemoryEstimate(out, (f"rollout / actor not estimated: {exc}",))
    actor = cfg.actor
    ws = plan.component("actor").world_size
    if (actor.model.model_type or "").lower() in ("pi0", "pi05") and actor.model.model_path:
        _pi0_memory(cfg, out, ws)
    elif shape is None:
        w = [MemoryItem("weights", small * 4, note=f"~{small / 1e6:.2f}M params (mlp/cnn)")]
        train = w + [MemoryItem("gradients", small * 4), MemoryItem("optimizer", small * 8)]
        out["rollout"] = ComponentMemory("rollout", tuple(w))
        out["actor"] = ComponentMemory("actor", tuple(train), ("actor.micro_batch_size",))
    else:
        tokens = (actor.model.policy.action_dim or 7) * (actor.model.policy.num_action_chunks or 1)
        seq = 256 * actor.model.policy.num_images_in_input + (cfg.runner.max_prompt_length or 64) + tokens
        micro = actor.micro_batch_size or 1
        n_micro = max(1, (actor.global_batch_size or micro) // ws // micro)
        setup = fsdp_setup(actor, shape, ws, micro, seq, tokens, cfg.algorithm.entropy_bonus > 0, n_micro)
        out["actor"] = ComponentMemory("actor", tuple(training_items(setup)), fsdp_remedies(
            actor, "actor", "actor.micro_batch_size", True, False), shape.describe() + " (language model only)")
        out["rollout"] = ComponentMemory("rollout", tuple(frozen_items(
            shape, dtype_size(actor.model.precision), 1, actor.model.policy.val_micro_batch_size or per_proc, seq,
            tokens)),
            ("actor.model.val_micro_batch_size",), shape.describe())
    return MemoryEstimate(out)
