"""Translate AReaL and ROLL configs into rlinf math configs: ``python -m rlinf.config.translate``
(see docs/translate.md)."""
