"""What the AReaL and ROLL translators share: the record of what every source key became (or why
it did not), the ``--explain`` table, placement strings, the output YAML and the ``--check`` parse.

A :class:`Translation` holds the source tree (interpolations resolved) and the rlinf tree being
built. Each source key is either *translated* (``set``: our dotted key = value, possibly several),
*covered* (its value is already carried by another key) or *not translated* (``skip`` with a
reason that starts ``no counterpart:`` or ``different meaning:``). A record on a mapping covers every
leaf under it; a leaf nobody recorded is listed as having no counterpart.

Example:
    >>> t = Translation({"optimizer": {"lr": 1e-5, "type": "sgd"}, "launcher": {"cpus": 4}})
    >>> t.set("optimizer.lr", "actor.optim.lr", 1e-5)
    >>> t.skip("optimizer.type", DIFF + "rlinf's optimizer is AdamW")
    >>> t.skip("launcher", NO + "Ray places the processes")
    >>> t.out
    {'actor': {'optim': {'lr': 1e-05}}}
    >>> print(t.explain())
    source key      result
    --------------  ---------------------------------------------
    optimizer.lr    actor.optim.lr = 1e-05
    optimizer.type  different meaning: rlinf's optimizer is AdamW
    launcher.cpus   no counterpart: Ray places the processes
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlinf.config.resolvers import register_resolvers
from rlinf.utils.typed_config import ConfigError

#: reason prefixes of keys that are not translated
NO = "no counterpart: "
DIFF = "different meaning: "
_MISSING = object()

#: the order of the sections in the written YAML
SECTION_ORDER = ("defaults", "hydra", "cluster", "runner", "algorithm", "rollout", "data", "actor", "reward",
                 "critic", "inference")


class SourceError(Exception):
    """The input file cannot be translated as a whole (not readable, not YAML, not the chosen kind);
    the CLI prints ``error: FILE: <message>``."""


@dataclass
class Translation:
    """The source tree, the rlinf tree being built and what became of each source key."""

    source: dict[str, Any]
    out: dict[str, Any] = field(default_factory=dict)
    results: dict[str, list[str]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def get(self, key: str, default: Any = None) -> Any:
        """The source value at dotted ``key`` (``default`` when absent)."""
        node: Any = self.source
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def has(self, key: str) -> bool:
        """Whether the source has dotted ``key`` (even with a null value)."""
        return self.get(key, _MISSING) is not _MISSING

    def set(self, src: str, key: str, value: Any, how: str = "") -> None:
        """Record that source key ``src`` became ``key = value`` and write it to the output."""
        self.put(key, value)
        self.results.setdefault(src, []).append(f"{key} = {show(value)}{f' ({how})' if how else ''}")

    def put(self, key: str, value: Any) -> None:
        """Write ``key = value`` to the output without a source key (say why in :attr:`notes`)."""
        node = self.out
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    def value(self, key: str, default: Any = None) -> Any:
        """The output value at dotted ``key`` (``default`` when not set)."""
        node: Any = self.out
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def covered(self, src: str, text: str) -> None:
        """Record that ``src`` needs no key of its own (``text`` says where its value went)."""
        self.results.setdefault(src, []).append(text)

    def skip(self, src: str, reason: str) -> None:
        """Record that ``src`` is not translated (``reason`` starts with :data:`NO` or :data:`DIFF`)."""
        self.reasons[src] = reason

    def apply(self, simple: dict[str, tuple[str, Any]], refused: dict[str, str], nullable: set[str]) -> None:
        """The one-to-one table ``simple`` (source key -> (our key, conversion or None)) for source
        keys nobody recorded yet (a null keeps our default unless our key is in ``nullable``), then
        the ``refused`` reasons for what is still unrecorded."""
        for src, (ours, conv) in simple.items():
            if self.has(src) and not self.done(src):
                value = self.get(src)
                if value is None and ours not in nullable:
                    self.covered(src, f"null: {ours} keeps rlinf's default")
                else:
                    self.set(src, ours, conv(value) if conv and value is not None else value)
        for src, reason in refused.items():
            if self.has(src) and not self.done(src):
                self.skip(src, reason)

    def done(self, src: str) -> bool:
        """Whether ``src`` (or a mapping above it) has a record."""
        return self._record(src) is not None

    def _record(self, key: str) -> str | None:
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            prefix = ".".join(parts[:n])
            if prefix in self.results:
                return "; ".join(self.results[prefix])
            if prefix in self.reasons:
                return self.reasons[prefix]
        return None

    def rows(self) -> list[tuple[str, str]]:
        """One (source key, result) row per leaf of the source, in file order."""
        return [(key, self._record(key) or NO + "rlinf has no setting for it")
                for key, _ in flatten(self.source)]

    def explain(self) -> str:
        """The ``--explain`` table (plus the notes, when there are any)."""
        rows = [("source key", "result")] + self.rows()
        width = max(len(k) for k, _ in rows)
        rule = ("-" * width, "-" * max(len(r) for _, r in rows))
        lines = [f"{k:<{width}}  {r}".rstrip() for k, r in [rows[0], rule, *rows[1:]]]
        if self.notes:
            lines += ["", "notes:"] + [f"- {n}" for n in self.notes]
        return "\n".join(lines)


def flatten(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """The leaves of a nested mapping as (dotted key, value); lists and empty mappings are leaves.

    >>> flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}})
    [('a.b', 1), ('a.c', [1, 2]), ('d', {})]
    """
    if not isinstance(tree, dict) or (not tree and prefix):
        return [(prefix, tree)]
    leaves = []
    for key, value in tree.items():
        leaves += flatten(value, f"{prefix}.{key}" if prefix else str(key))
    return leaves


def show(value: Any) -> str:
    """A value as the explain table writes it (YAML-like: null, true, lists in brackets).

    >>> show(None), show(True), show(["a", 1]), show(2e-05)
    ('null', 'true', '[a, 1]', '2e-05')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return str(value)


