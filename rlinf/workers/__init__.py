"""Workers: actor, rollout, inference, reward and env workers composing engines (layer 4)."""
