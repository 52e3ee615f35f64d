"""Recipes: one kind of run (math RL, embodied RL, web-agent RL, ...) on one shared run layer.

A :class:`Recipe` says what is specific to its kind of run; :func:`run_recipe` does the rest,
the same for every recipe::

    compose (the Hydra entry)  ->  parse the typed root config  ->  checks before Ray
    ->  memory estimate (cluster.memory_check)  ->  cluster + placement plan  ->  logger
    ->  worker groups  ->  runner (resume?)
    ->  fit  ->  shutdown                          all under runner.recover_mode

What a recipe gives:

* :attr:`Recipe.config_cls`: its typed root config (a :class:`~rlinf.config.root.RootConfig`);
* :meth:`Recipe.prepare`: every check knowable before Ray (config, files, simulators, ...),
  returning a :class:`RunStart` (the config, the step to resume from and what the checks loaded);
* :meth:`Recipe.launch`: its worker groups on the plan (an object with ``shutdown()``);
* :meth:`Recipe.build_runner`: its runner, a :class:`~rlinf.runners.schedule.ScheduledRunner`;
* :meth:`Recipe.recovery` / :meth:`Recipe.with_resume`: where its checkpoints are and how a
  restart resumes (read from the raw config before the full parse);
* :meth:`Recipe.describe` (optional): start-up lines about the run.

What the run layer asks a recipe for (hooks; the shared code never names a recipe):

* :meth:`Recipe.claims`: whether a raw config is its own (``runner.task_type``, a layout);
  :func:`rlinf.runners.registry.recipe_for` asks every recipe;
* :meth:`Recipe.memory_estimate`: each role's memory per rank for the config on a placement
  (``cluster.memory_check`` before Ray, ``python -m rlinf.scheduler.placement CONFIG --memory``);
* :meth:`Recipe.placement_workflow`: its step as the placement planner sees it (issue 46);
* :meth:`Recipe.needed_extras`: the set-up extras a raw config needs (:mod:`rlinf.runners.extras_check`);
* :attr:`Recipe.config_cls` with :attr:`Recipe.reference_page` / :attr:`Recipe.reference_order` /
  :attr:`Recipe.reference_suffix`: where its keys go in the generated config reference
  (:mod:`rlinf.runners.reference_doc`).

Shared runner code (this module, ``schedule``, ``recovery``, ``launch``, ``entry``,
``compose``, ``checkpoint``, ``preflight``) imports no recipe; each recipe lives in its own
folder under ``rlinf/runners/`` and imports from the shared layer only.

Example (a recipe's entry point; see docs/design.md "How to add a recipe")::

    from rlinf.runners.math.recipe import MATH_RECIPE
    summary = run_recipe(MATH_RECIPE, raw_config_dict)        # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from rlinf.config.root import RootConfig
from rlinf.runners.autoplace_profile import StepMeter, advise, config_hint
from rlinf.runners.launch import open_logger, start_cluster
from rlinf.runners.memory_check import check_before_ray
from rlinf.runners.recovery import Recovery, run_with_recovery, runner_recovery, with_resume_dir
from rlinf.scheduler.errors import OutOfMemoryError
from rlinf.scheduler.memory import MemoryEstimate


@dataclass
class RunStart:
    """What a recipe's :meth:`Recipe.prepare` hands on: the typed config and the step to
    resume from (None: a fresh run). Recipes subclass it to carry what their checks loaded
    (tokenizer, data loaders, simulator specs, tasks)."""

    cfg: Any
    resume_step: int | None


class Recipe:
    """One kind of run; see the module docstring. Subclasses set the class attributes and
    implement :meth:`prepare`, :meth:`launch` and :meth:`build_runner`; a run whose ``runner:``
    section is not :class:`~rlinf.config.runner.RunnerConfig` also overrides :meth:`recovery`
    and :meth:`with_resume`."""

    #: short name ("math"), used in messages
    name: ClassVar[str] = ""
    #: the typed root config
    config_cls: ClassVar[type[RootConfig]]
    #: the summary metric the entry prints first -> last (``val/first_<metric>``)
    summary_metric: ClassVar[str] = "accuracy"
    #: how the entry names it ("held-out accuracy")
    summary_label: ClassVar[str] = "validation"
    #: the ``runner.task_type`` that names it (None: a config names it another way, :meth:`claims`)
    task_type: ClassVar[str | None] = None
    #: how a config without ``runner.task_type`` is recognised, for the lookup's error ("" = it is not)
    layout_hint: ClassVar[str] = ""
    #: the config reference page its keys go to (``main``: docs/config_reference.md, ``web``:
    #: docs/config_reference_web.md), its rank there (lower first: the first recipe of a page
    #: gives every section, later ones add the sections not yet shown) and the words that head a
    #: section of its own whose name an earlier recipe already used ("" = such a section is left out)
    reference_page: ClassVar[str] = "main"
    reference_order: ClassVar[int] = 100
    reference_suffix: ClassVar[str] = ""

    def claims(self, raw: Mapping) -> bool:
        """Whether the plain raw config ``raw`` asks for this recipe (default: its
        ``runner.task_type`` is :attr:`task_type`)."""
        return self.task_type is not None and task_type_of(raw) == self.task_type

    def prepare(self, raw: Any) -> RunStart:
        """Parse ``raw`` and run every check knowable before Ray; raise
        :class:`~rlinf.utils.typed_config.ConfigError` naming the key."""
        raise NotImplementedError

    def describe(self, start: RunStart, plan) -> list[str]:
        """Start-up lines about the run (printed after the cluster starts)."""
        return []

    def memory_estimate(self, cfg: Any, plan, capacity, start: RunStart | None = None):
        """Each placed role's memory per rank (a :class:`~rlinf.scheduler.memory.MemoryEstimate`)
        for the typed config ``cfg`` on ``plan`` against ``capacity`` (its ``kind``: ``gpu`` keeps
        model state on the device, ``cpu`` is moved to host RAM by the caller). ``start``: what
        :meth:`prepare` found (None from the placement CLI, which runs no checks). A role it
        cannot size is left out with a note; a :class:`~rlinf.utils.typed_config.ConfigError`
        becomes a note. Default: nothing estimated."""
        return MemoryEstimate({}, (f"not estimated: the {self.name} recipe gives no memory estimate",))

    def placement_workflow(self, cfg: Any):
        """One step of the run as the placement planner sees it (a
        :class:`~rlinf.scheduler.autoplace.Workflow` over the placed roles, for ``python -m
        toolkits.autoplace`` and the advice at the end of a run), from the typed config ``cfg``;
        None: the planner does not plan this kind of run (default)."""
        return None

    def needed_extras(self, raw: Any) -> list[tuple[str, str]]:
        """``(extra, what needs it)`` pairs of ``pyproject.toml`` extras this recipe's run of the
        raw config ``raw`` needs beyond the shared ones (:mod:`rlinf.runners.extras_check`)."""
        return []

    def open_logger(self, start: RunStart):
        """The run's :class:`~rlinf.utils.metric_logger.MetricLogger` (``runner.logger``)."""
        return open_logger(start.cfg.runner, start.resume_step)

    def launch(self, start: RunStart, cluster, plan, print_fn: Callable = print):
        """Start the worker groups; returns an object with ``shutdown()``."""
        raise NotImplementedError

    def build_runner(self, start: RunStart, groups, logger, print_fn: Callable = print):
        """The run's :class:`~rlinf.runners.schedule.ScheduledRunner`."""
        raise NotImplementedError

    def recovery(self, raw: dict) -> Recovery:
        """``runner.recover_mode`` and the checkpoint folder, from the plain raw config (default:
        a ``runner:`` section of :class:`~rlinf.config.runner.RunnerConfig`)."""
        return runner_recovery(raw)

    def with_resume(self, raw: dict, checkpoint: str | None) -> dict:
        """A copy of ``raw`` that resumes from ``checkpoint`` (a ``global_step_<N>`` folder; None:
        from the start); default: ``runner.resume_dir``."""
        return with_resume_dir(raw, checkpoint)


