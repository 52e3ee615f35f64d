"""Writes a tiny randomly initialised π0 / π0.5 checkpoint in one of the REAL layouts (openpi's
PyTorch folder, RLinf's, LeRobot 0.6's) with openpi's parameter names, statistics for 7-dim
actions and 8-dim states under ``tiny/robot``, and a tiny PaliGemma-style SentencePiece tokenizer,
that ``toolkits.embodied.vla_predict --model-type pi0|pi05`` (and the π0 loader) can load.
Sizes: :mod:`rlinf.models.embodied.pi0.tiny`.

Example:
    python -m toolkits.embodied.make_tiny_pi0 --out /tmp/tiny_pi05 --pi05 --layout lerobot
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main(argv: list[str] | None = None) -> Path:
    """Parses the command line, writes the folder and prints a one-line summary.

    Args:
        argv: arguments (default: ``sys.argv[1:]``).

    Returns:
        The folder written.
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder to write (created; files overwritten)")
    p.add_argument("--pi05", action="store_true", help="π0.5 (adaRMS expert) instead of π0")
    p.add_argument("--layout", choices=["openpi", "rlinf", "lerobot"], default="openpi")
    p.add_argument("--action-horizon", type=int, default=4, help="H, actions per chunk")
    p.add_argument("--image-size", type=int, default=16)
    p.add_argument("--patch-size", type=int, default=4)
    p.add_argument("--zero-adarms", action="store_true", help="π0.5: openpi's zero-initialised adaRMS layers")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    from rlinf.models.embodied.pi0.tiny import TINY_ASSET_ID, write_tiny_pi0

    out = write_tiny_pi0(args.out, pi05=args.pi05, layout=args.layout, seed=args.seed,
                         action_horizon=args.action_horizon, adarms_scale=0.0 if args.zero_adarms else 0.3,
                         image_size=args.image_size, patch=args.patch_size)
    kind = "π0.5" if args.pi05 else "π0"
    where = "in the normaliser processors" if args.layout == "lerobot" else f"under asset id {TINY_ASSET_ID!r}"
    print(f"wrote {out}: {kind}, {args.layout} layout, {args.image_size}px, H={args.action_horizon}, "
          f"statistics for 7-dim actions {where}")
    return out


if __name__ == "__main__":
    main()
