"""OpenVLA / OpenVLA-OFT checkpoints in their real format (``model_type: openvla`` /
``openvla_oft``): loading (:func:`load_openvla`), the policy (:class:`OpenVLAPolicy`), saving
back (:func:`save_openvla`), LoRA in RLinf's adapter layout (:func:`enable_lora`), tiny
real-format checkpoints for tests (:mod:`.tiny`). See ``docs/openvla_checkpoints.md``."""

from rlinf.models.embodied.openvla.checkpoint import CheckpointError, inspect_folder
from rlinf.models.embodied.openvla.loading import load_openvla, save_openvla
from rlinf.models.embodied.openvla.lora import enable_lora, merged_state_dict, save_lora_adapter
from rlinf.models.embodied.openvla.modeling import OpenVLAOptions, OpenVLAPolicy

__all__ = ["CheckpointError", "OpenVLAOptions", "OpenVLAPolicy", "enable_lora", "inspect_folder", "load_openvla",
           "merged_state_dict", "save_lora_adapter", "save_openvla"]
