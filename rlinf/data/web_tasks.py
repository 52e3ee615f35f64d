"""Web-agent task files: load and validate JSONL, resolve start URLs, sample a rollout's tasks.

The web recipe's dataset, as the prompt datasets are the math recipe's: a task may start on the
shipped sites (a path, joined to their URL) or on any web site (an absolute URL), so this module
belongs to no one environment.

A task (one JSON object per line, docs/web_agent.md) has ``task_id``, ``instruction``,
``start_url``, ``difficulty`` (easy / medium / hard), ``reference_answer`` and ``domain``, and
optionally ``family`` and ``answer_type`` (exact / number / contains, default exact). Any other
key is refused, so a misspelt optional field is caught instead of silently ignored.

Sampling follows WebGym's rollout script (seed 004) with the values of its config (seed 000:
``train_tasks_rollout_size``, ``test_tasks_rollout_size``, ``test_tasks_repeat_times``,
``train_tasks_sampler``), which the caller passes in:

* ``uniform``: ``size`` distinct tasks drawn without replacement. ``size = -1`` takes every task in
  file order. A ``size`` larger than the pool cycles through shuffled copies of the pool, so every
  task appears ``size // n`` or ``size // n + 1`` times and no task twice before all once.
* ``ratio``: ``size`` split over the difficulties by ``ratios`` (weights, normalised), exact counts
  by the largest-remainder rule (ties in easy / medium / hard order), then drawn uniformly within
  each difficulty as above, and shuffled together.
* Tasks whose ``domain`` (or start URL host) is in ``blocked_domains`` are removed for the
  ``train`` split only; ``test`` tasks are never filtered.
* ``repeat_times``: every sampled task ``N`` times, as ``N`` rounds over the sample (all of round 0
  first); each copy carries its ``repeat`` index.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import urljoin, urlsplit

DIFFICULTIES = ("easy", "medium", "hard")
ANSWER_TYPES = ("exact", "number", "contains")
REQUIRED = ("task_id", "instruction", "start_url", "difficulty", "reference_answer", "domain")
OPTIONAL = ("family", "answer_type")
SPLITS = ("train", "test")
SAMPLERS = ("uniform", "ratio")


class TaskFileError(ValueError):
    """A task file or a sampling request is invalid; the message is one line naming file:line and field."""


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text.replace(",", "")))
    except ValueError:
        return False


def validate_task(task: object, where: str = "task") -> dict:
    """Checks one task object and returns a normalised copy (``family`` and ``answer_type`` filled in).

    Raises :class:`TaskFileError` naming ``where`` and the field.

    Example:
        >>> t = validate_task({"task_id": "a", "instruction": "Price?", "start_url": "/shop/",
        ...                    "difficulty": "easy", "reference_answer": "$1.00", "domain": "shop"})
        >>> t["answer_type"], t["family"]
        ('exact', None)
        >>> validate_task({**t, "difficulty": "xhard"}, "train.jsonl:12")
        Traceback (most recent call last):
        ...
        rlinf.data.web_tasks.TaskFileError: train.jsonl:12: difficulty must be easy, medium or hard, got 'xhard'
    """
    if not isinstance(task, dict):
        raise TaskFileError(f"{where}: a task must be a JSON object, got {type(task).__name__}")
    unknown = sorted(set(task) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise TaskFileError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(REQUIRED + OPTIONAL)})")
    for key in REQUIRED:
        if key not in task:
            raise TaskFileError(f"{where}: missing field {key!r}")
        if not isinstance(task[key], str) or not task[key].strip():
            raise TaskFileError(f"{where}: {key} must be a non-empty string, got {task[key]!r}")
    out = {**task, "family": task.get("family"), "answer_type": task.get("answer_type", "exact")}
    if out["family"] is not None and (not isinstance(out["family"], str) or not out["family"].strip()):
        raise TaskFileError(f"{where}: family must be a non-empty string or absent, got {out['family']!r}")
    if out["difficulty"] not in DIFFICULTIES:
        raise TaskFileError(f"{where}: difficulty must be easy, medium or hard, got {out['difficulty']!r}")
    if out["answer_type"] not in ANSWER_TYPES:
        raise TaskFileError(f"{where}: answer_type must be exact, number or contains, got {out['answer_type']!r}")
    if out["answer_type"] == "number" and not _is_number(out["reference_answer"]):
        raise TaskFileError(f"{where}: reference_answer must be a number for answer_type 'number', "
                            f"got {out['reference_answer']!r}")
    url = out["start_url"]
    if not url.startswith("/") and urlsplit(url).scheme not in ("http", "https"):
        raise TaskFileError(f"{where}: start_url must be an http(s) URL or a path starting with '/', got {url!r}")
    return out


def load_tasks(path: str | Path) -> list[dict]:
    """Reads a JSONL task file (blank lines skipped), validating every line; task ids must be unique.

    Raises :class:`TaskFileError` (``train.jsonl:12: ...``) or ``FileNotFoundError``.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "t.jsonl")
        >>> _ = open(p, "w").write('{"task_id": "a", "instruction": "Price?", "start_url": "/shop/", '
        ...     '"difficulty": "easy", "reference_answer": "$1.00", "domain": "shop"}\\n')
        >>> [t["task_id"] for t in load_tasks(p)]
        ['a']
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"task file {path} does not exist (expected a JSONL file of tasks)")
    tasks: list[dict] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path.name}:{number}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskFileError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            task = validate_task(obj, where)
            if task["task_id"] in seen:
                raise TaskFileError(f"{where}: duplicate task_id {task['task_id']!r} (first on line "
                                    f"{seen[task['task_id']]})")
            seen[task["task_id"]] = number
            tasks.append(task)
    if not tasks:
        raise TaskFileError(f"{path.name}: no tasks in the file")
    return tasks