def task_type_of(raw: Any) -> Any:
    """``runner.task_type`` of a plain raw config, None when not given.

    >>> task_type_of({"runner": {"task_type": "math"}}), task_type_of({"runner": None}), task_type_of({})
    ('math', None, None)
    """
    runner = raw.get("runner") if isinstance(raw, Mapping) else None
    return runner.get("task_type") if isinstance(runner, Mapping) else None


def run_recipe(recipe: Recipe, raw: Any, print_fn: Callable = print, *, profile_path: str | None = None,
               config: str | None = None) -> dict[str, float]:
    """Run ``recipe`` on ``raw`` (a Hydra ``DictConfig`` or a plain dict) under
    ``runner.recover_mode`` (:func:`~rlinf.runners.recovery.run_with_recovery`). Returns the
    runner's summary (``steps`` and, when it evaluates, ``val/first_<metric>`` /
    ``val/last_<metric>``). ``profile_path`` / ``config``: where the measured placement profile
    goes (default ``<run dir>/autoplace_profile.yaml``) and the config file the advice names
    (default: the Hydra entry's; :func:`~rlinf.runners.autoplace_profile.advise`)."""
    return run_with_recovery(recipe, raw, lambda plain: run_once(recipe, plain, print_fn, profile_path=profile_path,
                                                                 config=config), print_fn)


def run_once(recipe: Recipe, raw: Any, print_fn: Callable = print, *, profile_path: str | None = None,
             config: str | None = None) -> dict[str, float]:
    """One attempt: checks before Ray, cluster, logger, groups, runner, fit, the measured phase
    times and the placement advice (:func:`~rlinf.runners.autoplace_profile.advise`), shutdown."""
    start = recipe.prepare(raw)
    check_before_ray(recipe, start.cfg, print_fn, start=start)  # cluster.memory_check, before Ray
    cluster, plan = start_cluster(start.cfg, print_fn)
    for line in recipe.describe(start, plan):
        print_fn(f"[rlinf] {line}")
    logger = recipe.open_logger(start)
    groups = runner = None
    try:
        groups = recipe.launch(start, cluster, plan, print_fn)
        runner = recipe.build_runner(start, groups, logger, print_fn)
        runner.step_meter = meter = StepMeter(cluster)
        summary = runner.run(print_fn)
        advise(recipe, raw, start.cfg, plan, cluster.shape, meter, getattr(runner, "run_dir", None), print_fn,
               config=config or config_hint(), profile_path=profile_path)
        return summary
    except OutOfMemoryError as exc:  # the one line says how far the run got
        exc.steps_done = getattr(runner, "step", None)
        raise
    finally:
        if runner is not None:
            runner.close()
        if groups is not None:
            groups.shutdown()
        if logger is not None:
            logger.close()
