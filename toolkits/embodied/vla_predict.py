"""Check an OpenVLA / OpenVLA-OFT checkpoint before a long run: load it, show it one image and
one instruction, print the greedy action chunk the original tools would produce.

Greedy = arg-max over the whole vocabulary at every action position (``openvla``: token by
token; ``openvla_oft``: one pass over the placeholders), decoded and un-normalised with the
folder's statistics exactly as the original ``predict_action`` (see
:meth:`rlinf.models.embodied.openvla.OpenVLAPolicy.predict_action`). Defaults follow OpenVLA:
``--model-type openvla``, A = 7, K = 1.

Usage:
    python -m toolkits.embodied.vla_predict --model-path DIR --image FILE.png --instruction "..." \\
        [--model-type openvla|openvla_oft] [--action-dim A] [--num-action-chunks K] \\
        [--unnorm-key KEY] [--lora-path DIR] [--dtype fp32|bf16] [--device cpu|cuda] [--json]

Output: one line per action of the chunk (``--json``: a list of K lists of A floats). A bad
folder, image, key or adapter exits 2 with one ``error:`` line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


class _Usage(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m toolkits.embodied.vla_predict",
                                description="Greedy action chunk of an OpenVLA / OpenVLA-OFT checkpoint.")
    p.add_argument("--model-path", required=True, help="checkpoint folder (real OpenVLA format)")
    p.add_argument("--image", required=True, help="RGB image file (PNG / JPEG)")
    p.add_argument("--instruction", required=True, help='task, e.g. "put the carrot on the plate"')
    p.add_argument("--model-type", choices=["openvla", "openvla_oft"], default="openvla")
    p.add_argument("--action-dim", type=int, default=7)
    p.add_argument("--num-action-chunks", type=int, default=1)
    p.add_argument("--unnorm-key", default=None, help="statistics to un-normalise with (default: the only one)")
    p.add_argument("--lora-path", default=None, help="a LoRA adapter folder (RLinf layout) applied on top")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--json", action="store_true", help="print a JSON list of K lists of A floats")
    return p


def predict(args: argparse.Namespace) -> list[list[float]]:
    """Loads the checkpoint and returns the greedy chunk as ``K`` lists of ``A`` floats.

    Raises:
        _Usage: one-line reason for a bad folder, image, key or adapter.
    """
    import numpy as np
    import torch

    from rlinf.models.embodied.openvla import CheckpointError, OpenVLAOptions, enable_lora, load_openvla

    if args.action_dim < 1 or args.num_action_chunks < 1:
        raise _Usage("--action-dim and --num-action-chunks must be >= 1")
    image_path = Path(args.image)
    try:
        from PIL import Image

        with Image.open(image_path) as im:
            image = np.asarray(im.convert("RGB"))
    except (OSError, ValueError) as err:
        raise _Usage(f"--image {image_path}: cannot read ({err})") from None
    options = OpenVLAOptions(model_type=args.model_type, action_dim=args.action_dim,
                             num_action_chunks=args.num_action_chunks, unnorm_key=args.unnorm_key)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    try:
        policy = load_openvla(args.model_path, options, dtype=dtype)
    except CheckpointError as err:
        raise _Usage(f"--model-path: {err}") from None
    except KeyError as err:
        raise _Usage(f"--unnorm-key: {err.args[0]}") from None
    stats = policy.action_stats()
    if stats is not None and len(stats["q01"]) != args.action_dim:
        raise _Usage(f"--action-dim {args.action_dim}: the statistics {policy.unnorm_key!r} have "
                     f"{len(stats['q01'])} values")
    if args.lora_path:
        try:
            enable_lora(policy, lora_path=args.lora_path)
        except (OSError, ValueError) as err:
            raise _Usage(f"--lora-path: {err}") from None
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    policy.to(device).eval()
    actions = policy.predict_action(torch.from_numpy(image.copy()).unsqueeze(0), [args.instruction])
    return [[float(v) for v in row] for row in actions[0].cpu().tolist()]


def main(argv: list[str] | None = None) -> int:
    """CLI entry; returns the exit code (0, or 2 with one ``error:`` line on stderr)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed its usage line
        return int(exc.code or 0)
    try:
        chunk = predict(args)
    except _Usage as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(chunk))
    else:
        for i, row in enumerate(chunk):
            print(f"action {i}: " + " ".join(f"{v:+.6f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
