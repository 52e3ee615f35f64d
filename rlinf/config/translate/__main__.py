"""``python -m rlinf.config.translate --from areal|roll FILE.yaml [--out OUT.yaml] [--explain] [--check]``

Writes the rlinf math config translated from an AReaL or ROLL YAML file (to ``--out``, else to
stdout). ``--explain`` prints, on stderr, every leaf key of the input with what it became or why it
was not translated. ``--check`` parses the result as the math recipe does before Ray
(:class:`~rlinf.config.math.MathConfig`; model and data paths too when they all exist here) and
writes nothing when it fails. Exit codes: 0 done, 2 unreadable input or a refused translation
(one ``error:`` line).

Example:
    >>> main(["--from", "roll", "/no/such/file.yaml"])  # stderr: error: /no/such/file.yaml: cannot read it ...
    2
"""

from __future__ import annotations

import argparse
import os
import sys

from rlinf.config.translate.areal import translate_areal
from rlinf.config.translate.common import SourceError, check_result, load_source, result_tree, to_yaml
from rlinf.config.translate.roll import translate_roll
from rlinf.utils.typed_config import ConfigError

KINDS = {"areal": "AReaL", "roll": "ROLL"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rlinf.config.translate",
                                description="Translate an AReaL or ROLL config into an rlinf math config.")
    p.add_argument("--from", dest="kind", required=True, choices=sorted(KINDS), help="the source framework")
    p.add_argument("file", help="the source YAML file")
    p.add_argument("--out", help="write the rlinf YAML here (default: stdout)")
    p.add_argument("--explain", action="store_true", help="print what every source key became (stderr)")
    p.add_argument("--check", action="store_true", help="parse the result with the math recipe's checks")
    return p


def translate(kind: str, path: str):
    """The :class:`~rlinf.config.translate.common.Translation` of ``path`` (raises SourceError)."""
    raw = load_source(path, KINDS[kind])
    return (translate_areal if kind == "areal" else translate_roll)(raw)


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    args = parser().parse_args(argv)
    try:
        t = translate(args.kind, args.file)
    except SourceError as exc:
        print(f"error: {args.file}: {exc}", file=sys.stderr)
        return 2
    tree = result_tree(t, os.path.splitext(os.path.basename(args.file))[0])
    if args.explain:
        print(t.explain(), file=sys.stderr)
    if args.check:
        try:
            checked = check_result(tree)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        paths = "model and data paths checked" if checked else "model / data paths not all on this machine: not checked"
        print(f"check: ok, parses as the math recipe's config ({paths})", file=sys.stderr)
    text = to_yaml(tree, args.file, KINDS[args.kind])
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
