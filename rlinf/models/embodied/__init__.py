"""Embodied policies: one interface (:class:`EmbodiedPolicy`, :class:`PolicyOutput`), three models.

* :class:`MLPPolicy` — Gaussian MLP actor + MLP critic on state vectors (``model_type: mlp``).
* :class:`CNNPolicy` — NatureCNN encoder on camera images (+ state), Gaussian actions
  (``model_type: cnn``).
* :class:`OpenVLAPolicy` — a real OpenVLA (``model_type: openvla``, autoregressive action tokens)
  or OpenVLA-OFT (``openvla_oft``, parallel decoding) checkpoint folder, with RLinf's value head
  and LoRA adapters; imported lazily, since it pulls in transformers.

:func:`build_policy` builds one from ``actor.model`` and an :class:`ObsSpec`. Conventions (shapes,
raw actions, value levels) are in :mod:`rlinf.models.embodied.base`.
"""

import importlib

from rlinf.models.embodied.base import EmbodiedPolicy, ObsSpec, PolicyOutput
from rlinf.models.embodied.cnn_policy import CNNPolicy, CNNPolicyConfig
from rlinf.models.embodied.factory import build_policy
from rlinf.models.embodied.mlp_policy import MLPPolicy, MLPPolicyConfig

__all__ = [
    "CNNPolicy",
    "CNNPolicyConfig",
    "EmbodiedPolicy",
    "MLPPolicy",
    "MLPPolicyConfig",
    "ObsSpec",
    "OpenVLAPolicy",
    "PolicyOutput",
    "build_policy",
]

_LAZY = {
    "OpenVLAPolicy": "rlinf.models.embodied.openvla.modeling",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
