"""The schedule every runner shares: validate first and every ``val_check_interval`` steps,
checkpoint every ``save_interval`` steps, log each step's metrics, show a progress bar.

A runner subclasses :class:`ScheduledRunner` and supplies ``train_step``, ``validate`` and
``save_checkpoint``; :meth:`ScheduledRunner.fit` is the loop.
"""

from __future__ import annotations

import os
import time
from typing import Mapping

from rlinf.config.runner import RunnerConfig
from rlinf.utils.curves import plot_curves
from rlinf.utils.metric_logger import MetricLogger


class ScheduledRunner:
    """Base of the training loops.

    Subclasses set ``self.runner_cfg``, ``self.logger``, ``self.step``, ``self.total_steps`` and
    ``self.history`` and implement the three methods below.
    """

    #: Progress-bar label -> metric key, shown after each step when present.
    BAR_KEYS: Mapping[str, str] = {}
    #: Metrics drawn by :meth:`plot`.
    CURVE_KEYS: tuple[str, ...] = ()
    #: Metric whose first / last value :meth:`summary` reports.
    SUMMARY_KEY = "val/accuracy"

    runner_cfg: RunnerConfig
    logger: MetricLogger | None
    step: int
    total_steps: int
    history: list[dict[str, float]]

    def train_step(self) -> dict[str, float]:
        raise NotImplementedError

    def validate(self) -> dict[str, float]:
        raise NotImplementedError

    def save_checkpoint(self) -> str:
        raise NotImplementedError

    def has_validation(self) -> bool:
        return True

    def load_checkpoint(self, path: str) -> None:
        raise NotImplementedError

    def export(self) -> str:
        """Write the trained policy (``runner.export_hf``); returns where."""
        raise NotImplementedError

    def run(self, print_fn=print) -> dict[str, float]:
        """The whole job after launch: resume (``runner.resume_dir``), then evaluate only
        (``runner.only_eval``) or :meth:`fit`, export the policy and plot the curves."""
        cfg = self.runner_cfg
        if cfg.resume_dir:
            self.load_checkpoint(cfg.resume_dir)
            print_fn(f"[rlinf] resumed at step {self.step} from {cfg.resume_dir}")
        if cfg.only_eval:
            metrics = self.validate()
            if self.logger is not None:
                self.logger.log(metrics, step=self.step)
            return {"steps": float(self.step), **metrics}
        summary = self.fit()
        if cfg.export_hf:
            print_fn(f"[rlinf] trained policy saved to {self.export()}")
        curves = os.path.join(cfg.logger.log_path, "curves.png")
        if cfg.plot_curves and self.plot(curves):
            print_fn(f"[rlinf] curves: {curves}")
        return summary

    def fit(self) -> dict[str, float]:
        """Train to ``total_steps``; returns :meth:`summary`."""
        from tqdm import tqdm

        cfg = self.runner_cfg
        last_save = time.monotonic()
        validating = cfg.val_check_interval > 0 and self.has_validation()
        if validating and self.step == 0:
            self.record({"step": 0.0, **self.validate()})
        with tqdm(total=self.total_steps, initial=self.step, desc=cfg.task_type, unit="step",
                  dynamic_ncols=True) as bar:
            while self.step < self.total_steps:
                metrics = self.train_step()
                last = self.step == self.total_steps
                if validating and (self.step % cfg.val_check_interval == 0 or last):
                    metrics.update(self.validate())
                self.record(metrics)
                bar.set_postfix({name: f"{metrics[k]:.3f}" for name, k in self.BAR_KEYS.items() if k in metrics})
                bar.update(1)
                by_time = cfg.save_interval_secs is not None and time.monotonic() - last_save >= cfg.save_interval_secs
                if by_time or cfg.save_interval > 0 and (self.step % cfg.save_interval == 0 or last):
                    self.save_checkpoint()
                    last_save = time.monotonic()
        return self.summary()

    def record(self, metrics: dict[str, float]) -> None:
        """Keep ``metrics`` (with a ``step`` key) in the history and send them to the logger."""
        self.history.append(metrics)
        if self.logger is not None:
            self.logger.log({k: v for k, v in metrics.items() if k != "step"}, step=int(metrics["step"]))

    def summary(self) -> dict[str, float]:
        """``steps`` and the first / last value of :attr:`SUMMARY_KEY`."""
        key = self.SUMMARY_KEY
        values = [m[key] for m in self.history if key in m]
        out = {"steps": float(self.step)}
        if values:
            name = key.split("/")[-1]
            out.update({f"val/first_{name}": values[0], f"val/last_{name}": values[-1]})
        return out

    @property
    def run_dir(self) -> str:
        return os.path.join(self.runner_cfg.output_dir, self.runner_cfg.experiment_name)

    def plot(self, path: str) -> list[str]:
        """The run's curves so far into a PNG."""
        return plot_curves(self.history, path, keys=self.CURVE_KEYS)
