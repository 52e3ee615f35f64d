"""The embodied RL recipe: ``main`` (entry) and ``loop`` (groups, rollouts, the training step)."""
