"""The actor: trains the policy with a training engine; objectives come from the config."""
