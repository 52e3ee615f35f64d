"""Embodied policies: one interface (:class:`EmbodiedPolicy`, :class:`PolicyOutput`), three models.

* :class:`MLPPolicy` — Gaussian MLP actor + MLP critic on state vectors (``model_type: mlp``).
* :class:`CNNPolicy` — NatureCNN encoder on camera images (+ state), Gaussian actions
  (``model_type: cnn``).
* :class:`OpenVLAOFTPolicy` — an OpenVLA-OFT-style VLA (SigLIP [+ DINOv2] -> projector -> causal
  LM, action tokens decoded in parallel, value head, LoRA), a local HF model folder
  (``model_type: openvla_oft``); imported lazily, since it pulls in transformers.

:func:`build_policy` builds one from ``actor.model`` and an :class:`ObsSpec`. Conventions (shapes,
raw actions, value levels) are in :mod:`rlinf.models.embodied.base`.
"""

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
    "OpenVLAOFTConfig",
    "OpenVLAOFTPolicy",
    "PolicyOutput",
    "build_policy",
]

_LAZY = {
    "OpenVLAOFTPolicy": "rlinf.models.embodied.openvla_oft.modeling",
    "OpenVLAOFTConfig": "rlinf.models.embodied.openvla_oft.configuration",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
