"""Rollout engines: HF generate (``huggingface``), vLLM (``vllm``), SGLang (``sglang``, GPU only)."""
