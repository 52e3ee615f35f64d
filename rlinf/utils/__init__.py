"""Helpers with no RL knowledge, usable by every layer (typed config parsing)."""
