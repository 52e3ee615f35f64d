"""Show where every component of a config would run, without starting anything.

Usage::

    python -m rlinf.scheduler.placement CONFIG.yaml [--nodes N] [--accelerators-per-node M] [--json]
                                                    [--memory [--device-memory-gib G | --cpu]]

Prints a grid of nodes x accelerators (or, with ``--json``, the plan as JSON) and exits 0. Any
invalid input prints one line ``error: ...`` to stderr and exits 2.

``--memory`` adds each role's memory per rank and every device's peak (docs/memory.md). The
estimate needs the run's configs and model shapes, which this layer does not read: it comes from
the module :data:`rlinf.scheduler.memory.ESTIMATOR_MODULES` names (imported only for ``--memory``);
the sums per device, the capacity check and the text are this layer's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence

import yaml

from rlinf.scheduler.memory import GIB, Capacity, file_estimator, node_ram_bytes, render_memory
from rlinf.scheduler.placement.builder import config_key, plan_placement
from rlinf.scheduler.placement.grammar import PlacementError
from rlinf.scheduler.placement.render import plan_to_json, render_grid
from rlinf.scheduler.placement.shape import parse_cluster_shape

_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"
#: The only ints the CLI reads: plain decimal (no ``+``, leading zero, ``_``, ``0x``, ``0b``, base 60).
_DECIMAL = re.compile(r"^-?(?:0|[1-9][0-9]*)$")


class CliError(Exception):
    """An invalid input of the CLI; its message is the one line printed after ``error:``."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _child_key(path: str, key: object) -> str:
    return config_key(path, key).removeprefix(".")


class _Loader(yaml.SafeLoader):
    """YAML 1.1 safe loader that reads only plain decimal ints and rejects duplicate keys.

    ``1:0`` stays the string ``'1:0'`` (not base-60 ``60``), and ``0x3``, ``010``, ``1_000`` stay
    strings (not 3, 8, 1000), so errors name what the user wrote. A key given twice in one mapping
    raises :class:`CliError` instead of keeping the last value.
    """

    def construct_document(self, node: yaml.Node) -> object:
        self._check_unique_keys(node, "", set())
        return super().construct_document(node)

    def _check_unique_keys(self, node: yaml.Node, path: str, seen: set[int]) -> None:
        if id(node) in seen:  # an alias: already checked (and maybe recursive)
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._check_unique_keys(item, f"{path}[{i}]", seen)
        if not isinstance(node, yaml.MappingNode):
            return
        lines: dict[object, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                self._check_unique_keys(value_node, path, seen)
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in lines:
                where = path or f"top level of {self.name}"
                at = f"twice on line {line}" if line == lines[key] else f"on lines {lines[key]} and {line}"
                raise CliError(f"{where}: key {key!r} is given {at}; "
                               "give each key once (YAML would silently keep the last)")
            lines[key] = line
            self._check_unique_keys(value_node, _child_key(path, key), seen)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _INT_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_INT_TAG, _DECIMAL, list("-0123456789"))


class _Parser(argparse.ArgumentParser):
    """Usage errors are one ``error:`` line (exit 2) like every other invalid input."""

    def error(self, message: str):  # type: ignore[override]
        raise CliError(f"{message}; {_one_line(self.format_usage())}")


def _flag_int(text: str) -> int | str:
    """A decimal flag value as an int; anything else as given, for the shape check to name."""
    return int(text) if _DECIMAL.match(text) else text


