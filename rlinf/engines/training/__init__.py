"""Training engines behind one interface (``base.TrainingEngine``): FSDP2 (``fsdp``) and
megatron-core (``megatron/engine.py``, with the HF <-> Megatron converter in ``megatron/``)."""