def load_source(path: str, kind: str) -> dict[str, Any]:
    """Read ``path`` as a YAML mapping with its ``${...}`` interpolations resolved.

    Raises:
        SourceError: missing or unreadable file, not YAML, not a mapping, or an interpolation
            that does not resolve.
    """
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except OSError as exc:
        raise SourceError(f"cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise SourceError(f"not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(raw, dict):
        raise SourceError(f"expected a YAML mapping (an {kind} config), got {type(raw).__name__}")
    try:
        return OmegaConf.to_container(OmegaConf.create(raw), resolve=True)
    except OmegaConfBaseException as exc:
        raise SourceError(f"an interpolation does not resolve: {str(exc).splitlines()[0]}") from None


def gpu_ranges(gpus: list[int]) -> str:
    """Accelerator ranks as a placement list (``0-3,6``).

    >>> gpu_ranges([0, 1, 2, 3, 6]), gpu_ranges([5])
    ('0-3,6', '5')
    """
    parts, start = [], 0
    for i in range(1, len(gpus) + 1):
        if i == len(gpus) or gpus[i] != gpus[i - 1] + 1:
            lo, hi = gpus[start], gpus[i - 1]
            parts.append(str(lo) if lo == hi else f"{lo}-{hi}")
            start = i
    return ",".join(parts)


def placement_value(gpus: list[int], per_process: int, total: int) -> str:
    """The placement string of a component on ``gpus`` with ``per_process`` accelerators per
    process (``total``: accelerators of the cluster, for ``all``).

    >>> placement_value(list(range(8)), 1, 8), placement_value([4, 5, 6, 7], 2, 8)
    ('all', '4-7:0-1')
    >>> placement_value([0, 1, 4, 5], 2, 8)
    '0-1:0,4-5:1'
    """
    if per_process == 1:
        return "all" if gpus == list(range(total)) else gpu_ranges(gpus)
    if len(gpus) % per_process:
        raise ValueError(f"{len(gpus)} accelerators do not split into processes of {per_process}")
    procs = len(gpus) // per_process
    if gpus == list(range(gpus[0], gpus[0] + len(gpus))):
        return f"{gpu_ranges(gpus)}:{gpu_ranges(list(range(procs)))}"
    parts = []
    for i in range(procs):
        chunk = gpus[i * per_process:(i + 1) * per_process]
        if chunk != list(range(chunk[0], chunk[0] + per_process)):
            raise ValueError(f"accelerators {gpu_ranges(chunk)} of one process are not consecutive")
        parts.append(f"{gpu_ranges(chunk)}:{i}")
    return ",".join(parts)


def cluster_section(groups: dict[str, tuple[list[int], int]], per_node: int) -> dict[str, Any]:
    """``cluster:`` for components -> (accelerator ranks, accelerators per process); components
    with the same placement share one comma-joined key.

    >>> cluster_section({"rollout": ([0, 1, 2, 3], 1), "reward": ([0, 1, 2, 3], 1),
    ...                  "actor": ([4, 5, 6, 7], 1)}, 8)
    {'num_nodes': 1, 'accelerators_per_node': 8, 'component_placement': {'rollout,reward': '0-3', 'actor': '4-7'}}
    """
    used = max(g for gpus, _ in groups.values() for g in gpus) + 1
    nodes = -(-used // per_node)
    placement: dict[str, list[str]] = {}
    for name, (gpus, per_process) in groups.items():
        placement.setdefault(placement_value(sorted(gpus), per_process, nodes * per_node), []).append(name)
    return {"num_nodes": nodes, "accelerators_per_node": per_node,
            "component_placement": {",".join(names): value for value, names in placement.items()}}


def base_config() -> dict[str, Any]:
    """What every translated math config carries besides the translated keys: Hydra's run folder
    and logging, the task type and the logger layout of the shipped configs."""
    return {
        "defaults": [{"override hydra/job_logging": "stdout"}, "_self_"],
        "hydra": {"run": {"dir": "."}, "output_subdir": None},
        "runner": {"task_type": "math",
                   "logger": {"log_path": "${runner.output_dir}/${runner.experiment_name}",
                              "project_name": "rlinf", "experiment_name": "${runner.experiment_name}",
                              "logger_backends": ["tensorboard"]}},
        "data": {"type": "math"},
    }


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` laid over ``base`` (nested mappings merged, other values replaced).

    >>> merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}, "d": 4})
    {'a': {'b': 1, 'c': 3}, 'd': 4}
    """
    result = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


def result_tree(t: Translation, name: str = "translated") -> dict[str, Any]:
    """The whole output config: :func:`base_config` + the translated keys, sections in order
    (``name``: the run name when the source has none)."""
    tree = merge(merge(base_config(), {"runner": {"experiment_name": name, "output_dir": "results"}}), t.out)
    return {k: tree[k] for k in sorted(tree, key=lambda k: (SECTION_ORDER + (k,)).index(k))}


def to_yaml(tree: dict[str, Any], source_path: str, kind: str) -> str:
    """The output YAML with its header comment."""
    header = (f"# Translated from {source_path} ({kind} config) by\n"
              f"# `python -m rlinf.config.translate --from {kind.lower()}`. Keys the source does not set take\n"
              f"# rlinf's defaults; `--explain` lists every source key: what it became, or why it was not\n"
              f"# translated.\n")
    return header + yaml.safe_dump(tree, sort_keys=False, default_flow_style=False, width=100)


def model_and_data_paths(tree: dict[str, Any]) -> list[str]:
    """The model folders and data files a translated config names."""
    paths = [tree.get(s, {}).get("model", {}).get("model_path") for s in ("actor", "rollout", "critic")]
    data = tree.get("data", {})
    paths += list(data.get("train_data_paths") or []) + list(data.get("val_data_paths") or [])
    return [p for p in paths if p]


def check_result(tree: dict[str, Any]) -> bool:
    """Parse the output as the math recipe does before Ray (:class:`~rlinf.config.math.MathConfig`,
    interpolations resolved with rlinf's resolvers). Model and data paths are checked when every
    one of them exists on this machine; returns whether they were.

    Raises:
        ConfigError: the first key the math config refuses.
    """
    # lazy: MathConfig pulls torch (~3 s); only --check parses with it
    from rlinf.config.math import MathConfig

    register_resolvers()
    try:
        resolved = OmegaConf.to_container(OmegaConf.create(tree), resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(str(getattr(exc, "full_key", "") or "config"), str(exc).splitlines()[0]) from None
    paths = model_and_data_paths(resolved)
    on_disk = bool(paths) and all(os.path.exists(p) for p in paths)
    MathConfig.from_dict(resolved, check_paths=on_disk)
    return on_disk
