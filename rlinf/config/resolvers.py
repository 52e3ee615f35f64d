"""OmegaConf resolvers the reference configs use (``${subtract:a, b}`` ...). Registered once.

>>> from omegaconf import OmegaConf
>>> register_resolvers()
>>> OmegaConf.create({"a": 10, "b": 3, "c": "${subtract:${a}, ${b}}"}).c
7
"""

from __future__ import annotations

from omegaconf import OmegaConf


def register_resolvers() -> None:
    """Register ``subtract``, ``add``, ``multiply`` and ``int_div`` (idempotent)."""
    resolvers = {
        "subtract": lambda a, b: a - b,
        "add": lambda a, b: a + b,
        "multiply": lambda a, b: a * b,
        "int_div": lambda a, b: a // b,
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
