"""The converted checkpoint on disk: Megatron-LM's legacy ``torch`` layout plus a metadata file.

::

    <root>/latest_checkpointed_iteration.txt          "release"
    <root>/release/mp_rank_{tp:02d}/model_optim_rng.pt           (pp == 1)
    <root>/release/mp_rank_{tp:02d}_{pp:03d}/model_optim_rng.pt  (pp > 1)
    <root>/rlinf_megatron_meta.json                   family, hf config, tp, pp, layers, vocab

Each ``model_optim_rng.pt`` holds ``{"model": state_dict, "checkpoint_version": 3.0,
"iteration": 0}`` with megatron-core ``GPTModel`` names for that rank (layers numbered locally
per stage), so Megatron-LM's ``load_checkpoint`` (a release checkpoint: model only) and
``GPTModel.load_state_dict`` both take it. Everything in it is a tensor, ``None``, a float or an
int, so it loads with ``torch.load(weights_only=True)``.

:class:`HFWeights` reads a Hugging Face folder lazily (safetensors, or ``pytorch_model*.bin``);
:func:`write_hf_weights` writes one ``model.safetensors``.

Writes go to a temporary sibling folder that replaces the destination only when complete
(:func:`staged_destination`), so a failed conversion leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from rlinf.engines.training.megatron.layout import ConversionError

__all__ = [
    "HFWeights",
    "iteration_dir",
    "pp_size_of",
    "write_hf_weights",
    "META_FILE",
    "load_all_shards",
    "load_shard",
    "read_metadata",
    "shard_file",
    "staged_destination",
    "write_metadata",
    "write_shard",
]

META_FILE = "rlinf_megatron_meta.json"
TRACKER_FILE = "latest_checkpointed_iteration.txt"
CHECKPOINT_VERSION = 3.0


def iteration_dir(root: Path) -> Path:
    """The folder ``latest_checkpointed_iteration.txt`` points at (``release`` or ``iter_*``)."""
    tracker = root / TRACKER_FILE
    if not tracker.is_file():
        raise ConversionError(f"no {TRACKER_FILE} in {root} (not a megatron checkpoint)")
    text = tracker.read_text().strip()
    if text == "release":
        return root / "release"
    if text.isdigit():
        return root / f"iter_{int(text):07d}"
    raise ConversionError(f"{tracker} holds {text!r}, expected 'release' or an iteration")


def shard_file(root: str | os.PathLike, tp_rank: int, pp_rank: int, pp: int) -> Path:
    """Path of the ``model_optim_rng.pt`` of rank (``tp_rank``, ``pp_rank``) under ``root``.

    >>> shard_file("/ckpt", 1, 0, pp=1).as_posix(), shard_file("/ckpt", 0, 1, pp=2).parent.name
    ('/ckpt/release/mp_rank_01/model_optim_rng.pt', 'mp_rank_00_001')
    """
    name = f"mp_rank_{tp_rank:02d}" + (f"_{pp_rank:03d}" if pp > 1 else "")
    return Path(root) / "release" / name / "model_optim_rng.pt"


def write_shard(
    root: str | os.PathLike, tp_rank: int, pp_rank: int, pp: int, state_dict: dict[str, Any]
) -> Path:
    """Write one rank's model state dict as a release checkpoint file; returns its path."""
    path = shard_file(root, tp_rank, pp_rank, pp)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"model": state_dict, "checkpoint_version": CHECKPOINT_VERSION, "iteration": 0}
    torch.save(payload, path)
    (Path(root) / TRACKER_FILE).write_text("release")
    return path


