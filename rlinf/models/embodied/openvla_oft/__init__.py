"""OpenVLA-OFT-style VLA policy from transformers' own classes (no timm / torchvision).

* :mod:`.configuration` — :class:`OpenVLAOFTConfig` (``model_type = "rlinf_openvla_oft"``).
* :mod:`.modeling` — :class:`OpenVLAOFTPolicy` (HF ``PreTrainedModel`` + ``EmbodiedPolicy``).
* :mod:`.action_tokenizer` — action bins <-> token ids, q01 / q99 (un)normalisation.
* :mod:`.text_tokenizer` — the locally trained byte-level BPE instruction tokenizer.
* :mod:`.tiny` — tiny random configs / folders for tests (``toolkits/embodied/make_tiny_vla.py``).
"""

from rlinf.models.embodied.openvla_oft.action_tokenizer import ActionTokenizer, normalize_actions, unnormalize_actions
from rlinf.models.embodied.openvla_oft.configuration import OpenVLAOFTConfig
from rlinf.models.embodied.openvla_oft.modeling import OpenVLAOFTPolicy, VLACore

__all__ = ["ActionTokenizer", "OpenVLAOFTConfig", "OpenVLAOFTPolicy", "VLACore", "normalize_actions",
           "unnormalize_actions"]