def resolve_url(start_url: str, base_url: str) -> str:
    """An absolute start URL: absolute URLs unchanged, paths joined to ``base_url``.

    Example:
        >>> resolve_url("/shop/category/kitchen", "http://127.0.0.1:8080")
        'http://127.0.0.1:8080/shop/category/kitchen'
        >>> resolve_url("https://example.org/a", "http://127.0.0.1:8080/")
        'https://example.org/a'
    """
    if urlsplit(start_url).scheme:
        return start_url
    if not base_url:
        raise ValueError(f"start_url {start_url!r} is a path but base_url is empty")
    return urljoin(base_url.rstrip("/") + "/", start_url.lstrip("/"))


def is_blocked(task: dict, blocked_domains: Iterable[str]) -> bool:
    """True if the task's ``domain``, or its start URL's host or a parent domain of it, is blocked.

    Example:
        >>> is_blocked({"domain": "shop", "start_url": "/shop/"}, ["shop"])
        True
        >>> is_blocked({"domain": "web", "start_url": "https://www.example.org/"}, ["example.org"])
        True
    """
    blocked = {d.strip().lower() for d in blocked_domains if d.strip()}
    if task["domain"].lower() in blocked:
        return True
    host = (urlsplit(task["start_url"]).hostname or "").lower()
    return any(host == d or host.endswith("." + d) for d in blocked) if host else False


def _draw(pool: Sequence[dict], count: int, rng: random.Random) -> list[dict]:
    """``count`` tasks from ``pool`` without replacement, cycling through shuffled copies if needed."""
    out: list[dict] = []
    while len(out) < count:
        take = min(count - len(out), len(pool))
        out.extend(rng.sample(list(pool), take))
    return out


