"""The math (LLM) RL recipe: ``recipe`` (the recipe), ``preflight`` (checks before Ray), ``groups``
(launch), ``pipeline`` (rollout -> reward -> log-probs), ``loop`` (the training step)."""
