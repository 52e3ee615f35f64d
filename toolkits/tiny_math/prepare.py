"""Build the embedded default model once: random tiny Qwen2 + local tokenizer, then the warm start.

The result (``<out>/warm``, an HF folder) is what ``examples/math/config/grpo_tiny_cpu.yaml``
trains. A ``READY`` stamp records the settings; a second call with the same settings returns at
once, other settings rebuild.

The repository ships the default warm start (``examples/math/assets/tiny_math_warm``, 2.5 MB,
built by this module with the default settings; ``SHIPPED.json`` holds the settings, the SHA-256
of the supervised data it was trained on and of every file). With the default settings and
unchanged data, ``prepare`` copies that folder after checking every hash instead of spending about
four minutes of two CPU cores on the 800 supervised steps; ``--rebuild`` trains it here instead,
and ``--ship`` refreshes the shipped copy from a fresh build.

Example:
    python -m toolkits.tiny_math.prepare --out results/tiny_math
    python -m toolkits.tiny_math.prepare --out /tmp/tm --rebuild --ship examples/math/assets/tiny_math_warm
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from pathlib import Path

STAMP = "READY"
SHIPPED_MANIFEST = "SHIPPED.json"
REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_DIR = REPO_ROOT / "examples" / "math" / "assets" / "tiny_math_warm"


def build_settings(size: str, steps: int, seed: int, sft_path: str | Path) -> dict:
    """What a build depends on, as the ``READY`` stamp and ``SHIPPED.json`` record it.

    >>> build_settings("tiny", 800, 0, "examples/math/data/sft.jsonl")["steps"]
    800
    """
    return {"size": size, "steps": steps, "seed": seed, "sft": str(sft_path)}


def data_file(path: str | Path) -> Path:
    """``path``, or, when it is relative and not in the current folder, the repository's own file
    of that name (the default ``examples/math/data/sft.jsonl`` from another folder).

    >>> data_file("examples/math/data/sft.jsonl").is_file()
    True
    """
    path = Path(path)
    if path.is_absolute() or path.exists():
        return path
    mine = REPO_ROOT / path
    return mine if mine.exists() else path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shipped_matches(shipped: Path, settings: dict, sft_path: str | Path) -> str | None:
    """Why the shipped warm start cannot stand in for a build with ``settings`` (None: it can).

    It can when its manifest names the same settings, the supervised data hashes the same, and
    every listed file is present with its recorded SHA-256.

    Example:
        >>> shipped_matches(SHIPPED_DIR, {"size": "tiny", "steps": 1}, "x.jsonl") is not None
        True
    """
    manifest = shipped / SHIPPED_MANIFEST
    if not manifest.is_file():
        return f"no {manifest}"
    info = json.loads(manifest.read_text())
    if info.get("settings") != settings:
        return f"built with {info.get('settings')}, asked for {settings}"
    sft = data_file(sft_path)
    if not sft.is_file() or _sha256(sft) != info.get("sft_sha256"):
        return f"{sft} differs from the data it was trained on"
    for name, digest in info.get("files", {}).items():
        f = shipped / name
        if not f.is_file() or _sha256(f) != digest:
            return f"{f} is missing or differs from its recorded SHA-256"
    return None


def ship(warm: Path, shipped: Path, settings: dict, sft_path: str | Path) -> None:
    """Copies a built warm start to ``shipped`` with its manifest (settings, data and file hashes)."""
    shutil.rmtree(shipped, ignore_errors=True)
    shipped.mkdir(parents=True)
    files = {}
    for f in sorted(warm.iterdir()):
        if f.is_file() and f.name != STAMP:
            shutil.copy2(f, shipped / f.name)
            files[f.name] = _sha256(f)
    manifest = {"settings": settings, "sft_sha256": _sha256(Path(sft_path)), "files": files,
                "rebuild": "python -m toolkits.tiny_math.prepare --out results/tiny_math --rebuild"}
    (shipped / SHIPPED_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def _builders():
    """``(make_model, warm_start)``, imported only when a build is needed: torch and transformers
    take ~30 s to import on a fresh 2-core machine, longer than copying the shipped folder."""
    from toolkits.tiny_math.make_model import make_model
    from toolkits.tiny_math.warm_start import warm_start

    return make_model, warm_start


def prepare(out: str | Path, size: str = "tiny", steps: int = 800, seed: int = 0,
            sft_path: str = "examples/math/data/sft.jsonl", rebuild: bool = False,
            shipped: Path | None = SHIPPED_DIR, threads: int | None = None) -> Path:
    """``<out>/warm``: the warm-started model (built only if missing or built differently).

    Unless ``rebuild``, a shipped warm start with the same settings and data is copied instead of
    trained (see the module docstring). ``threads``: torch's thread count for a build.
    """
    out = Path(out)
    warm, stamp = out / "warm", out / "warm" / STAMP
    settings = build_settings(size, steps, seed, sft_path)
    if not rebuild and stamp.is_file() and json.loads(stamp.read_text()) == settings:
        return warm
    shutil.rmtree(out, ignore_errors=True)
    why_not = "--rebuild" if rebuild else (shipped_matches(shipped, settings, sft_path)
                                           if shipped is not None else "no shipped copy given")
    if why_not is None:
        shutil.copytree(shipped, warm, ignore=shutil.ignore_patterns(SHIPPED_MANIFEST))
        stamp.write_text(json.dumps(settings))
        print(f"[tiny_math] copied the shipped warm start {shipped} -> {warm} (hashes checked; "
              f"`python -m toolkits.tiny_math.prepare --rebuild` trains it here)", flush=True)
        return warm
    t = time.perf_counter()
    make_model, warm_start = _builders()
    if threads:
        import torch

        torch.set_num_threads(threads)
    make_model(out / "base", size, seed)
    print(f"[tiny_math] built a random {size} Qwen2 model + tokenizer in {out / 'base'}; "
          f"warm start ({steps} supervised steps on {sft_path}; not the shipped copy: {why_not}) ...",
          flush=True)
    warm_start(out / "base", data_file(sft_path), warm, steps=steps, seed=seed)
    stamp.write_text(json.dumps(settings))
    print(f"[tiny_math] warm start done in {time.perf_counter() - t:.0f} s -> {warm}", flush=True)
    return warm


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Build the embedded tiny math model (cached).")
    p.add_argument("--out", default="results/tiny_math")
    p.add_argument("--size", default="tiny")
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sft", default="examples/math/data/sft.jsonl")
    p.add_argument("--rebuild", action="store_true",
                   help="train the warm start here even where the shipped copy matches")
    p.add_argument("--ship", default=None, metavar="DIR",
                   help="after building, copy the result and its manifest to DIR (maintainers)")
    a = p.parse_args(argv)
    warm = prepare(a.out, a.size, a.steps, a.seed, a.sft, rebuild=a.rebuild, threads=a.threads)
    if a.ship:
        ship(warm, Path(a.ship), build_settings(a.size, a.steps, a.seed, a.sft), a.sft)
        print(f"[tiny_math] shipped {warm} -> {a.ship}")
    print(warm)


if __name__ == "__main__":
    main()
