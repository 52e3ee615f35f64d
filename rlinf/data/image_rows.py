"""Prompt rows with images: data files (see :mod:`rlinf.data.readers`) -> prompt, answer and
decoded ``PIL`` images, every image checked when the file is read.

A row's image field (``image_key``) holds one image or a list of them, each:

* a path, relative to the data file's folder or absolute (``"images/0001.png"``);
* a data URI with base64 bytes (``"data:image/png;base64,iVBOR..."``);
* an object ``{"bytes": <base64 text or raw bytes>}`` or ``{"path": <path>}`` (the layout of
  Hugging Face ``datasets``' Image column, e.g. from parquet).

A missing file, bad base64 or bytes that are not an image is one line naming the data file, the
row and the image (``ValueError``), or, with ``skip_bad=True``, that row is skipped and its line
collected in :attr:`ImageRows.skipped` (the caller prints the total).

The math run layer reads ``data.image_key`` with it before start
(:func:`rlinf.runners.math.preflight.image_prompt_rows`).

Example:
    >>> import json, os, tempfile
    >>> from PIL import Image
    >>> d = tempfile.mkdtemp()
    >>> Image.new("RGB", (8, 8), (255, 0, 0)).save(os.path.join(d, "red.png"))
    >>> rows = [{"prompt": "What colour?", "answer": "red", "images": ["red.png"]},
    ...         {"prompt": "And this?", "answer": "red", "images": ["gone.png"]}]
    >>> _ = open(os.path.join(d, "t.jsonl"), "w").write("\\n".join(json.dumps(r) for r in rows))
    >>> got = read_image_rows([os.path.join(d, "t.jsonl")], image_key="images", skip_bad=True)
    >>> got.rows[0]["answer"], got.rows[0]["images"][0].getpixel((0, 0)), len(got.skipped)
    ('red', (255, 0, 0), 1)
"""

from __future__ import annotations

import base64
import binascii
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlinf.data.readers import _messages, _records

DATA_URI_PREFIX = "data:"


@dataclass
class ImageRows:
    """Rows read: ``{"prompt", "answer", "images"}`` (``images``: RGB ``PIL.Image`` list, maybe
    empty), and the one-line reason of every skipped row."""

    rows: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _decode(data: bytes, name: str) -> Any:
    # lazy: Pillow only when images are read; text-only data never imports it
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise ValueError(f"{name} is not a readable image ({type(exc).__name__})") from None
    return image.convert("RGB")


def _b64(text: str, name: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{name} is not valid base64") from None


def load_image(entry: Any, base_dir: str) -> Any:
    """One image entry (path, data URI, ``{"bytes"}`` or ``{"path"}``) -> RGB ``PIL.Image``.

    Raises:
        ValueError: One line naming the entry (missing file, bad base64, not an image, bad form).
    """
    if isinstance(entry, dict) and entry.get("bytes") is not None:
        raw = entry["bytes"]
        data = _b64(raw, "inline bytes") if isinstance(raw, str) else raw
        if not isinstance(data, (bytes, bytearray)):
            raise ValueError(f"'bytes' must be base64 text or bytes, got {type(raw).__name__}")
        return _decode(bytes(data), "inline bytes")
    if isinstance(entry, dict) and isinstance(entry.get("path"), str):
        entry = entry["path"]
    if not isinstance(entry, str) or not entry:
        raise ValueError(f"an image must be a path, a data URI, or {{'bytes'|'path': ...}}; got {entry!r:.60}")
    if entry.startswith(DATA_URI_PREFIX):
        head, sep, payload = entry.partition(",")
        if not sep or not head.endswith(";base64"):
            raise ValueError(f"data URI {entry[:40]!r}... is not base64 ('data:<type>;base64,<data>')")
        return _decode(_b64(payload, f"data URI {head!r}"), f"data URI {head!r}")
    path = entry if os.path.isabs(entry) else os.path.join(base_dir, entry)
    if not os.path.isfile(path):
        raise ValueError(f"image file {path} not found")
    with open(path, "rb") as f:
        return _decode(f.read(), f"image file {path}")


def read_image_rows(paths: Sequence[str], image_key: str, prompt_key: str = "prompt",
                    answer_key: str = "answer", messages_key: str | None = None,
                    skip_bad: bool = False) -> ImageRows:
    """Every row of ``paths`` with its images decoded.

    Args:
        paths: Data files (``.jsonl``, ``.json``, ``.csv``, ``.parquet``).
        image_key: The row key holding the image(s); a row without it, or with ``null``, has none.
        prompt_key, answer_key, messages_key: As :func:`rlinf.data.readers.read_rows`.
        skip_bad: Skip a row whose image cannot be read (its line goes to ``skipped``) instead
            of raising.

    Raises:
        ValueError: One line naming the file and row: a missing prompt / answer key, or (unless
            ``skip_bad``) an image that cannot be read.
    """
    out = ImageRows()
    for path in paths:
        base_dir = os.path.dirname(os.path.abspath(path))
        for where, row in _records(path):
            if not isinstance(row, dict):
                raise ValueError(f"{where}: a row must be an object, got {type(row).__name__}")
            key = messages_key or prompt_key
            for k, name in ((key, "data.messages_key" if messages_key else "data.prompt_key"),
                            (answer_key, "data.answer_key")):
                if k not in row:
                    raise ValueError(f"{where}: row has no {k!r} key ({name})")
            entries = row.get(image_key)
            entries = [] if entries is None else entries if isinstance(entries, list) else [entries]
            try:
                images = []
                for i, entry in enumerate(entries):
                    try:
                        images.append(load_image(entry, base_dir))
                    except ValueError as exc:
                        raise ValueError(f"{where}: {image_key}[{i}]: {exc}") from None
            except ValueError as exc:
                if not skip_bad:
                    raise
                out.skipped.append(str(exc))
                continue
            prompt = _messages(row[key], where, key) if messages_key else str(row[key])
            out.rows.append({"prompt": prompt, "answer": str(row[answer_key]), "images": images})
    return out
