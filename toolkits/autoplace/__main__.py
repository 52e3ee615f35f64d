"""``python -m toolkits.autoplace CONFIG --profile P.yaml``: rank every placement of a config's roles
by predicted step time (the package docstring says what each flag does).

Example (from the repository root; the profile is a hand-written illustration)::

    python -m toolkits.autoplace examples/math/config/grpo_tiny_disaggregated.yaml \
        --profile toolkits/autoplace/profiles/grpo_tiny_cpu.yaml --accelerators-per-node 3 --top 5 \
        --out /tmp/placed.yaml --png /tmp/timeline.png
    python examples/math/main_grpo.py --config-path /tmp --config-name placed   # the line it prints

Exit status: 0 with the table (or JSON) on stdout; 2 and one line ``error: ...`` on stderr for any
bad input (a config, profile or flag; a role placed but not profiled or the reverse; a role larger
than one accelerator; a cluster where nothing fits; a run kind the planner does not plan).
Nothing is started: no Ray, no worker, no model — unless ``--measure-steps K`` asks for a measuring
run first, which fails as the run would (a config error exit 2, a worker's failure exit 1, one line).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from rlinf.scheduler.autoplace import Profile
from rlinf.scheduler.placement.__main__ import CliError, _flag_int, _one_line, write_result
from rlinf.utils.typed_config import ConfigError
from toolkits.autoplace.inputs import LoadedRun, load_run, planning_profile, read_profile, resolve_cluster
from toolkits.autoplace.ranking import rank
from toolkits.autoplace.report import Context, as_json, table

__all__ = ["main", "run"]

DEFAULT_TOP = 10


class RunFailed(Exception):
    """The measuring run failed in a worker: one line, exit 1 (as the run's own entry)."""


class _Parser(argparse.ArgumentParser):
    """A usage error is one ``error:`` line (exit 2), like every other bad input."""

    def error(self, message: str):  # type: ignore[override]
        raise CliError(f"{message}; {_one_line(self.format_usage())}")


def _top(text: str) -> int:
    value = _flag_int(text)
    if not isinstance(value, int) or value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="python -m toolkits.autoplace",
                     description="Rank the placements of a config's roles by predicted step time.")
    parser.add_argument("config", metavar="CONFIG.yaml", help="the run's config (Hydra defaults are composed)")
    parser.add_argument("--profile", metavar="P.yaml", help="the roles' figures (docs/placement_planner.md)")
    parser.add_argument("--measure-steps", type=_top, metavar="K",
                        help="first run K training steps of the config as placed (no validation, no checkpoints) "
                             "and plan with the profile they measure, written to --profile P.yaml (default: "
                             "<runner.output_dir>/<runner.experiment_name>/autoplace_profile.yaml)")
    parser.add_argument("--measure-sizes", type=int, choices=(1, 2), default=2, metavar="{1,2}",
                        help="with --measure-steps: 2 (default) also runs K steps of the placement ranked fastest "
                             "among those that give the most roles another unit count, and fits each role's "
                             "fixed cost per unit and divisible work from both; 1: the config's placement only "
                             "(linear scaling assumed)")
    parser.add_argument("--nodes", type=_flag_int, metavar="N", help="nodes to plan for (wins over the profile's "
                        "and the config's)")
    parser.add_argument("--accelerators-per-node", type=_flag_int, metavar="M",
                        help="accelerators per node to plan for (wins over the profile's and the config's)")
    parser.add_argument("--top", type=_top, default=DEFAULT_TOP, metavar="K",
                        help=f"rows of the table (default {DEFAULT_TOP})")
    parser.add_argument("--json", action="store_true", help="print every candidate as JSON instead of the table")
    parser.add_argument("--out", metavar="placed.yaml", help="write the config with the best placement")
    parser.add_argument("--png", metavar="timeline.png",
                        help="draw the predicted step of the best and of the config's own placement")
    return parser.parse_args(argv)


