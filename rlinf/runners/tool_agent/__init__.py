"""The tool-agent recipe: multi-turn RL with tools (see :mod:`.recipe`)."""