def _reject_interpolation(value: object, key: str) -> None:
    if isinstance(value, str) and "${" in value:
        raise CliError(
            f"{key}: interpolation {value!r} is not supported by this CLI; write the value literally"
        )
    if isinstance(value, Mapping):
        for k, v in value.items():
            _reject_interpolation(k, key)
            _reject_interpolation(v, f"{key}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _reject_interpolation(v, f"{key}[{i}]")


def load_yaml(path: str) -> object:
    """The YAML document at ``path`` read with the strict loader (plain decimal ints only, a key
    given twice refused); CliError, one line naming the file, when it cannot be read or parsed.
    ``python -m toolkits.autoplace`` reads its profiles with it too."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.load(f, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CliError(f"cannot read {path}: not UTF-8 text ({exc.reason})") from None
    except yaml.YAMLError as exc:
        raise CliError(f"{path}: invalid YAML: {_one_line(exc)}") from None


def load_cluster(path: str) -> Mapping:
    """The ``cluster:`` mapping of the YAML file at ``path``; CliError when there is none."""
    doc = load_yaml(path)
    if not isinstance(doc, Mapping) or "cluster" not in doc:
        raise CliError(f"{path}: no top-level 'cluster:' mapping")
    cluster = doc["cluster"]
    if not isinstance(cluster, Mapping):
        raise CliError(f"{path}: 'cluster' is {type(cluster).__name__}, expected a mapping")
    if "component_placement" not in cluster:
        raise CliError(f"{path}: 'cluster' has no 'component_placement'")
    return cluster


def run(argv: Sequence[str] | None = None) -> str:
    """Parse ``argv``, plan the config and return the text to print; CliError/PlacementError on bad input."""
    parser = _Parser(
        prog="python -m rlinf.scheduler.placement",
        description="Show where every component of a config runs (node x accelerator grid).",
    )
    parser.add_argument("config", metavar="CONFIG.yaml", help="YAML file with a top-level cluster: mapping")
    parser.add_argument("--nodes", type=_flag_int, metavar="N",
                        help="number of nodes (overrides cluster.num_nodes)")
    parser.add_argument("--accelerators-per-node", type=_flag_int, metavar="M",
                        help="accelerators per node (overrides cluster.accelerators_per_node; default 8, "
                             "a planning assumption: at run time the count comes from the cluster)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--memory", action="store_true",
                        help="add each role's memory per rank and every device's peak (reads the whole config)")
    parser.add_argument("--device-memory-gib", type=float, metavar="G",
                        help="with --memory: memory of one accelerator (default cluster.accelerator_memory_gib; "
                             "unknown = no check)")
    parser.add_argument("--cpu", action="store_true", help="with --memory: plan a CPU run against this node's RAM")
    args = parser.parse_args(argv)
    estimate_on = None
    if args.memory:  # the whole config is read (Hydra-composed where it has defaults)
        cluster, estimate_on = file_estimator()(args.config)
    else:
        cluster = load_cluster(args.config)
    checked = {"component_placement", "node_groups"}
    if args.nodes is None:
        checked.add("num_nodes")
    if args.accelerators_per_node is None:
        checked.add("accelerators_per_node")
    for name in sorted(checked):
        _reject_interpolation(cluster.get(name), f"cluster.{name}")
    shape = parse_cluster_shape(
        cluster, num_nodes=args.nodes, accelerators_per_node=args.accelerators_per_node,
        override_names={"num_nodes": "--nodes", "accelerators_per_node": "--accelerators-per-node"},
    )
    plan = plan_placement(cluster["component_placement"], shape)
    if args.json:
        return json.dumps(plan_to_json(plan), indent=2)
    if estimate_on is not None:
        return render_grid(plan) + "\n\n" + _memory_text(args, cluster, plan, estimate_on)
    return render_grid(plan)


def _memory_text(args, cluster: Mapping, plan, estimate_on) -> str:
    """``--memory``: the estimator's figures for the config, summed on ``plan``."""
    gib = args.device_memory_gib if args.device_memory_gib is not None else cluster.get("accelerator_memory_gib")
    if gib is not None and (not isinstance(gib, (int, float)) or gib <= 0):
        raise CliError(f"--device-memory-gib / cluster.accelerator_memory_gib: expected a number > 0, got {gib!r}")
    if args.cpu:
        capacity = Capacity(None, node_ram_bytes(), "CPU run: this node's RAM", kind="cpu")
    elif gib is not None:
        capacity = Capacity(int(gib * GIB), node_ram_bytes(), f"{gib:g} GiB per accelerator")
    else:
        capacity = Capacity(None, node_ram_bytes(), "GPU memory unknown: pass --device-memory-gib to check")
    return render_memory(plan, estimate_on(plan, capacity), capacity)


def write_result(text: str) -> int:
    """Print a CLI's result (a closed pipe, as ``| head``, is not an error); exit status 0."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 invalid input)."""
    try:
        text = run(argv)
    except (CliError, PlacementError) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the CLI promises one line, never a traceback
        print(f"error: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 2
    return write_result(text)


if __name__ == "__main__":
    sys.exit(main())
