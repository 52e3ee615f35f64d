"""Checks before Ray that every recipe shares: output folders, HF model folders, the resume point.
Each recipe's own checks live in its folder (``rlinf/runners/<recipe>/preflight.py``) and use these.

A failure is a :class:`~rlinf.utils.typed_config.ConfigError` naming one key; the entries turn it
into one ``config error: <key>: ...`` line and exit code 2. Nothing is written: no output or log
folder is created, no checkpoint touched, and Ray is not started, with one exception: an
:class:`Asset` a shipped tiny config reads (the tiny model, the demonstrations) that is missing
and quick to make is made by its command, said in one line (:func:`check_assets`); one that
takes minutes is a ``config error`` line naming the command that makes it. Each recipe lists its
assets in its own preflight (``MATH_ASSETS``, ``EMBODIED_ASSETS``, ...).

* every recipe: output and log folders (``runner.output_dir``, ``runner.logger.log_path``, video
  folders) must be folders or creatable; ``runner.resume_dir`` must hold a complete checkpoint whose files match its manifest;
  ``cluster.num_nodes`` must fit the cluster the run will use
  (:func:`~rlinf.scheduler.cluster.check_cluster_before_start`).
* math (:func:`rlinf.runners.math.preflight.prepare_math`): model folders hold a config, weights
  and a tokenizer; the tokenizer loads; data files exist and hold usable prompts.
* embodied (:func:`rlinf.runners.embodied.preflight.prepare_embodied`): each split's simulator is
  asked, in this process and without workers, for one environment's observation and action
  shapes; the policy must fit them.
* web agent (:func:`rlinf.runners.web_agent.preflight.prepare_web`): task files, the policy's
  model folder, the browser binary, the DeepSpeed file.

Example:
    >>> import tempfile
    >>> out = tempfile.NamedTemporaryFile()
    >>> check_output_folder(out.name, "runner.output_dir")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: runner.output_dir: ... is a file; expected a folder (existing or to be created)
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rlinf.runners import checkpoint as ckpt
from rlinf.runners.compose import REPO_ROOT
from rlinf.utils.typed_config import ConfigError

#: weight files an HF model folder may hold (one of them)
HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                   "pytorch_model.bin.index.json")
#: files that make a folder an HF tokenizer folder (one of them)
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")


def check_output_folder(path: str, key: str) -> None:
    """``path`` is a folder, or can be created: its nearest existing ancestor is a writable folder."""
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ConfigError(key, f"{path!r} is a file; expected a folder (existing or to be created)")
        if not os.access(path, os.W_OK):
            raise ConfigError(key, f"{path!r} is not writable")
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(key, f"{path!r} cannot be created: {parent!r} is a file")
    if not os.access(parent, os.W_OK):
        raise ConfigError(key, f"{path!r} cannot be created: {parent!r} is not writable")


#: architecture tags the reference writes -> HF ``config.json`` ``model_type``
MODEL_TYPE_ALIASES = {"qwen2.5": "qwen2", "qwen2_5": "qwen2", "qwen2.5-math": "qwen2",
                      "deepseek-r1-distill-qwen": "qwen2",
                      "llama2": "llama", "llama3": "llama", "llama3.1": "llama", "llama3.2": "llama",
                      "qwen3-moe": "qwen3_moe"}


def check_model_type(tag: str | None, folder: str | None, key: str) -> None:
    """``<section>.model.model_type`` (when set) names the architecture in ``folder/config.json``
    (qwen2.5 and qwen2 are the same architecture; see :data:`MODEL_TYPE_ALIASES`).

    >>> import json, tempfile
    >>> d = tempfile.mkdtemp(); _ = open(f"{d}/config.json", "w").write(json.dumps({"model_type": "qwen2"}))
    >>> check_model_type("qwen2.5", d, "rollout.model.model_type")
    >>> check_model_type("llama", d, "rollout.model.model_type")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: rollout.model.model_type: 'llama', but the model folder's config.json says model_type 'qwen2'
    """  # noqa: E501 - a doctest's expected output is one line
    if tag is None or folder is None:
        return

    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            actual = json.load(f).get("model_type")
    except (OSError, ValueError):
        return  # the folder check names that problem
    wanted = MODEL_TYPE_ALIASES.get(tag.lower(), tag.lower())
    if actual is not None and wanted != actual:
        raise ConfigError(key, f"{tag!r}, but the model folder's config.json says model_type {actual!r}")


def check_hf_folder(path: str, key: str, tokenizer: bool = True) -> None:
    """``path`` is an HF model folder: ``config.json``, weights (every shard an index lists) and,
    with ``tokenizer``, tokenizer files."""
    if not os.path.isdir(path):
        what = "is a file" if os.path.exists(path) else "does not exist"
        raise ConfigError(key, f"{path!r} {what}; expected an HF model folder")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError(key, f"{path!r} is not an HF model folder (no config.json)")
    present = [f for f in HF_WEIGHT_FILES if os.path.isfile(os.path.join(path, f))]
    if not present:
        raise ConfigError(key, f"{path!r} has no weights (expected one of {', '.join(HF_WEIGHT_FILES)})")
    for index in (f for f in present if f.endswith(".index.json")):
        try:
            with open(os.path.join(path, index), encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(key, f"{os.path.join(path, index)} is not a weight index ({exc})") from None
        missing = [s for s in shards if not os.path.isfile(os.path.join(path, s))]
        if missing:
            raise ConfigError(key, f"{path!r} lacks weight shard(s) {', '.join(missing[:3])} listed in {index}")
    if tokenizer and not any(os.path.isfile(os.path.join(path, f)) for f in HF_TOKENIZER_FILES):
        raise ConfigError(key, f"{path!r} has no tokenizer files ({', '.join(HF_TOKENIZER_FILES)}); "
                               "add them or set actor.tokenizer.tokenizer_model")


def check_run_folders(runner, extra: dict[str, str] | None = None) -> int | None:
    """Output / log folders (plus ``extra``: key -> folder) and the resume folder; returns the
    step of the checkpoint to resume from (None: a fresh run)."""
    folders = {"runner.output_dir": runner.output_dir, "runner.logger.log_path": runner.logger.log_path}
    folders.update(extra or {})
    for key, folder in folders.items():
        check_output_folder(folder, key)
    return ckpt.resume_point(runner.resume_dir, resume_unverified=runner.resume_unverified)[1] \
        if runner.resume_dir else None


@dataclass(frozen=True)
class Asset:
    """A file or folder a shipped tiny config reads that one command makes.

    Attributes:
        key: the config key naming it (``actor.model.model_path``), read from the typed config.
        tail: the end of the shipped default path (``results/tiny_math/warm``); a configured path
            ending so (``/tmp/x/results/tiny_math/warm`` too) is this asset, any other path is the
            user's own and left to the usual checks.
        command: the command that makes it, run from the current folder: a format string with
            ``{path}`` (the configured path) and ``{parent}`` (its folder), or a function
            ``(cfg, path) -> str`` (None: it cannot make this one).
        about: how long it takes here, as said in the line (``a few seconds``, ``about 3 minutes``).
        make: quick enough to make on the spot: a run that finds it missing runs ``command``
            (said in one line) instead of stopping.

    Example:
        >>> from types import SimpleNamespace
        >>> warm = Asset("model.path", "results/tiny/warm", "python -m toolkits.tiny --out {parent}", "a minute")
        >>> cfg = SimpleNamespace(model=SimpleNamespace(path="/nowhere/results/tiny/warm"))
        >>> check_assets(cfg, [warm])
        Traceback (most recent call last):
        ...
        rlinf.utils.typed_config.ConfigError: model.path: '/nowhere/results/tiny/warm' does not exist: run `python -m toolkits.tiny --out /nowhere/results/tiny` (a minute) to make it
    """  # noqa: E501 - a doctest's expected output is one line

    key: str
    tail: str
    command: str | Callable[[Any, str], str | None]
    about: str
    make: bool = False

    def path_in(self, cfg: Any) -> str | None:
        """The configured path when it is this asset and missing (None otherwise)."""
        value: Any = cfg
        for part in self.key.split("."):
            value = getattr(value, part, None)
            if value is None:
                return None
        path = str(value)
        if os.path.exists(path) or not os.path.normpath(path).endswith(os.path.normpath(self.tail)):
            return None
        return path

    def command_for(self, cfg: Any, path: str) -> str | None:
        """The command that makes ``path`` (None: it cannot)."""
        if callable(self.command):
            return self.command(cfg, path)
        return self.command.format(path=path, parent=os.path.dirname(path) or ".")


def check_assets(cfg: Any, assets: Iterable[Asset], print_fn: Callable = print,
                 run: Callable[[str], None] | None = None) -> None:
    """For each of ``assets`` the typed ``cfg`` names and that is missing: make it when it is
    quick (:attr:`Asset.make`: one ``[rlinf] ...`` line, then ``run(command)``, by default
    :func:`run_asset_command`), else raise a :class:`ConfigError` naming the key, the path and the
    command that makes it.

    Raises:
        ConfigError: a missing asset that takes long to make, or whose command failed.
    """
    for asset in assets:
        path = asset.path_in(cfg)
        command = None if path is None else asset.command_for(cfg, path)
        if command is None:
            continue
        if not asset.make:
            raise ConfigError(asset.key, f"{path!r} does not exist: run `{command}` ({asset.about}) to make it")
        print_fn(f"[rlinf] {asset.key}: {path!r} does not exist: making it with `{command}` ({asset.about})")
        try:
            (run or run_asset_command)(command)
        except RuntimeError as exc:
            raise ConfigError(asset.key, f"{path!r} does not exist and `{command}` failed: {exc}") from None
        if not os.path.exists(path):
            raise ConfigError(asset.key, f"{path!r} does not exist, and `{command}` did not make it")


def run_asset_command(command: str) -> None:
    """Run an :class:`Asset` command (``python -m toolkits...``) with this interpreter from the
    current folder, the repository on its import path; its output is kept unless it fails.

    Raises:
        RuntimeError: it failed (exit code and its last output line).
    """
    argv = shlex.split(command)
    if argv and argv[0] == "python":
        argv[0] = sys.executable
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()] or \
            [line.strip() for line in proc.stdout.splitlines() if line.strip()]
        raise RuntimeError(f"exit {proc.returncode}: {lines[-1] if lines else 'no output'}")
