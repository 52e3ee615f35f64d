"""Training engines behind one interface (``base.TrainingEngine``): FSDP2 (``fsdp``),
megatron-core (``megatron/engine.py``, with the HF <-> Megatron converter in ``megatron/``) and
DeepSpeed ZeRO (``deepspeed_engine``, JSON handling in ``deepspeed_config``)."""
