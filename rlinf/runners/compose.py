"""The compose step of every Hydra entry, done before Hydra runs so that a bad config file or a bad
override is one ``config error:`` line (exit code 2) instead of Hydra's traceback.

The command line is read with Hydra's own argument parser and the config is looked up on the
search path Hydra itself builds for the entry file, so every Hydra flag means what Hydra documents:

* ``--config-name`` / ``-cn``: the primary config (default: the entry's);
* ``--config-path`` / ``-cp``: replaces the entry's config folder (absolute, or relative to the
  entry's Python file, as Hydra resolves it);
* ``--config-dir`` / ``-cd``: adds a folder to the search path (a user's own configs);
* ``--cfg job|hydra|all``, ``--help``, ``--hydra-help``, ``--info``, ``-m`` (multirun): checked
  the same way, then left to Hydra; ``--version`` and ``--shell-completion`` are not checked.

Example:
    >>> args = entry_args("examples/math/main_grpo.py", "grpo_tiny_cpu",
    ...                   ["-cd", "my_configs", "-cn", "my_grpo", "runner.max_steps=2"])
    >>> args.config_name, args.overrides, args.search_dirs[1].endswith("my_configs")
    ('my_grpo', ['runner.max_steps=2'], True)
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from dataclasses import dataclass, field

from rlinf.config.yaml_check import ConfigFileError, check_config_files

#: the repository root (the shared ``config/`` folder lives there)
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
#: the config folder every entry's ``@hydra.main`` names, relative to the entry file
ENTRY_CONFIG_PATH = "config"


@dataclass
class EntryArgs:
    """What an entry's command line asks Hydra for.

    Attributes:
        config_name: the primary config.
        config_path: the entry's config folder as Hydra resolves it (``-cp`` or ``config``).
        config_dir: the ``-cd`` folder (absolute) or None.
        overrides: the ``key=value`` overrides.
        search_dirs: folders to read YAML from, in Hydra's lookup order (the config folder,
            ``-cd``, then the shared ``config/``).
        check: False for ``--shell-completion``, which composes nothing to check.
        multirun: ``-m`` given (sweeps are composed in multirun mode).
    """

    config_name: str
    config_path: str
    config_dir: str | None
    overrides: list[str]
    search_dirs: list[str] = field(default_factory=list)
    check: bool = True
    multirun: bool = False


def entry_args(entry_file: str, default_name: str, argv: list[str]) -> EntryArgs | None:
    """Read ``argv`` with Hydra's parser; None when the parser exits (``--version``, or a
    command line it refuses: Hydra then prints its own answer)."""
    # lazy: Hydra / OmegaConf (~0.3 s) only when a config is composed; entries import this module before that
    from hydra._internal.utils import get_args_parser

    try:  # quietly: Hydra parses again and prints its own usage or version
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = get_args_parser().parse_args(argv)
    except SystemExit:
        return None
    base = os.path.dirname(os.path.realpath(entry_file))
    config_path = args.config_path if args.config_path is not None else ENTRY_CONFIG_PATH
    config_path = config_path if os.path.isabs(config_path) else os.path.normpath(os.path.join(base, config_path))
    config_dir = os.path.abspath(args.config_dir) if args.config_dir is not None else None
    dirs = [config_path] + ([config_dir] if config_dir else []) + [os.path.join(REPO_ROOT, "config")]
    return EntryArgs(config_name=args.config_name or default_name, config_path=config_path,
                     config_dir=config_dir, overrides=list(args.overrides), search_dirs=dirs,
                     check=not args.shell_completion, multirun=bool(args.multirun))


def precheck_config_files(entry_file: str, default_name: str, argv: list[str] | None = None) -> None:
    """Before Hydra starts: read the chosen config and the files its defaults pull in with a
    strict YAML loader (a tab, an unclosed bracket, a duplicate key: ``config error:
    <file>:<line>:<col>: ...``), then compose it with the overrides as Hydra will (a typo'd key
    without ``+``, a missing config group option, unparsable syntax, a config that is not
    found: one ``config error:`` line). Exits with code 2 on the first problem."""
    args = entry_args(entry_file, default_name, sys.argv[1:] if argv is None else argv)
    if args is None or not args.check:
        return
    primary = next((d for d in args.search_dirs if os.path.isfile(_yaml(d, args.config_name))), None)
    try:
        if primary is not None:
            check_config_files(primary, args.config_name, [d for d in args.search_dirs if d != primary])
    except ConfigFileError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    problem = compose_problem(entry_file, args)
    if problem:
        print(f"config error: {problem}", file=sys.stderr)
        sys.exit(2)


def _yaml(folder: str, name: str) -> str:
    return os.path.join(folder, name if name.endswith(".yaml") else f"{name}.yaml")


def compose_problem(entry_file: str, args: EntryArgs) -> str | None:
    """Compose ``args`` on Hydra's search path for ``entry_file`` (``-cp`` / ``-cd`` applied as
    Hydra applies them); None when that works, else Hydra's complaint in one line."""
    # lazy: Hydra / OmegaConf (~0.3 s) only when a config is composed; entries import this module before that
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_automatic_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    try:
        if args.config_dir is not None and not os.path.isdir(args.config_dir):
            return f"--config-dir: {args.config_dir!r} is not a folder"
        search_path = create_automatic_config_search_path(entry_file, None, args.config_path)
        if args.config_dir is not None:  # where Hydra puts it: before the structured configs
            search_path.prepend(provider="command-line", path=f"file://{args.config_dir}",
                                anchor=SearchPathQuery(provider="schema"))
        loader = ConfigLoaderImpl(config_search_path=search_path)
        loader.load_configuration(config_name=args.config_name, overrides=list(args.overrides),
                                  run_mode=RunMode.MULTIRUN if args.multirun else RunMode.RUN)
    except (HydraException, OmegaConfBaseException) as exc:
        lines = [line.strip() for line in str(exc).splitlines()
                 if line.strip() and not line.strip().startswith(("Set the environment variable HYDRA_FULL_ERROR",
                                                                  "See https://hydra.cc"))]
        text = " ".join(lines).split(" Config search path:")[0] or type(exc).__name__
        bad = _unparsable_override(args.overrides)
        return f"override {bad!r}: {text}" if bad else text
    return None


def _unparsable_override(overrides: list[str]) -> str | None:
    """The first override Hydra's grammar refuses, if any."""
    # lazy: Hydra / OmegaConf (~0.3 s) only when a config is composed; entries import this module before that
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except HydraException:
            return override
    return None
