"""A checkpoint's manifest: every file of a ``global_step_<N>`` folder with its size and SHA-256,
so that a resume refuses a missing, truncated or altered file before any worker starts.

``manifest.json`` is written by the driver after every other file of the checkpoint (the workers'
shards, the driver's extras) and before ``trainer_state.json``, which stays the last file::

    {"format": "rlinf-checkpoint-manifest-1", "algorithm": "sha256",
     "files": {"actor/__0_0.distcp": {"size": 1234, "sha256": "9f86d0..."}, ...}}

Paths are relative to the checkpoint folder, with ``/``. The manifest's own bookkeeping is not
listed: ``manifest.json`` itself and ``trainer_state.json`` (written after it), both at the top of
the folder (:data:`NOT_LISTED`). Hashing reads the files back right after they were written (they
are in the page cache) on several threads (``hashlib`` releases the GIL), so the cost is the
SHA-256 throughput of the driver's cores.

:func:`verify_checkpoint` is what a resume runs: :func:`verify_manifest` (every listed file
present, of its size and SHA-256: else :class:`DamagedCheckpoint`), then a folder without a
manifest or holding a file the manifest does not list (any other name, at any depth, a link to a
folder included) raises :class:`UnverifiedCheckpoint` naming it: nothing is loaded that the
manifest does not vouch for (``runner.resume_unverified: true`` accepts it, see
:func:`rlinf.runners.checkpoint.check_checkpoint`).

The manifest detects damage (a copy cut short, a bad disk, a file edited by mistake) and files
added beside the saved ones; it is not a signature: whoever can write the checkpoint can write a
matching manifest.

Example:
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); os.makedirs(f"{d}/actor")
    >>> _ = open(f"{d}/actor/w.bin", "wb").write(b"weights")
    >>> sorted(write_manifest(d)), verify_manifest(d)
    (['actor/w.bin'], 1)
    >>> _ = open(f"{d}/actor/w.bin", "wb").write(b"weightz")
    >>> verify_manifest(d)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rlinf.runners.manifest.DamagedCheckpoint: .../actor/w.bin does not match its SHA-256 in manifest.json (altered)
    >>> _ = write_manifest(d); _ = open(f"{d}/actor/extra.pt", "wb").write(b"?")
    >>> verify_checkpoint(d)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rlinf.runners.manifest.UnverifiedCheckpoint: .../actor/extra.pt is not listed in manifest.json
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

MANIFEST_FILE = "manifest.json"
FORMAT = "rlinf-checkpoint-manifest-1"
#: files of a checkpoint folder the manifest does not list (written after it, or itself)
NOT_LISTED = (MANIFEST_FILE, "trainer_state.json")

# folder -> the (name, size, mtime) listing it had when it last verified (a resume checked before
# Ray and again by the recovery loop reads the files once)
_VERIFIED: dict[str, tuple] = {}


class DamagedCheckpoint(ValueError):
    """A checkpoint file is missing, truncated or altered (or the manifest itself is unreadable).

    Attributes:
        path: the damaged file.
    """

    def __init__(self, path: str, problem: str):
        self.path = path
        super().__init__(f"{path} {problem}")


class UnverifiedCheckpoint(ValueError):
    """A checkpoint holds what no manifest vouches for: it has no ``manifest.json`` (saved before
    checkpoints carried one, or not by rlinf), or a file its manifest does not list.

    Attributes:
        path: the missing manifest or the first unlisted file.
    """

    def __init__(self, path: str, problem: str):
        self.path = path
        super().__init__(f"{path} {problem}")


def sha256_file(path: str) -> str:
    """The hex SHA-256 of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _hash_threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def list_files(folder: str) -> list[str]:
    """Every file under ``folder`` (relative, ``/``-separated, sorted) except :data:`NOT_LISTED`
    at its top."""
    out = []
    for root, _, names in os.walk(folder):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
            if rel not in NOT_LISTED:
                out.append(rel)
    return sorted(out)


def write_manifest(folder: str, write_text=None) -> dict[str, dict]:
    """Hash every file of ``folder`` and write ``folder/manifest.json``; returns its ``files``.
    ``write_text(path, text)`` writes the file (default: a plain write)."""
    names = list_files(folder)
    paths = [os.path.join(folder, name) for name in names]
    with ThreadPoolExecutor(_hash_threads()) as pool:
        digests = list(pool.map(sha256_file, paths))
    files = {name: {"size": os.path.getsize(path), "sha256": digest}
             for name, path, digest in zip(names, paths, digests)}
    text = json.dumps({"format": FORMAT, "algorithm": "sha256", "files": files}, indent=1)
    if write_text is None:
        with open(os.path.join(folder, MANIFEST_FILE), "w") as f:
            f.write(text)
    else:
        write_text(os.path.join(folder, MANIFEST_FILE), text)
    return files


