"""The schedule every runner shares: evaluate first and every N steps, checkpoint every N steps or
N seconds, stop at a step count or a wall-time limit, log each step's metrics, show a progress bar.

A runner subclasses :class:`ScheduledRunner`, sets ``self.schedule`` (a :class:`Schedule`, made
from its config's runner section) and supplies ``train_step``, ``validate``, ``save_checkpoint``
and ``load_checkpoint``; :meth:`ScheduledRunner.fit` is the loop, :meth:`ScheduledRunner.run`
the whole job after launch.

Example:
    >>> from rlinf.config.runner import RunnerConfig
    >>> s = Schedule.from_runner(RunnerConfig(val_check_interval=2, save_interval=3))
    >>> [k for k in range(7) if s.validates_after(k, total=6)], [k for k in range(1, 7) if s.saves_after(k, 6)]
    ([0, 2, 4, 6], [3, 6])
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from rlinf.utils.curves import plot_curves
from rlinf.utils.metric_logger import MetricLogger


@dataclass(frozen=True)
class Schedule:
    """When a runner evaluates, saves and stops.

    Attributes:
        label: the progress bar's label.
        val_interval: evaluate before the first step and after every N-th and the last;
            0 = after the last step only; -1 = never.
        save_interval: checkpoint after every N-th step and the last; -1 = not by count.
        save_interval_secs: also checkpoint once this many seconds passed since the last one.
        max_seconds: stop (after evaluating and saving) once this much wall time has passed.
        resume_dir: the checkpoint to resume from (None: a fresh run).
        only_eval: evaluate once and stop.
        export: write the trained policy at the end (:meth:`ScheduledRunner.export`).
        curves_path: the PNG of the run's curves written at the end (None: none).
    """

    label: str
    val_interval: int = 1
    save_interval: int = -1
    save_interval_secs: float | None = None
    max_seconds: float | None = None
    resume_dir: str | None = None
    only_eval: bool = False
    export: bool = False
    curves_path: str | None = None

    @classmethod
    def from_runner(cls, runner) -> Schedule:
        """The schedule of a :class:`~rlinf.config.runner.RunnerConfig` (math, embodied)."""
        return cls(label=runner.task_type, val_interval=runner.val_check_interval,
                   save_interval=runner.save_interval, save_interval_secs=runner.save_interval_secs,
                   max_seconds=runner.max_minutes * 60 if runner.max_minutes else None,
                   resume_dir=runner.resume_dir, only_eval=runner.only_eval, export=runner.export_hf,
                   curves_path=os.path.join(runner.logger.log_path, "curves.png") if runner.plot_curves else None)

    def validates_after(self, done: int, total: int) -> bool:
        """Whether an evaluation runs when ``done`` steps have finished (0 = before the first)."""
        if self.val_interval < 0:
            return False
        if done == total:
            return True
        return self.val_interval >= 1 and done % self.val_interval == 0

    def saves_after(self, done: int, total: int) -> bool:
        """Whether the step count asks for a checkpoint after ``done`` steps."""
        return self.save_interval > 0 and (done % self.save_interval == 0 or done == total)


class ScheduledRunner:
    """Base of the training loops.

    Subclasses set ``self.schedule``, ``self.logger``, ``self.step``, ``self.total_steps`` and
    ``self.history`` and implement the methods below that raise.
    """

    #: Progress-bar label -> metric key, shown after each step when present.
    BAR_KEYS: Mapping[str, str] = {}
    #: Metrics drawn by :meth:`plot`.
    CURVE_KEYS: tuple[str, ...] = ()
    #: Metric whose first / last value :meth:`summary` reports.
    SUMMARY_KEY = "val/accuracy"
    #: Metric that is 0 when :attr:`SUMMARY_KEY` could not be measured at all (an environment
    #: that reports no success); None = it always can.
    SUMMARY_REPORTED_KEY: str | None = None

    schedule: Schedule
    logger: MetricLogger | None
    step: int
    total_steps: int
    history: list[dict[str, float]]
    #: measures each training step (set by the run layer: :class:`~rlinf.runners.autoplace_profile.StepMeter`)
    step_meter = None

    def train_step(self) -> dict[str, float]:
        """One training step; advances ``self.step`` and returns its metrics."""
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

    def close(self) -> None:
        """Release what the runner holds (threads, connections); the groups are shut down by
        the run layer."""

    def run(self, print_fn=print) -> dict[str, float]:
        """The whole job after launch: resume (``schedule.resume_dir``), then evaluate only
        (``schedule.only_eval``) or :meth:`fit`, export the policy and plot the curves."""
        s = self.schedule
        if s.resume_dir:
            self.load_checkpoint(s.resume_dir)
            print_fn(f"[rlinf] resumed at step {self.step} from {s.resume_dir}")
        if s.only_eval:
            metrics = self.validate()
            if self.logger is not None:
                self.logger.log(metrics, step=self.step)
            return {"steps": float(self.step), **metrics}
        summary = self.fit(print_fn)
        if s.export:
            print_fn(f"[rlinf] trained policy saved to {self.export()}")
        if s.curves_path and self.plot(s.curves_path):
            print_fn(f"[rlinf] curves: {s.curves_path}")
        return summary

    def fit(self, print_fn=print) -> dict[str, float]:
        """Train to ``total_steps`` (or ``schedule.max_seconds``); returns :meth:`summary`."""
        from tqdm import tqdm  # lazy: tqdm only for a progress bar on a terminal

        s = self.schedule
        started = last_save = time.monotonic()
        validating = self.has_validation()
        if validating and self.step == 0 and s.validates_after(0, self.total_steps):
            self.record({"step": 0.0, **self.validate()})
        with tqdm(total=self.total_steps, initial=self.step, desc=s.label, unit="step",
                  dynamic_ncols=True) as bar:
            meter = self.step_meter
            while self.step < self.total_steps:
                if meter is not None:
                    meter.begin()
                metrics = self.train_step()
                if meter is not None:
                    meter.end()
                metrics["time/elapsed"] = time.monotonic() - started  # wall time since the fit began
                out_of_time = s.max_seconds is not None and time.monotonic() - started >= s.max_seconds
                last = self.step == self.total_steps or out_of_time
                if validating and (s.validates_after(self.step, self.total_steps) or last):
                    metrics.update(self.validate())
                self.record(metrics)
                bar.set_postfix({name: f"{metrics[k]:.3f}" for name, k in self.BAR_KEYS.items() if k in metrics})
                bar.update(1)
                by_time = s.save_interval_secs is not None and time.monotonic() - last_save >= s.save_interval_secs
                if by_time or s.saves_after(self.step, self.total_steps) or (out_of_time and s.save_interval > 0):
                    self.save_checkpoint()
                    last_save = time.monotonic()
                if out_of_time and self.step < self.total_steps:
                    print_fn(f"[rlinf] wall-time limit ({s.max_seconds / 60:g} min) reached after step {self.step}")
                    break
        return self.summary()

    def record(self, metrics: dict[str, float]) -> None:
        """Keep ``metrics`` (with a ``step`` key) in the history and send them to the logger."""
        self.history.append(metrics)
        if self.logger is not None:
            self.logger.log({k: v for k, v in metrics.items() if k != "step"}, step=int(metrics["step"]))

    def summary(self) -> dict[str, float]:
        """``steps`` and the first / last value of :attr:`SUMMARY_KEY`; ``val/<name>_reported``
        0 when it was never measured because :attr:`SUMMARY_REPORTED_KEY` said so."""
        key = self.SUMMARY_KEY
        values = [m[key] for m in self.history if key in m]
        out = {"steps": float(self.step)}
        name = key.split("/")[-1]
        if values:
            out.update({f"val/first_{name}": values[0], f"val/last_{name}": values[-1]})
        elif self.SUMMARY_REPORTED_KEY and any(m.get(self.SUMMARY_REPORTED_KEY) == 0.0 for m in self.history):
            out[f"val/{name}_reported"] = 0.0
        return out

    def plot(self, path: str) -> list[str]:
        """The run's curves so far into a PNG."""
        return plot_curves(self.history, path, keys=self.CURVE_KEYS)