def write_metadata(root: str | os.PathLike, meta: dict[str, Any]) -> None:
    """Write the converter's metadata json next to the checkpoint."""
    (Path(root) / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def read_metadata(root: str | os.PathLike) -> dict[str, Any]:
    """The metadata written by :func:`write_metadata` (ConversionError when absent)."""
    path = Path(root) / META_FILE
    if not path.is_file():
        raise ConversionError(f"no {META_FILE} in {root} (not written by this converter)")
    return json.loads(path.read_text())


def _torch_load(path: Path) -> dict[str, Any]:
    """torch.load with weights_only=True. Our files hold only tensors and numbers; checkpoints
    saved by Megatron-LM training also hold ``args`` (a Namespace) and megatron enums, which are
    allowed through megatron-core's own list of safe globals when it is installed."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as first_error:
        try:
            # lazy: optional extra (megatron)
            from megatron.core.safe_globals import SAFE_GLOBALS
        except ImportError:
            raise ConversionError(f"cannot load {path} with weights_only: {first_error}") from None
        try:
            with torch.serialization.safe_globals(SAFE_GLOBALS):
                return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as error:
            raise ConversionError(f"cannot load {path} with weights_only: {error}") from None


def pp_size_of(root: Path) -> int:
    """Pipeline size from the metadata, else from the shard folder names."""
    if (root / META_FILE).is_file():
        return int(read_metadata(root)["pp"])
    names = [p.name for p in iteration_dir(root).glob("mp_rank_*")]
    stages = {int(m.group(1)) for n in names if (m := re.fullmatch(r"mp_rank_\d+_(\d+)", n))}
    return max(stages) + 1 if stages else 1


def load_shard(path: str | os.PathLike, tp_rank: int, pp_rank: int) -> dict[str, Any]:
    """The ``"model"`` state dict of rank (``tp_rank``, ``pp_rank``) of the checkpoint at ``path``
    (the folder holding ``latest_checkpointed_iteration.txt``)."""
    root = Path(path)
    pp = pp_size_of(root)
    name = f"mp_rank_{tp_rank:02d}" + (f"_{pp_rank:03d}" if pp > 1 else "")
    file = iteration_dir(root) / name / "model_optim_rng.pt"
    if not file.is_file():
        raise ConversionError(f"missing checkpoint shard {file}")
    payload = _torch_load(file)
    if "model" not in payload:
        raise ConversionError(f"{file} has no 'model' state dict (virtual pipeline stages?)")
    return payload["model"]


def load_all_shards(path: str | os.PathLike) -> tuple[dict[str, Any], dict[tuple[int, int], Any]]:
    """The metadata and every shard ``{(pp_rank, tp_rank): state_dict}`` of a converted
    checkpoint."""
    meta = read_metadata(path)
    ranks = [(p, t) for p in range(int(meta["pp"])) for t in range(int(meta["tp"]))]
    return meta, {(p, t): load_shard(path, t, p) for p, t in ranks}


def _check_destination(dest: Path, overwrite: bool) -> None:
    if dest.exists() and not dest.is_dir():
        raise ConversionError(f"destination {dest} exists and is not a folder")
    if dest.is_dir() and any(dest.iterdir()) and not overwrite:
        raise ConversionError(f"destination {dest} is not empty (pass --overwrite to replace it)")


@contextlib.contextmanager
def staged_destination(dest: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary sibling of ``dest``; on success it replaces ``dest``, on any error
    it is removed and ``dest`` stays as it was. A non-empty ``dest`` is refused unless
    ``overwrite``.

    >>> import tempfile; base = Path(tempfile.mkdtemp())
    >>> with staged_destination(base / "out") as tmp:
    ...     _ = (tmp / "a.txt").write_text("x")
    >>> sorted(p.name for p in (base / "out").iterdir()), sorted(p.name for p in base.iterdir())
    (['a.txt'], ['out'])
    >>> shutil.rmtree(base)
    """
    dest = Path(dest).absolute()
    _check_destination(dest, overwrite)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
    try:
        yield tmp
        _check_destination(dest, overwrite)  # someone may have written there meanwhile
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            dest.rename(old)
            tmp.rename(dest)
            shutil.rmtree(old)
        else:
            tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


class HFWeights(Mapping[str, torch.Tensor]):
    """Read-only mapping over the tensors of an HF checkpoint folder.

    safetensors files are opened lazily (a tensor is read when indexed, so a worker converting
    one pipeline stage reads only that stage); ``pytorch_model*.bin`` files are loaded eagerly
    with ``weights_only=True``.
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.files = sorted(self.folder.glob("*.safetensors"))
        self._where: dict[str, Any] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        if self.files:
            for file in self.files:
                try:
                    handle = safe_open(str(file), framework="pt")
                except (SafetensorError, OSError) as error:
                    raise ConversionError(f"cannot read weights file {file}: {error}") from None
                for name in handle.keys():
                    self._add(name, handle, tuple(handle.get_slice(name).get_shape()), file)
            return
        self.files = sorted(self.folder.glob("pytorch_model*.bin"))
        if not self.files:
            raise ConversionError(
                f"no weights in {self.folder} (expected *.safetensors or pytorch_model*.bin)"
            )
        for file in self.files:
            try:
                state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            except (pickle.UnpicklingError, RuntimeError, OSError) as error:
                raise ConversionError(f"cannot read weights file {file}: {error}") from None
            for name, tensor in state.items():
                self._add(name, {name: tensor}, tuple(tensor.shape), file)

    def _add(self, name: str, source: Any, shape: tuple[int, ...], file: Path) -> None:
        if name in self._where:
            raise ConversionError(f"tensor {name!r} appears twice in {self.folder} ({file})")
        self._where[name] = source
        self._shapes[name] = shape

    def __getitem__(self, name: str) -> torch.Tensor:
        source = self._where[name]
        return source[name] if isinstance(source, dict) else source.get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def shape(self, name: str) -> tuple[int, ...]:
        """Shape of tensor ``name`` without reading it."""
        return self._shapes[name]

    def content_hash(self) -> str:
        """sha256 over the weight files (names and bytes, in name order)."""
        digest = hashlib.sha256()
        for file in self.files:
            digest.update(file.name.encode() + b"\0")
            with open(file, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(block)
        return digest.hexdigest()


def write_hf_weights(folder: str | os.PathLike, state: Mapping[str, torch.Tensor]) -> Path:
    """Write ``state`` as ``<folder>/model.safetensors``; returns the path."""
    path = Path(folder) / "model.safetensors"
    save_file(dict(state), str(path), metadata={"format": "pt"})
    return path
