"""Metrics out of a run: a JSONL file always, plus tensorboard / wandb / swanlab when chosen.

wandb and swanlab run offline unless their own environment says otherwise (``WANDB_MODE``,
``SWANLAB_MODE``), so a machine without network still logs. A backend that is chosen but not
installed fails at construction, naming the ``runner.logger.logger_backends`` key.

Example:
    >>> import json, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> log = MetricLogger(d, project="p", experiment="e", backends=())
    >>> log.log({"reward/mean": 0.5}, step=1)
    >>> log.close()
    >>> [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl"))]
    [{'step': 1, 'reward/mean': 0.5}]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

from rlinf.utils.typed_config import ConfigError


class MetricLogger:
    """Writes ``{step, **metrics}`` lines to ``log_path/metrics.jsonl`` and to each backend.

    Args:
        log_path: folder for the JSONL file and the tensorboard events (``tensorboard/``).
        project: project name (wandb / swanlab).
        experiment: run name.
        backends: any of ``tensorboard``, ``wandb``, ``swanlab``.
        resume_step: a run resumed from the checkpoint of this step: earlier lines up to it are
            kept and those after it (logged before the crash, about to be logged again) are
            dropped, from ``metrics.jsonl`` and from the tensorboard events (``purge_step``), so
            each step appears once. None starts afresh. wandb / swanlab offline runs cannot be
            rewound: they start a new run.
    """

    def __init__(self, log_path: str, project: str, experiment: str, backends: Iterable[str],
                 resume_step: int | None = None):
        os.makedirs(log_path, exist_ok=True)
        self.log_path = log_path
        path = os.path.join(log_path, "metrics.jsonl")
        if resume_step is not None:
            _truncate_after(path, resume_step)
        self._jsonl = open(path, "a" if resume_step is not None else "w")
        self._writers: list = []
        for backend in backends:
            self._writers.append(_open_backend(backend, log_path, project, experiment, resume_step))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record ``metrics`` at ``step`` (values must be numbers)."""
        clean = {k: float(v) for k, v in metrics.items()}
        self._jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        self._jsonl.flush()
        for kind, writer in self._writers:
            if kind == "tensorboard":
                for key, value in clean.items():
                    writer.add_scalar(key, value, step)
                writer.flush()
            else:  # wandb and swanlab share the call
                writer.log(clean, step=step)

    def close(self) -> None:
        self._jsonl.close()
        for kind, writer in self._writers:
            if kind == "tensorboard":
                writer.close()
            else:
                writer.finish()
        self._writers = []


def _truncate_after(path: str, step: int) -> None:
    """Keep the records of ``path`` with ``step <= step`` (rewritten atomically); a torn last line
    (a crash mid-write) is dropped too."""
    if not os.path.isfile(path):
        return
    kept = []
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("step", 0) <= step:
                kept.append(json.dumps(record) + "\n")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(kept)
    os.replace(tmp, path)


def _open_backend(backend: str, log_path: str, project: str, experiment: str,
                  resume_step: int | None = None):
    key = "runner.logger.logger_backends"
    try:
        if backend == "tensorboard":
            # lazy: the chosen backend only (optional: tensorboard pulls torch, wandb / swanlab are extras)
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_step is None else resume_step + 1
            return backend, SummaryWriter(os.path.join(log_path, "tensorboard"), purge_step=purge)
        if backend == "wandb":
            # lazy: the chosen backend only (optional: tensorboard pulls torch, wandb / swanlab are extras)
            import wandb

            os.environ.setdefault("WANDB_MODE", "offline")
            return backend, wandb.init(project=project, name=experiment, dir=log_path, reinit=True)
        if backend == "swanlab":
            # lazy: the chosen backend only (optional: tensorboard pulls torch, wandb / swanlab are extras)
            import swanlab

            mode = os.environ.get("SWANLAB_MODE", "offline")
            return backend, swanlab.init(project=project, experiment_name=experiment, logdir=log_path,
                                         mode=mode)
    except ImportError as exc:
        raise ConfigError(key, f"{backend!r} is chosen but not installed ({exc}); "
                               f"pip install {backend}, or remove it") from exc
    raise ConfigError(key, f"unknown backend {backend!r}; choose tensorboard, wandb or swanlab")


def read_metrics(path: str) -> list[dict[str, float]]:
    """The records of a ``metrics.jsonl`` file, in order."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
