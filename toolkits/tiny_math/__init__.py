"""Tiny, fully local assets for the CPU math GRPO job.

Everything here is built on the machine, with no download: a synthetic arithmetic dataset
(:mod:`.make_dataset`), a small byte-level BPE tokenizer with a ChatML template (:mod:`.tokenizer`),
a randomly initialised ``Qwen2ForCausalLM`` (:mod:`.make_model`), a short supervised warm start
(:mod:`.warm_start`), a greedy evaluator (:mod:`.evaluate`) and a standalone GRPO sanity loop
(:mod:`.grpo_probe`) that shows the pieces leave room for reinforcement learning to help.
"""
