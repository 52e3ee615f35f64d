"""The JSON the kit writes: one outcome per check (status, figures, thresholds, what failed), the
environment (versions, GPU), and a summary.

Example:
    >>> out = outcome({"diff": 0.2, "steps": 3}, [("diff", "<=", 0.1)])
    >>> out["status"], out["failed"]
    ('fail', ['diff = 0.2, not <= 0.1'])
    >>> outcome({"x": float("nan")}, [("x", ">", 0)])["figures"]  # JSON has no NaN: null
    {'x': None}
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

SCHEMA = "rlinf-gpu-check/1"
STATUSES = ("pass", "fail", "skip")
#: Distributions whose versions the environment section reports.
PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "megatron-core",
            "liger-kernel", "triton", "numpy")
#: Not needed by any check (and absent on the GPU machines); the environment says if one is there.
FRAMEWORKS = ("ray", "hydra", "omegaconf", "vllm", "sglang")
#: A manifest the wheel installer leaves in the site folder (:mod:`toolkits.gpu_check.wheels`).
MANIFEST = "gpu_check_wheels.json"

_OPS = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b,
        ">": lambda a, b: a > b, "==": lambda a, b: a == b}


def clean(value: Any) -> Any:
    """``value`` with non-finite floats as None and tuples as lists (strict JSON).

    >>> clean({"a": (1.0, float("inf")), "b": [float("nan")]})
    {'a': [1.0, None], 'b': [None]}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def outcome(figures: dict[str, Any], rules: Iterable[tuple[str, str, float]] = (),
            skip: str | None = None) -> dict[str, Any]:
    """A check's result: ``pass`` when every rule ``(figure, op, bound)`` holds, else ``fail``
    with the broken rules in ``failed``; ``skip`` (with ``reason``) when ``skip`` is given. A
    missing or non-finite figure breaks its rule.

    >>> outcome({"loss": 1.0}, [("loss", "<", 2)])["thresholds"]
    {'loss': '< 2'}
    >>> outcome({}, skip="no CUDA")["status"]
    'skip'
    """
    rules = list(rules)
    figures = clean(figures)
    failed = []
    for name, op, bound in rules:
        if op not in _OPS:
            raise ValueError(f"unknown comparison {op!r} in the rule for {name}")
        value = figures.get(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) and op != "==":
            failed.append(f"{name} = {value}, not a number")
        elif not _OPS[op](value, bound):
            failed.append(f"{name} = {value:.4g}, not {op} {bound:g}")
    status = "skip" if skip else ("fail" if failed else "pass")
    return {"status": status, "figures": figures,
            "thresholds": {name: f"{op} {bound:g}" for name, op, bound in rules},
            "failed": failed, "reason": skip}


def failure(error: str, seconds: float | None = None, **extra: Any) -> dict[str, Any]:
    """The outcome of a check that raised, crashed or ran out of time.

    >>> failure("ValueError: bad", 1.5)["status"]
    'fail'
    """
    return {"status": "fail", "figures": {}, "thresholds": {}, "failed": [], "reason": None,
            "error": error, "seconds": seconds, **extra}


def versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution (None when absent).

    >>> versions(["surely-not-installed-xyz"])
    {'surely-not-installed-xyz': None}
    """
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment(device: str, site: str | None) -> dict[str, Any]:
    """Python, package versions, the GPU (name, capability, memory, bf16), and the wheels the
    script installed into ``site`` (None: the interpreter's own packages were used)."""
    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(), "executable": sys.executable,
        "platform": platform.platform(), "cpu_count": os.cpu_count(), "device": device,
        "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
        "packages": versions(), "wheels_site": site, "wheels_installed": None,
        "frameworks_present": [name for name in FRAMEWORKS if importlib.util.find_spec(name) is not None],
    }
    if site:
        manifest = Path(site) / MANIFEST
        env["wheels_installed"] = json.loads(manifest.read_text()) if manifest.is_file() else []
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(gpu_count=torch.cuda.device_count(), gpu_name=props.name,
                   gpu_capability=f"{props.major}.{props.minor}",
                   gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   bf16_supported=bool(torch.cuda.is_bf16_supported()),
                   nccl=".".join(map(str, torch.cuda.nccl.version())))
    return env


def summary(checks: dict[str, dict[str, Any]], dry_run: bool) -> dict[str, Any]:
    """Names per status; ``ok`` = nothing failed (and, on a GPU run, nothing skipped).

    >>> summary({"a": {"status": "pass"}, "b": {"status": "skip"}}, dry_run=True)["ok"]
    True
    >>> summary({"a": {"status": "pass"}, "b": {"status": "skip"}}, dry_run=False)["ok"]
    False
    """
    by = {s: [n for n, c in checks.items() if c["status"] == s] for s in STATUSES}
    ok = not by["fail"] and (dry_run or not by["skip"])
    return {"passed": by["pass"], "failed": by["fail"], "skipped": by["skip"], "ok": ok}


def write(path: Path, document: dict[str, Any]) -> None:
    """Strict JSON (no NaN), indented, written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(clean(document), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def line(name: str, result: dict[str, Any]) -> str:
    """One console line per check.

    >>> line("mfu", {"status": "pass", "seconds": 3.21, "figures": {"mfu": 0.41}})
    'mfu               pass    3.2 s  mfu=0.41'
    """
    seconds = result.get("seconds")
    text = f"{name:<17} {result['status']:<5} {seconds if seconds is not None else 0:5.1f} s"
    detail = result.get("error") or result.get("reason") or "; ".join(result.get("failed") or [])
    if not detail:
        shown = [f"{k}={v:.3g}" for k, v in result.get("figures", {}).items()
                 if isinstance(v, float)][:4]
        detail = " ".join(shown)
    return f"{text}  {detail}".rstrip()
