"""Env workers: simulators stepped under the runtime."""
