"""Policy models. ``rlinf.models.embodied``: the embodied policies (MLP, CNN, OpenVLA-OFT-style VLA)
behind one interface, and :func:`build_policy`, which builds one from ``actor.model``.

Layering: beside ``rlinf/engines/`` (layer 3); imports ``rlinf.config`` and ``rlinf.utils`` only,
and is imported by workers and runners.
"""

from rlinf.models.embodied import EmbodiedPolicy, ObsSpec, PolicyOutput, build_policy

__all__ = ["EmbodiedPolicy", "ObsSpec", "PolicyOutput", "build_policy"]
