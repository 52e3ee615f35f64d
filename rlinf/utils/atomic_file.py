"""Write a file (or a folder) whole or not at all.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out.bin")
    >>> atomic_write(path, lambda f: f.write(b"data"))
    >>> open(path, "rb").read()
    b'data'
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> None:
    """``write(file)`` into a hidden temporary file beside ``path``, fsync, rename over ``path``:
    a crash at any moment leaves the previous file (or none), never a partial one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_folder(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield a hidden temporary sibling of ``out_dir`` to fill; when the block ends without an
    error it replaces ``out_dir`` (an existing one is removed first), else it is deleted.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "model"
    >>> with atomic_folder(out) as tmp:
    ...     _ = (tmp / "config.json").write_text("{}")
    >>> sorted(p.name for p in out.iterdir())
    ['config.json']
    """
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
