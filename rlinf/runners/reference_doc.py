"""Render the config reference (``docs/config_reference.md``, ``docs/config_reference_web.md``)
from the recipes' root configs: each recipe says which root config is its own
(``Recipe.config_cls``), on which page its keys go (``reference_page``), in which order
(``reference_order``) and how a section of its own under a heading already shown is headed
(``reference_suffix``); :func:`rlinf.config.reference_doc.assemble` renders the page. A new
recipe's keys appear with it; nothing here names one.

Usage::

    python -m rlinf.runners.reference_doc --out docs/config_reference.md --web-out docs/config_reference_web.md
    python -m rlinf.runners.reference_doc --check docs/config_reference.md   # exit 1 if stale

Example:
    >>> [name for name, _ in page_roots("web")]
    ['WebAgentConfig']
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlinf.config.reference_doc import PAGES, assemble
from rlinf.runners.registry import all_recipes

__all__ = ["document", "document_web", "main", "page_roots"]


def _roots(page: str) -> list[tuple[type, str]]:
    recipes = sorted((r for r in all_recipes() if r.reference_page == page), key=lambda r: r.reference_order)
    return [(r.config_cls, r.reference_suffix) for r in recipes]


def page_roots(page: str) -> list[tuple[str, str]]:
    """``(root config class name, suffix)`` of every recipe on ``page`` (``main`` / ``web``), in
    the order the page shows them."""
    return [(cls.__name__, suffix) for cls, suffix in _roots(page)]


def document(page: str = "main") -> str:
    """The full text of ``page``'s reference file (``main``: docs/config_reference.md: the first
    recipe's every section, then those the later recipes add)."""
    _, title, intro = PAGES[page]
    return assemble(_roots(page), title, intro)


def document_web() -> str:
    """The full text of ``docs/config_reference_web.md`` (the web-agent run's own root)."""
    return document("web")


def main(argv: list[str] | None = None) -> int:
    """The CLI (see the module docstring); 0, or 1 when ``--check`` finds the file stale."""
    parser = argparse.ArgumentParser(
        prog="python -m rlinf.runners.reference_doc",
        description="Render the config reference from the recipes' root configs.")
    parser.add_argument("--out", metavar="PATH", help="write the reference to PATH")
    parser.add_argument("--check", metavar="PATH", help="exit 1 if PATH differs from the rendered reference")
    parser.add_argument("--web-out", metavar="PATH", help="write the web-agent reference to PATH")
    args = parser.parse_args(argv)
    text = document()
    if args.web_out:
        Path(args.web_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.web_out).write_text(document_web(), encoding="utf-8")
        print(f"wrote {args.web_out}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    if args.check:
        path = Path(args.check)
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current != text:
            state = "is missing" if current is None else "is out of date"
            print(f"{args.check} {state}; regenerate it with "
                  f"python -m rlinf.runners.reference_doc --out {args.check}", file=sys.stderr)
            return 1
        print(f"{args.check} is up to date")
    if not (args.out or args.check or args.web_out):
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
