"""Writes a tiny randomly initialised OpenVLA-OFT-style VLA folder (weights, config with norm
stats, instruction tokenizer) that ``actor.model.model_path`` can point at.

The folder loads offline with ``OpenVLAOFTPolicy.from_pretrained(dir)`` (or ``AutoModel`` once
``rlinf.models.embodied.openvla_oft`` is imported). Sizes: see
:mod:`rlinf.models.embodied.openvla_oft.tiny` (945,409 parameters at the defaults).

Example:
    python -m toolkits.embodied.make_tiny_vla --out /tmp/tiny_vla --action-dim 7 --chunks 8 --image-size 64
"""

from __future__ import annotations

import argparse
import json
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
    p.add_argument("--action-dim", type=int, default=7)
    p.add_argument("--chunks", type=int, default=8, help="actions per chunk (num_action_chunks)")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--patch-size", type=int, default=8)
    p.add_argument("--lm", choices=["llama", "qwen2"], default="llama")
    p.add_argument("--hidden-size", type=int, default=128, help="LM width")
    p.add_argument("--layers", type=int, default=2, help="LM depth")
    p.add_argument("--num-images", type=int, choices=[1, 2], default=1, help="2 = main + wrist camera")
    p.add_argument("--proprio-dim", type=int, default=0, help="> 0 adds a proprio token of this size")
    p.add_argument("--dino", action="store_true", help="add a DINOv2 tower fused with SigLIP")
    p.add_argument("--bidirectional", action="store_true", help="action queries attend to each other")
    p.add_argument("--value-type", choices=["chunk_level", "action_level"], default="chunk_level")
    p.add_argument("--norm-stats", help="JSON file {unnorm_key: {action: {q01, q99, mask}}}; default: identity")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    from rlinf.models.embodied.openvla_oft.tiny import build_tiny_vla

    norm_stats = json.loads(Path(args.norm_stats).read_text()) if args.norm_stats else None
    policy = build_tiny_vla(
        seed=args.seed, action_dim=args.action_dim, num_action_chunks=args.chunks, image_size=args.image_size,
        patch_size=args.patch_size, lm=args.lm, hidden_size=args.hidden_size, num_layers=args.layers,
        num_images_in_input=args.num_images, use_proprio=args.proprio_dim > 0,
        proprio_dim=args.proprio_dim or 8, use_dino=args.dino,
        action_attention="bidirectional" if args.bidirectional else "causal", value_type=args.value_type,
        norm_stats=norm_stats)
    out = Path(args.out)
    policy.save_pretrained(out)
    n = sum(t.numel() for t in policy.parameters())
    print(f"wrote {out}: {n:,} parameters, K={args.chunks} A={args.action_dim}, {args.image_size}px, "
          f"unnorm keys {sorted(policy.config.norm_stats)}")
    return out


if __name__ == "__main__":
    main()
