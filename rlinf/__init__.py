"""rlinf: reinforcement learning infrastructure where one YAML line per component decides where it runs."""

__version__ = "0.1.0"
