"""``--out placed.yaml``: the config with the best candidate's settings, self-contained.

The file is the composed config (a ``defaults:`` list's files merged in, interpolations kept as
the files write them) with the candidate's ``cluster.component_placement`` and knobs (lookahead,
pipeline stages), and the cluster size it was planned for when that is not the config's own. Of
Hydra's settings it keeps where a run writes (``hydra.run.dir``, ``hydra.output_subdir``) and the
job logging. It is written next to its target, read back the way the CLI read the original
(composed, parsed, its placement checked as a run checks it before Ray), and only then moved onto
the target: a file that would not validate never replaces anything.

Run it with the entry of the original config, e.g.::

    python examples/math/main_grpo.py --config-path "$PWD" --config-name placed
"""

from __future__ import annotations

import copy
import glob
import os
import tempfile

import yaml

from rlinf.scheduler.autoplace import Candidate
from rlinf.scheduler.placement.__main__ import CliError
from rlinf.scheduler.placement.shape import parse_cluster_shape
from rlinf.utils.typed_config import ConfigError
from toolkits.autoplace.inputs import Cluster, LoadedRun, load_run
from toolkits.autoplace.ranking import set_dotted

__all__ = ["placed_config", "run_command", "write_placed"]


def placed_config(run: LoadedRun, cand: Candidate, cluster: Cluster, comment: str = "") -> str:
    """The YAML text of ``run``'s config with ``cand``'s settings (see the module docstring)."""
    tree = copy.deepcopy(run.written)
    for key, value in cand.settings(run.workflow).items():
        set_dotted(tree, key, value)
    if cluster.nodes_from not in ("config", "default"):
        set_dotted(tree, "cluster.num_nodes", cluster.shape.num_nodes)
    if cluster.accelerators_from not in ("config", "default"):
        set_dotted(tree, "cluster.accelerators_per_node", cluster.shape.accelerators_per_node)
    doc = {**run.hydra, **tree}
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)


def _validate(path: str, source: LoadedRun) -> None:
    """Read ``path`` back as the CLI reads a config and check its placement as a run does."""
    back = load_run(path, workflow=source.workflow)
    shape = parse_cluster_shape(back.raw["cluster"])
    back.cfg.check_against_plan(back.cfg.cluster.plan(shape))


def write_placed(path: str, run: LoadedRun, cand: Candidate, cluster: Cluster, comment: str = "") -> None:
    """Write :func:`placed_config` to ``path`` once it validates (see the module docstring);
    CliError (one line) when it cannot be written or does not validate."""
    if not path.endswith(".yaml"):
        raise CliError(f"--out {path}: the file must end in .yaml (the entries find configs by that name)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CliError(f"--out {path}: folder {folder} does not exist")
    text = placed_config(run, cand, cluster, comment)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".autoplace-", suffix=".yaml", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise CliError(f"--out {path}: cannot write: {exc.strerror or exc}") from None
    try:
        _validate(tmp, run)
        os.replace(tmp, path)
    except (ConfigError, CliError) as exc:
        raise CliError(f"--out {path}: the written config does not validate, nothing written: {exc}") from None
    except OSError as exc:
        raise CliError(f"--out {path}: cannot write: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def run_command(run: LoadedRun, path: str) -> str:
    """The command that runs the written config: the original config's entry (the ``main*.py``
    beside its ``config/`` folder) with ``--config-path`` / ``--config-name`` of ``path``."""
    config_dir = os.path.dirname(os.path.abspath(run.path))
    entries = sorted(glob.glob(os.path.join(os.path.dirname(config_dir), "main*.py")))
    entry = os.path.relpath(entries[0]) if len(entries) == 1 else "<the config's entry>.py"
    out = os.path.abspath(path)
    return f"python {entry} --config-path {os.path.dirname(out)} --config-name {os.path.basename(out)[:-5]}"
