"""Inputs of π0 / π0.5: camera images, the PaliGemma SentencePiece prompt, the state.

* Images: ``resize_with_pad`` to the model's side (aspect kept, black padding centred as
  ``tf.image.resize_with_pad``; bilinear, uint8 rounded back, as openpi's torch path), then
  ``x / 255 * 2 - 1``. Camera slots are fixed per checkpoint (openpi: ``base_0_rgb``,
  ``left_wrist_0_rgb``, ``right_wrist_0_rgb``); an absent camera is a black image whose mask is
  False (its tokens are never attended to).
* Prompt: the PaliGemma SentencePiece ``.model`` read as is (``sentencepiece``), BOS first,
  right-padded with id 0 to ``max_len`` (mask False), truncated beyond. Text cleaned as openpi
  (strip, ``_`` and newlines -> spaces). Formats (:data:`PROMPT_FORMATS`):

  - ``pi0``: ``encode(text) + encode("\\n")`` (openpi π0, and π0.5 without discrete state);
  - ``pi0_lerobot``: ``encode(text + "\\n")`` (LeRobot's π0 appends the newline to the task);
  - ``pi05_state``: ``encode("Task: {text}, State: {bins};\\nAction: ")`` where ``bins`` are the
    normalised (unpadded) state values digitised into 256 bins of [-1, 1].

Example:
    >>> discretize_state(torch.tensor([[-1.0, 0.0, 0.999, 2.0, -2.0]])).tolist()
    [[0, 128, 255, 255, -1]]
    >>> resize_with_pad(torch.full((1, 4, 8, 3), 255, dtype=torch.uint8), 8, 8)[0, :, 0, 0].tolist()
    [0, 0, 255, 255, 255, 255, 0, 0]
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

OPENPI_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
PROMPT_FORMATS = ("pi0", "pi0_lerobot", "pi05_state")
STATE_BINS = 256


def resize_with_pad(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``[N, H, W, C]`` uint8 (or float in [-1, 1]) -> ``[N, height, width, C]`` of the same dtype,
    aspect kept, padded with black (0, or -1 for floats)."""
    if images.dim() != 4:
        raise ValueError(f"images must be [N, H, W, C], got shape {tuple(images.shape)}")
    n, h, w, c = images.shape
    if (h, w) == (height, width):
        return images
    ratio = max(w / width, h / height)
    rh, rw = int(h / ratio), int(w / ratio)
    x = F.interpolate(images.permute(0, 3, 1, 2).float(), size=(rh, rw), mode="bilinear", align_corners=False)
    if images.dtype == torch.uint8:
        x = torch.round(x).clamp(0, 255)
        fill = 0.0
    else:
        x = x.clamp(-1.0, 1.0)
        fill = -1.0
    top, left = (height - rh) // 2, (width - rw) // 2
    x = F.pad(x, (left, width - rw - left, top, height - rh - top), value=fill)
    return x.permute(0, 2, 3, 1).to(images.dtype)


def to_model_images(images, size: int) -> torch.Tensor:
    """Camera images ``[N, H, W, 3]`` (uint8, or float on the 0..255 scale) -> ``[N, 3, size,
    size]`` float32 in [-1, 1]."""
    if not isinstance(images, torch.Tensor):
        images = torch.as_tensor(np.asarray(images))
    x = images
    if x.dim() != 4 or x.shape[-1] != 3:
        raise ValueError(f"camera images must be [N, H, W, 3], got shape {tuple(x.shape)}")
    if x.dtype != torch.uint8:
        x = x.float().round().clamp(0, 255).to(torch.uint8)
    x = resize_with_pad(x, size, size)
    return (x.permute(0, 3, 1, 2).float() / 255.0) * 2.0 - 1.0


def camera_batch(cameras: Sequence, num_slots: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fills the model's camera slots: ``cameras[i]`` (``[N, H, W, 3]`` or None) goes to slot ``i``.

    Returns:
        ``(images [N, num_slots, 3, size, size], masks [N, num_slots] bool)``; absent slots are
        black (-1) with mask False.
    """
    if len(cameras) > num_slots:
        raise ValueError(f"{len(cameras)} cameras given; the checkpoint has {num_slots} camera slots")
    present = [to_model_images(c, size) for c in cameras if c is not None]
    if not present:
        raise ValueError("at least one camera image is needed")
    n = present[0].shape[0]
    images = torch.full((n, num_slots, 3, size, size), -1.0)
    masks = torch.zeros(n, num_slots, dtype=torch.bool)
    it = iter(present)
    for i, cam in enumerate(cameras):
        if cam is None:
            continue
        img = next(it)
        if img.shape[0] != n:
            raise ValueError(f"camera {i} has {img.shape[0]} images, camera 0 has {n}")
        images[:, i], masks[:, i] = img, True
    return images, masks


def discretize_state(state: torch.Tensor) -> torch.Tensor:
    """Normalised state ``[N, D]`` -> int64 bins in ``[0, 255]`` (``digitize(x, linspace(-1, 1,
    257)[:-1]) - 1``, exactly as openpi: above 1 gives 255, below -1 gives -1)."""
    edges = torch.linspace(-1.0, 1.0, STATE_BINS + 1, dtype=torch.float64)[:-1]
    return torch.bucketize(state.double(), edges, right=True) - 1


def clean_text(text: str) -> str:
    """openpi's prompt cleaning: strip, ``_`` -> space, newline -> space."""
    return str(text).strip().replace("_", " ").replace("\n", " ")


class PaliGemmaTokenizer:
    """The PaliGemma SentencePiece model (``paligemma_tokenizer.model``), read with
    ``sentencepiece``.

    Args:
        path: the ``.model`` file.

    Raises:
        ValueError: unreadable file (one line naming it).
    """

    def __init__(self, path: str | os.PathLike):
        # lazy: sentencepiece (embodied extra) only when a tokenizer is loaded
        import sentencepiece

        self.path = str(path)
        try:
            with open(path, "rb") as f:
                self.sp = sentencepiece.SentencePieceProcessor(model_proto=f.read())
        except (OSError, RuntimeError) as err:
            raise ValueError(f"{path}: not a SentencePiece model ({err})") from None

    @property
    def vocab_size(self) -> int:
        """Pieces in the model."""
        return int(self.sp.get_piece_size())

    def prompt_ids(self, text: str, fmt: str, state_bins: Sequence[int] | None = None) -> list[int]:
        """Ids of one prompt (BOS first) in the format ``fmt`` (see the module docstring)."""
        if fmt == "pi0":
            return list(self.sp.encode(clean_text(text), add_bos=True)) + list(self.sp.encode("\n"))
        if fmt == "pi0_lerobot":
            return list(self.sp.encode(str(text) + "\n", add_bos=True))
        if fmt == "pi05_state":
            if state_bins is None:
                raise ValueError("the pi05_state prompt needs the discretised state")
            state = " ".join(str(int(b)) for b in state_bins)
            return list(self.sp.encode(f"Task: {clean_text(text)}, State: {state};\nAction: ", add_bos=True))
        raise ValueError(f"prompt format must be one of {PROMPT_FORMATS}, got {fmt!r}")

    def batch(self, texts: Sequence[str], fmt: str, max_len: int,
              state_bins: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids [N, max_len] int64, mask [N, max_len] bool)``, right-padded with 0."""
        ids = torch.zeros(len(texts), max_len, dtype=torch.long)
        mask = torch.zeros(len(texts), max_len, dtype=torch.bool)
        for i, text in enumerate(texts):
            row = self.prompt_ids(text, fmt, None if state_bins is None else state_bins[i].tolist())[:max_len]
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = True
        return ids, mask
