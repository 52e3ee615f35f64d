"""The math (LLM) RL recipe: ``main`` (entry), ``groups`` (launch), ``pipeline`` (rollout -> reward -> log-probs), ``loop`` (the training step)."""
