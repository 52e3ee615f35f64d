"""Writes a tiny randomly initialised OpenVLA / OpenVLA-OFT checkpoint in the REAL on-disk
format (config.json with ``model_type: openvla``, bf16 safetensors shards + index, timm /
Prismatic parameter names, dataset_statistics.json, a Llama-style tokenizer, OFT extras on
request) that ``actor.model.model_path`` (``model_type: openvla`` or ``openvla_oft``) and
``toolkits.embodied.vla_predict`` can load. Sizes: :mod:`rlinf.models.embodied.openvla.tiny`.

Example:
    python -m toolkits.embodied.make_tiny_vla --out /tmp/tiny_vla --image-size 64 --identity-stats
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
    p.add_argument("--action-dim", type=int, default=7, help="length of the action statistics")
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
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

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
