"""Typed config sections (keys as in the reference YAML) and the root configs of each run type.

The package imports nothing heavy by itself (the Hydra entries import
``rlinf.config.resolvers`` before anything else, and ``--help`` / ``--cfg`` should not pay for
torch); ``MathConfig`` and ``MATH_COMPONENTS`` load on first use.
"""

from rlinf.utils.typed_config import ConfigError

__all__ = ["ConfigError", "MATH_COMPONENTS", "MathConfig"]


def __getattr__(name: str):
    if name in ("MathConfig", "MATH_COMPONENTS"):
        # lazy: rlinf.config.math pulls torch (~3 s); --help / --cfg and the reference doc do not
        from rlinf.config import math

        return getattr(math, name)
    raise AttributeError(f"module 'rlinf.config' has no attribute {name!r}")
