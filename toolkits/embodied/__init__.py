"""Local assets for embodied RL: tiny randomly initialised policies built on the machine, no download."""
