"""``env_config:`` of a web-agent run: browser servers, HTTP pools, timeouts, task sampling, saves.

Keys are spelled as in WebGym's configuration reference (seed 000) and its rollout script (seed
004), with their defaults; keys marked *ours* are this runtime's additions. The section checks its
own ranges and pairs of keys; what depends on other sections (placement, the policy) is checked
by :class:`rlinf.config.web.WebAgentConfig`.

Example:
    >>> from rlinf.utils.typed_config import parse_section
    >>> env = parse_section(WebEnvConfig, {"split": "test", "http_pools": {"navigate": 32}}, "env_config")
    >>> env.split, env.http_pools.navigate, env.http_pools.allocate, env.max_steps("test", "hard")
    ('test', 32, 4, 70)
    >>> parse_section(WebEnvConfig, {"http_pools": {"click": 8}}, "env_config")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: env_config.http_pools.click: unknown key; allowed keys are ac_tree, allocate, execute, metadata, navigate, page_metadata, release, screenshot
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from rlinf.utils.typed_config import check, rule

#: the browser server's operations, one HTTP connection pool each (seed 000's ``http_pools`` names)
OPERATIONS = ("metadata", "navigate", "allocate", "release", "screenshot", "ac_tree", "page_metadata", "execute")

#: task difficulties, as task files write them
DIFFICULTIES = ("easy", "medium", "hard")


@dataclass(frozen=True)
class HttpPools:
    """``env_config.http_pools``: connections per browser-server operation (at most this many
    requests of the operation in flight). A missing name takes its default (seed 000's train
    values); an unknown name is refused. Split over env worker ranks by ``rank_load_weight``, so
    each value must be at least the number of env ranks.

    Attributes:
        metadata: screen size, once per task.
        navigate: the first navigation of a task.
        allocate: browser instance allocation, once per task.
        release: browser instance release, once per task.
        screenshot: screenshot capture, once per step.
        ac_tree: accessibility tree (the observation text), once per step.
        page_metadata: page title and URL, once per step.
        execute: action execution, once per step.
    """

    metadata: int = 128
    navigate: int = 128
    allocate: int = 4
    release: int = 4
    screenshot: int = 128
    ac_tree: int = 128
    page_metadata: int = 128
    execute: int = 128

    def as_dict(self) -> dict[str, int]:
        """Operation name -> pool size.

        >>> HttpPools(navigate=32).as_dict()["navigate"]
        32
        """
        return {op: getattr(self, op) for op in OPERATIONS}

    def validate(self, path: str) -> None:
        for op in OPERATIONS:
            check(getattr(self, op) >= 1, f"{path}.{op}", f"must be >= 1 connection, got {getattr(self, op)}")


@dataclass(frozen=True)
class TrainMaxSteps:
    """``env_config.train_difficulty_max_steps``: the step budget of a train episode per task
    difficulty (exactly the keys easy, medium, hard; a missing one takes its default).

    Attributes:
        easy: steps of an easy task.
        medium: steps of a medium task.
        hard: steps of a hard task.
    """

    easy: int = 10
    medium: int = 20
    hard: int = 30

    def validate(self, path: str) -> None:
        for name in DIFFICULTIES:
            check(getattr(self, name) >= 1, f"{path}.{name}", f"must be >= 1 step, got {getattr(self, name)}")


@dataclass(frozen=True)
class TestMaxSteps(TrainMaxSteps):
    """``env_config.test_difficulty_max_steps``: the step budget of an evaluation episode per task
    difficulty (exactly the keys easy, medium, hard; a missing one takes its default).

    Attributes:
        easy: steps of an easy task.
        medium: steps of a medium task.
        hard: steps of a hard task.
    """

    __test__ = False  # not a pytest class despite its name

    easy: int = 30
    medium: int = 50
    hard: int = 70


@dataclass(frozen=True)
class TaskRatio:
    """``env_config.train_tasks_ratio`` (ours): the share of each difficulty in a train batch
    drawn by the ``ratio`` sampler; the three fractions are >= 0 and sum to 1.

    Attributes:
        easy: fraction of easy tasks.
        medium: fraction of medium tasks.
        hard: fraction of hard tasks.
    """

    easy: float
    medium: float
    hard: float

    def as_dict(self) -> dict[str, float]:
        """Difficulty -> fraction, as the samplers take it."""
        return {name: getattr(self, name) for name in DIFFICULTIES}

    def validate(self, path: str) -> None:
        for name in DIFFICULTIES:
            value = getattr(self, name)
            check(math.isfinite(value) and value >= 0, f"{path}.{name}", f"must be a fraction >= 0, got {value}")
        total = self.easy + self.medium + self.hard
        check(abs(total - 1.0) <= 1e-6, path, f"the fractions must sum to 1, got {total:g}")


@dataclass(frozen=True)
class SiteServerConfig:
    """``env_config.site_server`` (ours): the shipped websites (shop, wiki, forms), served by a
    real HTTP server each env worker starts.

    Attributes:
        enabled: start the sites and join a task's relative ``start_url`` to their base URL;
            false = every task's ``start_url`` must be absolute (checked when tasks are loaded).
        seed: the catalog seed of the sites (product names, prices, articles); task files are
            generated against one seed, so keep the one they were made with.
    """

    enabled: bool = True
    seed: int = 0


@dataclass(frozen=True)
class BrowserConfig:
    """``env_config.browser`` (ours): the Chromium each env worker drives through Playwright.

    Attributes:
        executable_path: the Chromium binary; null = the system's
            (``/usr/lib/chromium/chromium-headless-shell``, then ``/usr/lib/chromium/chromium``).
        viewport: page width and height in CSS pixels (``[1280, 720]``).
        headless: run without a display.
    """

    executable_path: str | None = None
    viewport: tuple[int, ...] = (1280, 720)
    headless: bool = True

    def validate(self, path: str) -> None:
        check(len(self.viewport) == 2 and all(v >= 64 for v in self.viewport), f"{path}.viewport",
              f"expected [width, height], each >= 64 pixels, got {list(self.viewport)}")


@dataclass(frozen=True)
class WebEnvConfig:
    """``env_config``: the environment side of a web-agent run.

    Attributes:
        vllm_server_url: null = the run's own rollout workers generate (placed by
            ``cluster.component_placement.rollout``); a URL = an external OpenAI-compatible server
            (WebGym's default was ``http://localhost:8999``), which then cannot receive trained
            weights, so it serves rollout-only runs.
        wait_timeout: seconds an ``allocate`` waits for a free browser instance.
        operation_timeout: seconds one browser-server operation may take (both sides).
        vllm_timeout: seconds one generation request may take.
        evaluation_workers: trajectories judged at once.
        screenshot_comparison_workers: screenshot comparisons run at once by the judges.
        completion_threshold: fraction of a batch's episodes that must finish before the rest
            get ``completion_grace_period`` more seconds and are then stopped (stragglers).
        completion_grace_period: seconds the stragglers get once the threshold is reached.
        instance_lifetime_max: minutes after which a browser instance is recycled.
        task_timeout_minutes: minutes one episode may take at most.
        server_size: browser instances open at once over all env workers (split by
            ``rank_load_weight``); also the number of episodes in flight.
        verbose: log every browser operation and generation.
        use_rich_actree: the observation is Chromium's full accessibility tree instead of the
            compact list of marked elements and text.
        max_retries: retries of a browser-server request after a connection error or HTTP 5xx
            (never after 4xx).
        http_pools: see :class:`HttpPools`.
        max_vllm_sessions: experimental in WebGym and not supported: only null is accepted;
            concurrency is ``server_size``.
        split: which task set a rollout-only run collects (``train`` or ``test``); the online
            loop collects train rollouts and evaluates on ``test_tasks``.
        train_difficulty_max_steps: see :class:`TrainMaxSteps`.
        test_difficulty_max_steps: see :class:`TestMaxSteps`.
        train_tasks_rollout_size: tasks per train batch; -1 = every task.
        test_tasks_rollout_size: tasks per evaluation batch; -1 = every task, 0 = no evaluation.
        test_tasks_repeat_times: episodes per evaluation task (0 only with no evaluation).
        train_tasks_sampler: ``uniform`` (tasks drawn at random) or ``ratio`` (per difficulty,
            by ``train_tasks_ratio``).
        train_tasks: the train task file (JSONL), relative to ``data_path`` unless absolute.
        test_tasks: the evaluation task file (JSONL), relative to ``data_path`` unless absolute.
        save_traj_progress: save the trajectories of a batch incrementally while it runs.
        save_every_percent: incremental save interval in percent of the batch (1..100).
        checkpoint_interval: ours: the same interval as a fraction of the batch (seed 004's
            argument); null = save_every_percent / 100; set, it must agree with it.
        train_tasks_ratio: see :class:`TaskRatio` (needed by, and only by, the ratio sampler).
        blocked_domains: ours: task domains left out of train sampling (test tasks are never
            filtered).
        rank_load_weight: ours: one positive weight per env worker rank; the browser instances
            and HTTP connections are split in these proportions; empty = equal shares.
        site_server: see :class:`SiteServerConfig`.
        browser: see :class:`BrowserConfig`.
        save_screenshots: ours: save each step's screenshot as a PNG next to the trajectories.
    """

    vllm_server_url: str | None = None
    wait_timeout: float = 2400.0
    operation_timeout: float = 120.0
    vllm_timeout: float = 240.0
    evaluation_workers: int = 16
    screenshot_comparison_workers: int = 32
    completion_threshold: float = 0.95
    completion_grace_period: float = 30.0
    instance_lifetime_max: float = 50.0
    task_timeout_minutes: float = 300.0
    server_size: int = 64
    verbose: bool = False
    use_rich_actree: bool = False
    max_retries: int = 2
    http_pools: HttpPools = field(default_factory=HttpPools)
    max_vllm_sessions: int | None = rule(None, only=(None,), reason=(
        "experimental in WebGym and not supported here; concurrency is env_config.server_size "
        "(episodes in flight), so leave max_vllm_sessions null"))
    split: Literal["train", "test"] = "train"
    train_difficulty_max_steps: TrainMaxSteps = field(default_factory=TrainMaxSteps)
    test_difficulty_max_steps: TestMaxSteps = field(default_factory=TestMaxSteps)
    train_tasks_rollout_size: int = 1024
    test_tasks_rollout_size: int = 0
    test_tasks_repeat_times: int = 0
    train_tasks_sampler: Literal["uniform", "ratio"] = "uniform"
    train_tasks: str = "train.jsonl"
    test_tasks: str = "test.jsonl"
    save_traj_progress: bool = True
    save_every_percent: int = 25
    checkpoint_interval: float | None = None
    train_tasks_ratio: TaskRatio | None = None
    blocked_domains: tuple[str, ...] = ()
    rank_load_weight: tuple[float, ...] = ()
    site_server: SiteServerConfig = field(default_factory=SiteServerConfig)
    browser: BrowserConfig = field(default_factory=BrowserConfig)
    save_screenshots: bool = True

    @property
    def evaluates(self) -> bool:
        """Whether evaluation rollouts run (``test_tasks_rollout_size`` != 0)."""
        return self.test_tasks_rollout_size != 0

    @property
    def save_fraction(self) -> float | None:
        """The incremental save interval as a fraction of the batch; None = no incremental saves.

        >>> WebEnvConfig(save_every_percent=10).save_fraction, WebEnvConfig(save_traj_progress=False).save_fraction
        (0.1, None)
        """
        if not self.save_traj_progress:
            return None
        return self.checkpoint_interval if self.checkpoint_interval is not None else self.save_every_percent / 100

    def max_steps(self, split: str, difficulty: str) -> int:
        """The step budget of an episode of ``split`` (train / test) and ``difficulty``."""
        table = self.train_difficulty_max_steps if split == "train" else self.test_difficulty_max_steps
        return getattr(table, difficulty)

    def validate(self, path: str) -> None:
        for key in ("wait_timeout", "operation_timeout", "vllm_timeout", "instance_lifetime_max",
                    "task_timeout_minutes"):
            value = getattr(self, key)
            check(math.isfinite(value) and value > 0, f"{path}.{key}", f"must be > 0, got {value}")
        for key in ("evaluation_workers", "screenshot_comparison_workers", "server_size"):
            check(getattr(self, key) >= 1, f"{path}.{key}", f"must be >= 1, got {getattr(self, key)}")
        check(0 < self.completion_threshold <= 1, f"{path}.completion_threshold",
              f"must be in (0, 1] (a fraction of the batch), got {self.completion_threshold}")
        check(self.completion_grace_period >= 0, f"{path}.completion_grace_period",
              f"must be >= 0 seconds, got {self.completion_grace_period}")
        check(self.max_retries >= 0, f"{path}.max_retries", f"must be >= 0, got {self.max_retries}")
        check(self.vllm_server_url is None or self.vllm_server_url.startswith(("http://", "https://")),
              f"{path}.vllm_server_url", f"expected null or an http(s):// URL, got {self.vllm_server_url!r}")
        check(self.train_tasks_rollout_size == -1 or self.train_tasks_rollout_size >= 1,
              f"{path}.train_tasks_rollout_size",
              f"must be -1 (every task) or >= 1, got {self.train_tasks_rollout_size}")
        check(self.test_tasks_rollout_size >= -1, f"{path}.test_tasks_rollout_size",
              f"must be -1 (every task), 0 (no evaluation) or >= 1, got {self.test_tasks_rollout_size}")
        check(self.test_tasks_repeat_times >= 0, f"{path}.test_tasks_repeat_times",
              f"must be >= 0, got {self.test_tasks_repeat_times}")
        if self.evaluates:
            check(self.test_tasks_repeat_times >= 1, f"{path}.test_tasks_repeat_times",
                  f"0 with test_tasks_rollout_size {self.test_tasks_rollout_size} would run no evaluation "
                  "episode; set >= 1 (or test_tasks_rollout_size: 0 for no evaluation)")
        else:
            check(self.test_tasks_repeat_times == 0, f"{path}.test_tasks_repeat_times",
                  f"{self.test_tasks_repeat_times} has no effect with test_tasks_rollout_size 0 (no evaluation); "
                  "set 0, or give test_tasks_rollout_size")
        for key in ("train_tasks", "test_tasks"):
            check(bool(getattr(self, key).strip()), f"{path}.{key}", "expected a file name, got ''")
        self._check_sampler(path)
        self._check_saves(path)
        for i, domain in enumerate(self.blocked_domains):
            check(bool(domain.strip()), f"{path}.blocked_domains[{i}]", "expected a domain name, got ''")
        for i, weight in enumerate(self.rank_load_weight):
            check(math.isfinite(weight) and weight > 0, f"{path}.rank_load_weight[{i}]",
                  f"must be > 0, got {weight}")

    def _check_sampler(self, path: str) -> None:
        if self.train_tasks_sampler == "ratio":
            check(self.train_tasks_ratio is not None, f"{path}.train_tasks_ratio",
                  "missing: train_tasks_sampler ratio needs {easy: .., medium: .., hard: ..} fractions")
        else:
            check(self.train_tasks_ratio is None, f"{path}.train_tasks_ratio",
                  "is read by train_tasks_sampler: ratio only; remove it or set the sampler to ratio "
                  f"(it is {self.train_tasks_sampler!r})")

    def _check_saves(self, path: str) -> None:
        check(1 <= self.save_every_percent <= 100, f"{path}.save_every_percent",
              f"must be in 1..100 (percent of the batch), got {self.save_every_percent}")
        interval = self.checkpoint_interval
        if interval is None:
            return
        check(0 < interval <= 1, f"{path}.checkpoint_interval",
              f"must be in (0, 1] (a fraction of the batch) or null, got {interval}")
        check(self.save_traj_progress, f"{path}.checkpoint_interval",
              "has no effect with save_traj_progress false (no incremental saves); set it null")
        check(abs(interval * 100 - self.save_every_percent) < 1e-9, f"{path}.checkpoint_interval",
              f"{interval} disagrees with {path}.save_every_percent {self.save_every_percent} "
              f"({self.save_every_percent / 100:g} of the batch); set checkpoint_interval null (it then "
              "follows save_every_percent) or make the two agree")
