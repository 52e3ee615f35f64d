"""Writes a tiny randomly initialised VLA checkpoint in a REAL on-disk format:

* ``--model-type openvla`` (default): an OpenVLA / OpenVLA-OFT folder (config.json with
  ``model_type: openvla``, bf16 safetensors shards + index, timm / Prismatic parameter names,
  dataset_statistics.json, a Llama-style tokenizer, OFT extras on request) that
  ``actor.model.model_path`` (``model_type: openvla`` or ``openvla_oft``) can load. Sizes:
  :mod:`rlinf.models.embodied.openvla.tiny`.
* ``--model-type pi0|pi05``: a π0 / π0.5 folder in the ``--layout`` of openpi, RLinf or LeRobot
  (openpi's parameter names, statistics for 7-dim actions and 8-dim states unless ``--action-dim`` /
  ``--state-dim`` say otherwise, under ``--asset-id``, a tiny PaliGemma-style
  SentencePiece tokenizer). Sizes: :mod:`rlinf.models.embodied.pi0.tiny`.

``toolkits.embodied.vla_predict`` loads either.

Example:
    python -m toolkits.embodied.make_tiny_vla --out /tmp/tiny_vla --image-size 64 --identity-stats
    python -m toolkits.embodied.make_tiny_vla --out /tmp/tiny_pi05 --model-type pi05 --layout lerobot
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _write_pi0(args: argparse.Namespace) -> Path:
    from rlinf.models.embodied.pi0.tiny import TINY_ASSET_ID, write_tiny_pi0

    asset_id = args.asset_id or TINY_ASSET_ID
    out = write_tiny_pi0(args.out, pi05=args.model_type == "pi05", layout=args.layout, seed=args.seed,
                         action_horizon=args.action_horizon, adarms_scale=0.0 if args.zero_adarms else 0.3,
                         image_size=args.image_size, patch=args.patch_size, asset_id=asset_id,
                         stats_dims=(args.action_dim, args.state_dim), value_after_vlm=args.value_after_vlm)
    where = "in the normaliser processors" if args.layout == "lerobot" else f"under asset id {asset_id!r}"
    print(f"wrote {out}: {args.model_type}, {args.layout} layout, {args.image_size}px, H={args.action_horizon}, "
          f"statistics for {args.action_dim}-dim actions and {args.state_dim}-dim states {where}")
    return out


def main(argv: list[str] | None = None) -> Path:
    """Parses the command line, writes the folder and prints a one-line summary.

    Args:
        argv: arguments (default: ``sys.argv[1:]``).

    Returns:
        The folder written.
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder to write (created; files overwritten)")
    p.add_argument("--model-type", choices=["openvla", "pi0", "pi05"], default="openvla")
    p.add_argument("--action-dim", type=int, default=7, help="length of the action statistics")
    p.add_argument("--state-dim", type=int, default=8, help="pi0 / pi05: length of the state statistics")
    p.add_argument("--asset-id", help="pi0 / pi05 (openpi / rlinf layouts): where the statistics go "
                   "(default tiny/robot)")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--patch-size", type=int, default=8)
    p.add_argument("--llm-width", type=int, default=64)
    p.add_argument("--llm-layers", type=int, default=2)
    p.add_argument("--single-tower", action="store_true", help="SigLIP only (siglip-vit-so400m) instead of "
                   "the fused DINOv2 + SigLIP backbone")
    p.add_argument("--proprio-dim", type=int, default=0, help="> 0 writes an OFT proprio projector")
    p.add_argument("--action-head", action="store_true", help="write an OFT L1 action head file (carried only)")
    p.add_argument("--identity-stats", action="store_true", help="q01 = -1, q99 = 1 (env actions in [-1, 1])")
    p.add_argument("--lora-out", help="also write a random LoRA adapter in RLinf's layout to this folder")
    p.add_argument("--layout", choices=["openpi", "rlinf", "lerobot"], default="openpi", help="pi0 / pi05 layout")
    p.add_argument("--action-horizon", type=int, default=4, help="pi0 / pi05: H, actions per chunk")
    p.add_argument("--zero-adarms", action="store_true", help="pi05: openpi's zero-initialised adaRMS layers")
    p.add_argument("--value-after-vlm", action="store_true",
                   help="pi0 / pi05, rlinf layout: the value head reads the VLM's width (actor.model.value_after_vlm)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.model_type != "openvla":
        return _write_pi0(args)

    from rlinf.models.embodied.openvla.tiny import write_tiny_lora, write_tiny_openvla

    out = write_tiny_openvla(args.out, seed=args.seed, image_size=args.image_size, patch=args.patch_size,
                             llm_width=args.llm_width, llm_layers=args.llm_layers, action_dim=args.action_dim,
                             identity_stats=args.identity_stats, fused=not args.single_tower,
                             proprio_dim=args.proprio_dim or None, action_head=args.action_head)
    print(f"wrote {out}: OpenVLA format, {args.image_size}px, statistics for {args.action_dim}-dim actions")
    if args.lora_out:
        print(f"wrote {write_tiny_lora(out, args.lora_out, seed=args.seed)}: LoRA adapter (RLinf layout)")
    return out


if __name__ == "__main__":
    main()