def ratio_counts(size: int, ratios: dict[str, float]) -> dict[str, int]:
    """Exact per-difficulty counts summing to ``size`` (largest remainder; ties in easy/medium/hard order).

    Example:
        >>> ratio_counts(10, {"easy": 0.5, "medium": 0.3, "hard": 0.2})
        {'easy': 5, 'medium': 3, 'hard': 2}
        >>> ratio_counts(7, {"easy": 1, "medium": 1, "hard": 1})
        {'easy': 3, 'medium': 2, 'hard': 2}
    """
    unknown = sorted(set(ratios) - set(DIFFICULTIES))
    if unknown:
        raise TaskFileError(f"ratios: unknown difficulty {unknown[0]!r} (expected easy, medium, hard)")
    for key, value in ratios.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise TaskFileError(f"ratios.{key} must be a number >= 0, got {value!r}")
    total = float(sum(ratios.values()))
    if total <= 0:
        raise TaskFileError(f"ratios must have a positive sum, got {ratios!r}")
    exact = {d: size * ratios.get(d, 0) / total for d in DIFFICULTIES}
    counts = {d: math.floor(exact[d]) for d in DIFFICULTIES}
    left = size - sum(counts.values())
    order = sorted(DIFFICULTIES, key=lambda d: (-(exact[d] - counts[d]), DIFFICULTIES.index(d)))
    for d in order[:left]:
        counts[d] += 1
    return counts


def sample_tasks(tasks: Sequence[dict], split: str, *, size: int, sampler: str = "uniform",
                 seed: int | None = None, rng: random.Random | None = None,
                 ratios: dict[str, float] | None = None, blocked_domains: Iterable[str] = (),
                 repeat_times: int = 1) -> list[dict]:
    """The tasks of one rollout: copies of ``tasks`` with ``repeat`` set (see the module docstring).

    Pass exactly one of ``seed`` / ``rng``; the same seed gives the same sample.

    Example:
        >>> pool = [{"task_id": f"t{i}", "difficulty": "easy", "domain": "shop", "start_url": "/"} for i in range(5)]
        >>> [t["task_id"] for t in sample_tasks(pool, "train", size=3, seed=0)]
        ['t3', 't4', 't0']
        >>> [(t["task_id"], t["repeat"]) for t in sample_tasks(pool[:2], "test", size=-1, seed=0, repeat_times=2)]
        [('t0', 0), ('t1', 0), ('t0', 1), ('t1', 1)]
    """
    if split not in SPLITS:
        raise TaskFileError(f"split must be train or test, got {split!r}")
    if sampler not in SAMPLERS:
        raise TaskFileError(f"train_tasks_sampler must be uniform or ratio, got {sampler!r}")
    if (seed is None) == (rng is None):
        raise TaskFileError("sample_tasks: pass exactly one of seed= or rng=")
    if isinstance(size, bool) or not isinstance(size, int) or size < -1:
        raise TaskFileError(f"{split}_tasks_rollout_size must be -1 (all) or a whole number >= 0, got {size!r}")
    if isinstance(repeat_times, bool) or not isinstance(repeat_times, int) or repeat_times < 1:
        raise TaskFileError(f"test_tasks_repeat_times must be a whole number >= 1, got {repeat_times!r}")
    rng = rng if rng is not None else random.Random(seed)
    pool = [t for t in tasks if not is_blocked(t, blocked_domains)] if split == "train" else list(tasks)
    if size != 0 and not pool:
        raise TaskFileError(f"no {split} tasks to sample from ({len(tasks)} given, all in blocked domains)"
                            if tasks else f"no {split} tasks to sample from")
    want = len(pool) if size == -1 else size
    if sampler == "uniform":
        chosen = list(pool) if size == -1 else _draw(pool, want, rng)
    else:
        if ratios is None:
            raise TaskFileError("the ratio sampler needs ratios, e.g. {'easy': 0.5, 'medium': 0.3, 'hard': 0.2}")
        counts = ratio_counts(want, ratios)
        chosen = []
        for difficulty in DIFFICULTIES:
            group = [t for t in pool if t["difficulty"] == difficulty]
            if counts[difficulty] and not group:
                raise TaskFileError(f"ratio sampler: ratios.{difficulty} = {ratios.get(difficulty)} asks for "
                                    f"{counts[difficulty]} {difficulty} tasks, but the {split} pool has none")
            chosen.extend(_draw(group, counts[difficulty], rng))
        rng.shuffle(chosen)
    return [{**task, "repeat": r} for r in range(repeat_times) for task in chosen]