def read_manifest(folder: str) -> dict[str, dict] | None:
    """The ``files`` of ``folder/manifest.json``; None when there is none (a checkpoint saved
    before manifests existed). Raises :class:`DamagedCheckpoint` for an unreadable one."""
    path = os.path.join(folder, MANIFEST_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise DamagedCheckpoint(path, f"is unreadable ({exc})") from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(files, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("size"), int) and isinstance(v.get("sha256"), str)
            for v in files.values()):
        raise DamagedCheckpoint(path, f"is not a checkpoint manifest (format {FORMAT} with files: "
                                      "{name: {size, sha256}} expected)")
    return files


def _listing(folder: str, names) -> tuple:
    out = []
    for name in [MANIFEST_FILE, *names]:
        st = os.stat(os.path.join(folder, name))
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def verify_manifest(folder: str) -> int | None:
    """Check every file ``folder/manifest.json`` lists: present, of its size, of its SHA-256;
    returns how many files were checked, None when the folder has no manifest. Raises
    :class:`DamagedCheckpoint` naming the first missing, truncated or altered file (sizes are
    checked for all files before any is hashed)."""
    files = read_manifest(folder)
    if files is None:
        return None
    for name, entry in files.items():
        path = os.path.join(folder, *name.split("/"))
        if not os.path.isfile(path):
            raise DamagedCheckpoint(path, f"is missing (listed in {MANIFEST_FILE})")
        size = os.path.getsize(path)
        if size != entry["size"]:
            what = "truncated" if size < entry["size"] else "grown"
            raise DamagedCheckpoint(path, f"has {size} bytes, {MANIFEST_FILE} lists {entry['size']} ({what})")
    listing = _listing(folder, files)
    if _VERIFIED.get(os.path.abspath(folder)) == listing:
        return len(files)
    names = list(files)
    pool = ThreadPoolExecutor(_hash_threads())
    try:
        digests = pool.map(sha256_file, [os.path.join(folder, *n.split("/")) for n in names])
        for name, digest in zip(names, digests):
            if digest != files[name]["sha256"]:
                raise DamagedCheckpoint(os.path.join(folder, *name.split("/")),
                                        f"does not match its SHA-256 in {MANIFEST_FILE} (altered)")
    finally:  # the first bad file ends the check: the files not hashed yet are skipped
        pool.shutdown(wait=True, cancel_futures=True)
    _VERIFIED[os.path.abspath(folder)] = listing
    return len(files)


def unlisted_files(folder: str, listed) -> list[str]:
    """What ``folder`` holds beyond the names in ``listed`` and :data:`NOT_LISTED`: files (relative,
    ``/``-separated) and links to folders (which :func:`list_files` does not enter), sorted."""
    out = [name for name in list_files(folder) if name not in listed]
    for root, dirs, _ in os.walk(folder):
        for name in dirs:
            path = os.path.join(root, name)
            if os.path.islink(path):
                out.append(os.path.relpath(path, folder).replace(os.sep, "/"))
    return sorted(out)


def verify_checkpoint(folder: str) -> int:
    """The check a resume makes: :func:`verify_manifest`, then nothing beyond what the manifest
    lists (its bookkeeping, :data:`NOT_LISTED`, aside); returns how many files were checked.

    Raises:
        DamagedCheckpoint: a listed file is missing, truncated or altered, or the manifest is
            unreadable.
        UnverifiedCheckpoint: there is no manifest (naming ``manifest.json``), or a file it does
            not list (naming the first, and how many more).
    """
    checked = verify_manifest(folder)
    if checked is None:
        raise UnverifiedCheckpoint(os.path.join(folder, MANIFEST_FILE),
                                   "is missing: the checkpoint's files cannot be verified (saved before "
                                   "checkpoints carried a manifest, or not by rlinf)")
    extra = unlisted_files(folder, read_manifest(folder) or {})
    if extra:
        more = f" (and {len(extra) - 1} more unlisted)" if len(extra) > 1 else ""
        raise UnverifiedCheckpoint(os.path.join(folder, *extra[0].split("/")),
                                   f"is not listed in {MANIFEST_FILE}{more}")
    return checked