def obtain_profile(args: argparse.Namespace, run: LoadedRun) -> tuple[str, Profile]:
    """``(where from, profile)``: the ``--profile`` file, or with ``--measure-steps K`` the profile
    K steps of the config measure (:func:`~rlinf.runners.autoplace_measure.measure_profile`; the
    run's own lines go to stderr). A run that fails fails as a run does: a config error is one
    line (exit 2), a worker that raised or died one line with the log's path (:class:`RunFailed`,
    exit 1)."""
    if args.measure_steps is not None:
        # lazy: the run layer (torch, the workers) only when measuring
        from rlinf.runners.autoplace_measure import measure_profile
        from rlinf.runners.autoplace_profile import PROFILE_FILE
        from rlinf.runners.entry import one_line, write_error_log
        from rlinf.scheduler.errors import SchedulerError
        from toolkits.autoplace.sizes import measure_two_sizes

        runner = run.cfg.runner
        out = args.profile or os.path.join(runner.output_dir, runner.experiment_name, PROFILE_FILE)
        say = lambda *a: print(*a, file=sys.stderr)  # noqa: E731 - the runs' own lines go to stderr
        try:
            if args.measure_sizes == 2:
                measure_two_sizes(run, run.raw, args.measure_steps, out, print_fn=say)
            else:
                measure_profile(run.recipe, run.raw, args.measure_steps, out, config=run.path, print_fn=say)
        except SchedulerError as exc:
            raise RunFailed(f"{one_line(exc)} (details: {write_error_log(run.raw, exc)})") from None
        except ValueError as exc:
            raise CliError(str(exc)) from None
        return out, read_profile(out)
    if args.profile is None:
        raise CliError("--profile P.yaml is required: the roles' seconds per sample and memory "
                       "(docs/placement_planner.md gives the form)")
    return args.profile, read_profile(args.profile)


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse an output that cannot be written before searching (nothing half-done)."""
    for flag, path, ext in (("--out", args.out, ".yaml"), ("--png", args.png, ".png")):
        if path is None:
            continue
        if not path.endswith(ext):
            raise CliError(f"{flag} {path}: the file must end in {ext}")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise CliError(f"{flag} {path}: folder {folder} does not exist")
    if args.out and os.path.exists(args.out) and os.path.samefile(args.out, args.config):
        raise CliError(f"--out {args.out}: that is the config itself; write the placed config to another file")


def run(argv: Sequence[str] | None = None) -> str:
    """Parse ``argv``, search, write what was asked; the text to print. CliError / ConfigError
    (ProfileError, PlacementError) on bad input."""
    args = parse_args(argv)
    _check_outputs(args)
    loaded = load_run(args.config)
    source, profile = obtain_profile(args, loaded)
    profile, samples_from = planning_profile(profile, loaded.workflow)
    cluster = resolve_cluster(loaded, profile, args.nodes, args.accelerators_per_node)
    search = rank(loaded, profile, cluster.shape)
    ctx = Context(loaded, source, profile, samples_from, cluster)
    best = search.ranked[0]
    notes = []
    if args.out:
        # lazy: the writer reads the file back through Hydra; only for --out
        from toolkits.autoplace.write import run_command, write_placed

        speed = search.speedup(best)
        comment = (f"Written by python -m toolkits.autoplace {loaded.path} --profile {source}\n"
                   f"best placement: {best.candidate.label()}, predicted {best.prediction.step_s:.3g} s per step"
                   + (f" ({speed:.2f}x the config's own)" if speed is not None else ""))
        write_placed(args.out, loaded, best.candidate, cluster, comment)
        notes.append(f"wrote {args.out} ({best.candidate.label()}); run it: {run_command(loaded, args.out)}")
    if args.png:
        # lazy: matplotlib only for --png
        from toolkits.autoplace.timeline import draw_timelines

        panels = [(f"best: {best.candidate.label()}", best.prediction)]
        cur = search.current
        if cur is not None and cur.prediction is not None:
            panels.append((f"config's own: {cur.candidate.label()}", cur.prediction))
        try:
            draw_timelines(panels, args.png, loaded.workflow.roles())
        except OSError as exc:
            raise CliError(f"--png {args.png}: cannot write: {exc.strerror or exc}") from None
        notes.append(f"wrote {args.png} ({len(panels)} timeline(s))")
    if args.json:
        return json.dumps({**as_json(ctx, search), "out": args.out, "png": args.png}, indent=2)
    return "\n".join([table(ctx, search, args.top), *notes])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; the exit status (0 ok, 2 bad input)."""
    try:
        text = run(argv)
    except RunFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (CliError, ConfigError) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the CLI promises one line, never a traceback
        print(f"error: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 2
    return write_result(text)


if __name__ == "__main__":
    sys.exit(main())
