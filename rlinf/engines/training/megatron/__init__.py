"""Megatron-core support: the HF <-> Megatron weight layout (``layout``, pure tensors), the
GPTModel builder (``model``), the converted checkpoint format (``checkpoint_io``) and the
conversions with their checks (``convert``); and the training engine built on them
(``engine`` with ``engine_setup``, ``runtime``, ``inputs``, ``logprobs``, ``optimizer``,
``offload``, ``weight_sync``, ``hf_cache``; see docs/megatron_backend.md).

``layout`` and ``checkpoint_io`` import no megatron code; ``model`` and the logit check of
``convert`` need the ``megatron`` extra (megatron-core 0.16).
"""
