"""HF <-> Megatron checkpoint converters (``hf_to_megatron``, ``megatron_to_hf``); the logic is in
:mod:`rlinf.engines.training.megatron.convert`, the guide in ``docs/checkpoint_converter.md``."""
