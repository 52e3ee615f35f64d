"""The wheels the GPU check carries, and a standard-library installer for them (the GPU machine may
have no pip that works offline; this needs only Python).

Two groups (:data:`WHEELS`): ``pinned`` wheels are always installed into the site folder and
shadow the machine's own versions (the versions the CPU tests pass with); ``if-missing`` ones are
installed only when the machine's Python cannot import them.

    python -m toolkits.gpu_check.wheels requirements            # NAME==VERSION lines (fetching)
    python -m toolkits.gpu_check.wheels list --wheels gpu_wheels --limit-mib 60
    python -m toolkits.gpu_check.wheels install --wheels gpu_wheels --site .gpu_site

Example:
    >>> parse_name("regex-2026.11.19-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl")[:2]
    ('regex', '2026.11.19')
    >>> compatible("tokenizers-0.23.3-cp310-abi3-manylinux_2_17_x86_64.whl", (3, 12))
    True
    >>> compatible("regex-2026.11.19-cp311-cp311-manylinux2014_x86_64.whl", (3, 12))
    False
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import zipfile
from importlib import metadata
from pathlib import Path

#: (distribution, import name, group, fallback version when this machine does not have it).
WHEELS = (
    ("transformers", "transformers", "pinned", "5.19.0"),
    ("huggingface_hub", "huggingface_hub", "pinned", "2.4.0"),
    ("tokenizers", "tokenizers", "pinned", "0.23.3"),
    ("safetensors", "safetensors", "pinned", "0.8.0"),
    ("httpx2", "httpx2", "pinned", "2.16.2"),
    ("httpcore2", "httpcore2", "pinned", "2.16.2"),
    ("truststore", "truststore", "pinned", "0.10.5"),
    ("megatron-core", "megatron", "pinned", "0.16.1"),
    ("liger-kernel", "liger_kernel", "pinned", "0.8.5"),
    ("pyyaml", "yaml", "if-missing", "6.0.4"),
    ("regex", "regex", "if-missing", "2026.11.19"),
    ("tqdm", "tqdm", "if-missing", "4.70.1"),
    ("packaging", "packaging", "if-missing", "26.3"),
    ("anyio", "anyio", "if-missing", "4.16.0"),
    ("idna", "idna", "if-missing", "3.20"),
    ("h11", "h11", "if-missing", "0.16.0"),
    ("typing_extensions", "typing_extensions", "if-missing", "4.16.0"),
    ("numpy", "numpy", "if-missing", "2.3.5"),
)
#: Fetched only on request (``--numpy``): large, and the GPU machines' Python has it.
OPTIONAL = ("numpy",)
FETCH_HINT = "bash scripts/fetch_gpu_wheels.sh"


def normalize(name: str) -> str:
    """PyPI's comparable form of a distribution name.

    >>> normalize("Megatron_Core"), normalize("typing-extensions")
    ('megatron_core', 'typing_extensions')
    """
    return name.lower().replace("-", "_").replace(".", "_")


def requirements(include_optional: bool = False) -> list[str]:
    """``NAME==VERSION`` per wheel: this machine's installed version, else the fallback.

    >>> any(r.startswith("transformers==") for r in requirements())
    True
    """
    out = []
    for dist, _, _, fallback in WHEELS:
        if dist in OPTIONAL and not include_optional:
            continue
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = fallback
        out.append(f"{dist}=={version.split('+')[0]}")
    return out


def parse_name(filename: str) -> tuple[str, str, str, str, str]:
    """``(distribution, version, python tag, abi tag, platform tag)`` of a wheel file name."""
    parts = Path(filename).name[: -len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise ValueError(f"{filename} is not a wheel file name")
    return parts[0], parts[1], parts[-3], parts[-2], parts[-1]


def compatible(filename: str, python: tuple[int, int], machine: str = "x86_64") -> bool:
    """Whether the wheel can run on CPython ``python`` on Linux ``machine`` (any glibc)."""
    _, _, py_tags, abi_tags, plat_tags = parse_name(filename)
    major, minor = python
    cp = f"cp{major}{minor}"
    platform_ok = any(p == "any" or (p.startswith(("manylinux", "linux")) and p.endswith(machine))
                      for p in plat_tags.split("."))
    for py in py_tags.split("."):
        for abi in abi_tags.split("."):
            if abi == "none" and py in ("py3", f"py{major}{minor}", cp, "py2"):
                return platform_ok
            if abi == cp and py == cp:
                return platform_ok
            if abi == "abi3" and py.startswith("cp3") and int(py[3:]) <= minor:
                return platform_ok
    return False


def choose(folder: Path, python: tuple[int, int]) -> dict[str, Path]:
    """The newest compatible wheel per distribution in ``folder``."""
    best: dict[str, tuple[tuple, Path]] = {}
    for path in sorted(folder.glob("*.whl")):
        if not compatible(path.name, python):
            continue
        dist, version = parse_name(path.name)[:2]
        key = tuple(int(p) if p.isdigit() else 0 for p in version.split("."))
        if normalize(dist) not in best or key > best[normalize(dist)][0]:
            best[normalize(dist)] = (key, path)
    return {dist: path for dist, (_, path) in best.items()}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def extract(wheel: Path, site: Path) -> None:
    """Unpack a wheel the way an installer lays it out: the archive root into ``site``, and its
    ``*.data/purelib`` and ``*.data/platlib`` contents too (scripts and headers are left out)."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            name = member.filename
            head, _, rest = name.partition("/")
            if head.endswith(".data"):
                kind, _, inner = rest.partition("/")
                if kind not in ("purelib", "platlib") or not inner or member.is_dir():
                    continue
                destination = site / inner
                destination.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as src, open(destination, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            else:
                archive.extract(member, site)


def install(wheels: Path, site: Path, python: tuple[int, int] | None = None) -> list[str]:
    """Install into a fresh ``site`` folder: every ``pinned`` wheel, and each ``if-missing`` one
    this Python cannot import. Writes the manifest the report reads; returns the wheel names.
    Raises ``FileNotFoundError`` / ``LookupError`` with one line naming what is missing."""
    from toolkits.gpu_check.report import MANIFEST

    python = python or sys.version_info[:2]
    if not wheels.is_dir():
        raise FileNotFoundError(f"no wheel folder {wheels}: run `{FETCH_HINT}` on a machine with network "
                                "and carry the folder")
    chosen = choose(wheels, python)
    todo = []
    for dist, module, group, _ in WHEELS:
        if group == "if-missing" and _importable(module):
            continue
        wheel = chosen.get(normalize(dist))
        if wheel is None:
            extra = " --numpy" if dist in OPTIONAL else ""
            raise LookupError(f"{wheels} has no wheel of {dist} for Python {python[0]}.{python[1]}: run "
                              f"`{FETCH_HINT} --python {python[0]}.{python[1]}{extra}`")
        todo.append(wheel)
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    for wheel in todo:
        extract(wheel, site)
    installed = [wheel.name for wheel in todo]
    (site / MANIFEST).write_text(json.dumps(installed, indent=1))
    return installed


def listing(wheels: Path) -> tuple[list[tuple[str, int]], int]:
    """``([(file name, bytes)], total bytes)`` of the wheels in ``wheels``."""
    files = [(p.name, p.stat().st_size) for p in sorted(wheels.glob("*.whl"))]
    return files, sum(size for _, size in files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolkits.gpu_check.wheels")
    sub = parser.add_subparsers(dest="command", required=True)
    req = sub.add_parser("requirements", help="print NAME==VERSION lines")
    req.add_argument("--numpy", action="store_true", help="include numpy")
    lst = sub.add_parser("list", help="sizes of the fetched wheels")
    lst.add_argument("--wheels", default="gpu_wheels")
    lst.add_argument("--limit-mib", type=float, default=None, help="exit 1 above this total")
    ins = sub.add_parser("install", help="install into a site folder")
    ins.add_argument("--wheels", default="gpu_wheels")
    ins.add_argument("--site", default=".gpu_site")
    args = parser.parse_args(argv)
    if args.command == "requirements":
        print("\n".join(requirements(args.numpy)))
        return 0
    if args.command == "list":
        files, total = listing(Path(args.wheels))
        for name, size in files:
            print(f"{size / 2**20:8.2f} MiB  {name}")
        print(f"{total / 2**20:8.2f} MiB  total ({len(files)} wheels)")
        if args.limit_mib is not None and total > args.limit_mib * 2**20:
            print(f"error: {total / 2**20:.1f} MiB is over the {args.limit_mib:g} MiB a device call may carry",
                  file=sys.stderr)
            return 1
        return 0
    try:
        names = install(Path(args.wheels), Path(args.site))
    except (FileNotFoundError, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"installed {len(names)} wheels into {args.site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
