"""Typed config sections (keys as in the reference YAML) and the root configs of each run type."""

from rlinf.config.math import MATH_COMPONENTS, MathConfig
from rlinf.utils.typed_config import ConfigError

__all__ = ["ConfigError", "MATH_COMPONENTS", "MathConfig"]
