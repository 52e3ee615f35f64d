"""The off-policy embodied recipe (SAC, CrossQ, RLPD on a replay buffer, sync and async): it
extends the embodied recipe (same simulators, env workers and checks) with its own loop."""
