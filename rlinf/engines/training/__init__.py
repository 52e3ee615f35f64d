"""Training engines: FSDP2 (``fsdp``); Megatron arrives with its own issue."""
