"""``actor.megatron.use_hf_ckpt``: convert the HF checkpoint to Megatron format once, then reuse it.

A conversion lands in ``<save_path>/<name>-tp<T>-pp<P>-<key>`` where ``key`` hashes the HF
checkpoint's content (``config.json`` bytes and the sha256 of its weight files, as recorded by the
converter) together with the parallel sizes and the vocabulary padding. The same HF folder with
the same sizes finds its earlier conversion; changed weights or sizes get a new one.

Hashing a 60 GB checkpoint takes minutes, so the weight digest is memoised in
``<save_path>/hf_digests.json`` per HF folder, keyed by each weight file's name, size and
modification time: an unchanged folder is not read again.

Example:
    >>> import tempfile, pathlib, torch
    >>> from safetensors.torch import save_file
    >>> folder, cache = pathlib.Path(tempfile.mkdtemp()), pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "config.json").write_text("{}")
    >>> save_file({"w": torch.ones(2)}, str(folder / "model.safetensors"))
    >>> key = cache_key(folder, cache, tp=2, pp=1, divisible_by=128)
    >>> key == cache_key(folder, cache, tp=2, pp=1, divisible_by=128)   # memoised digest
    True
    >>> key == cache_key(folder, cache, tp=1, pp=1, divisible_by=128)   # other sizes
    False
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from rlinf.engines.training.megatron.checkpoint_io import META_FILE, HFWeights
from rlinf.engines.training.megatron.convert import ConversionError, hf_to_megatron

DIGEST_MEMO = "hf_digests.json"
DEFAULT_CACHE = os.path.join("~", ".cache", "rlinf", "megatron")
_WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")


def _weight_files(folder: Path) -> list[Path]:
    for pattern in _WEIGHT_GLOBS:
        files = sorted(folder.glob(pattern))
        if files:
            return files
    return []


def weights_digest(folder: str | os.PathLike, cache_root: str | os.PathLike) -> str:
    """sha256 of the HF folder's weight files (the converter's ``content_hash``), memoised by
    the files' names, sizes and modification times."""
    folder = Path(folder).absolute()
    stats = [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in _weight_files(folder)]
    memo_path = Path(cache_root) / DIGEST_MEMO
    memo = json.loads(memo_path.read_text()) if memo_path.is_file() else {}
    entry = memo.get(str(folder))
    if entry is not None and entry["files"] == stats:
        return entry["sha256"]
    digest = HFWeights(folder).content_hash()
    memo[str(folder)] = {"files": stats, "sha256": digest}
    memo_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo_path.with_name(f".{memo_path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(memo, indent=1, sort_keys=True))
    tmp.replace(memo_path)
    return digest


def cache_key(hf_path: str | os.PathLike, cache_root: str | os.PathLike, *, tp: int, pp: int,
              divisible_by: int) -> str:
    """16 hex digits identifying (HF config + weights, tp, pp, vocabulary padding)."""
    h = hashlib.sha256()
    h.update((Path(hf_path) / "config.json").read_bytes())
    h.update(weights_digest(hf_path, cache_root).encode())
    h.update(f"tp={tp};pp={pp};divisible_by={divisible_by}".encode())
    return h.hexdigest()[:16]


def converted_checkpoint(hf_path: str | os.PathLike, save_path: str | None, *, tp: int, pp: int,
                         divisible_by: int = 128, name: str | None = None) -> Path:
    """The Megatron checkpoint of ``hf_path`` for ``tp`` x ``pp``, converted now unless the cache
    holds it. Run it on one process (the others wait for it)."""
    root = Path(os.path.expanduser(save_path or DEFAULT_CACHE)).absolute()
    key = cache_key(hf_path, root, tp=tp, pp=pp, divisible_by=divisible_by)
    label = (name or Path(hf_path).absolute().name).replace(os.sep, "_")
    target = root / f"{label}-tp{tp}-pp{pp}-{key}"
    if not (target / META_FILE).is_file():
        # written to a temporary sibling and renamed when complete: a crash leaves no half folder
        try:
            hf_to_megatron(hf_path, target, tp, pp, make_vocab_size_divisible_by=divisible_by,
                           overwrite=target.exists())
        except ConversionError:
            if not (target / META_FILE).is_file():  # else another run converted it meanwhile
                raise
    return target
