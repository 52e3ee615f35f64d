"""``make_rollout_engine``: ``rollout.backend`` -> a :class:`RolloutEngine`.

Example:
    >>> from rlinf.config.rollout import RolloutConfig
    >>> make_rollout_engine("tensorrt", "/nowhere", RolloutConfig())
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: rollout.backend: unknown rollout backend 'tensorrt'; allowed: huggingface, vllm, sglang
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

from typing import Any

from rlinf.config.rollout import RolloutConfig
from rlinf.engines.rollout.base import RolloutEngine
from rlinf.engines.rollout.hf import HFRolloutEngine
from rlinf.engines.rollout.hf_vlm import HFVLMRolloutEngine
from rlinf.engines.rollout.sglang_engine import SGLangRolloutEngine
from rlinf.engines.rollout.vllm_engine import VLLMRolloutEngine
from rlinf.models.vlm.load import is_vlm_folder
from rlinf.utils.typed_config import ConfigError

BACKENDS = ("huggingface", "vllm", "sglang")


def make_rollout_engine(backend: str, model_path: str, rollout_cfg: Any = None, *,
                        tokenizer_path: str | None = None, **kw: Any) -> RolloutEngine:
    """Build the engine named by ``rollout.backend`` for ``model_path``.

    ``tokenizer_path`` (the run's tokenizer folder) lets vLLM detokenize, so that it ends a
    response at a ``sampling.stop`` string; the HF engine takes the tokenizer object instead
    (:meth:`~rlinf.engines.rollout.base.RolloutEngine.set_tokenizer`).

    ``rollout_cfg`` (a :class:`~rlinf.config.rollout.RolloutConfig`, default: its defaults) supplies
    the engine knobs that apply to the backend; ``kw`` are passed to the engine constructor and
    win over them (e.g. ``device`` / ``dtype`` / ``max_batch_size`` for huggingface, ``dtype`` /
    ``max_model_len`` / ``engine_kwargs`` for vllm).
    """
    if backend not in BACKENDS:
        # ConfigError is a ValueError whose message starts with the key path.
        raise ConfigError("rollout.backend", f"unknown rollout backend {backend!r}; "
                                             f"allowed: {', '.join(BACKENDS)}")
    if rollout_cfg is None:
        rollout_cfg = RolloutConfig(backend=backend)
    if backend == "huggingface":
        args: dict[str, Any] = dict(eos_token_id=rollout_cfg.eos, pad_token_id=rollout_cfg.padding,
                                    decode=rollout_cfg.hf_decode)
        args.update(kw)
        engine_cls = HFVLMRolloutEngine if is_vlm_folder(model_path) else HFRolloutEngine
        return engine_cls(model_path, **args)
    if is_vlm_folder(model_path):
        raise ConfigError("rollout.backend", f"{model_path} is a vision-language model; its rollout runs on "
                                             f"huggingface only for now, not {backend}")
    if backend == "vllm":
        return VLLMRolloutEngine.from_config(model_path, rollout_cfg, **{"tokenizer": tokenizer_path, **kw})
    return SGLangRolloutEngine.from_config(model_path, rollout_cfg, **kw)
