"""Tools for vision-language models: ``make_tiny_vlm`` writes tiny random Qwen-VL checkpoints."""
