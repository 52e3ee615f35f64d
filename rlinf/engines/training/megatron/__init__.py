"""Megatron-core support: the HF <-> Megatron weight layout (``layout``, pure tensors), the
GPTModel builder (``model``), the converted checkpoint format (``checkpoint_io``) and the
conversions with their checks (``convert``).

``layout`` and ``checkpoint_io`` import no megatron code; ``model`` and the logit check of
``convert`` need the ``megatron`` extra (megatron-core 0.16).
"""
