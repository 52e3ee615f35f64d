"""Write a file whole or not at all.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out.bin")
    >>> atomic_write(path, lambda f: f.write(b"data"))
    >>> open(path, "rb").read()
    b'data'
"""

from __future__ import annotations

import os
from collections.abc import Callable
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
