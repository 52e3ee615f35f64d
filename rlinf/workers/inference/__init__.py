"""Inference workers: frozen-policy forward passes (reference log-probs)."""
