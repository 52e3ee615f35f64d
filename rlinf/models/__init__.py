"""Policy models. ``rlinf.models.embodied``: the embodied policies (MLP, CNN, OpenVLA-OFT-style VLA)
behind one interface, and :func:`build_policy`, which builds one from ``actor.model``.
``rlinf.models.vlm``: Qwen2.5-VL / Qwen3-VL loading and prompt rendering with the torchvision-free
image processor (docs/vlm.md).

Layering: beside ``rlinf/engines/`` (layer 3); imports ``rlinf.config``, ``rlinf.data`` (``vlm``:
the tokenizer loader) and ``rlinf.utils`` only, and is imported by workers and runners.
"""

from rlinf.models.embodied import EmbodiedPolicy, ObsSpec, PolicyOutput, build_policy

__all__ = ["EmbodiedPolicy", "ObsSpec", "PolicyOutput", "build_policy"]
