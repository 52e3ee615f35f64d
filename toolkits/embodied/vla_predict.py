"""Check a VLA checkpoint before a long run: load it, show it one image and one instruction,
print the action chunk the original tools would produce.

OpenVLA / OpenVLA-OFT (``--model-type openvla|openvla_oft``): greedy = arg-max over the whole
vocabulary at every action position (``openvla``: token by token; ``openvla_oft``: one pass over
the placeholders), decoded and un-normalised with the folder's statistics exactly as the original
``predict_action`` (see :meth:`rlinf.models.embodied.openvla.OpenVLAPolicy.predict_action`).
Defaults follow OpenVLA: A = 7, K = 1.

π0 / π0.5 (``--model-type pi0|pi05``; openpi, RLinf or LeRobot folder, see
``docs/pi0_checkpoints.md``): ``--num-steps`` Euler steps from the initial noise of ``--seed``,
un-normalised with the statistics of ``--unnorm-key`` (the asset id); ``--image`` fills the first
camera slot, ``--wrist-image`` the second; ``--state`` is the raw robot state, as many values as the
checkpoint's state statistics hold (another length is refused naming both). The chunk has the
checkpoint's ``H`` actions (``--num-action-chunks K`` keeps the first K) of the statistics' width.

Usage:
    python -m toolkits.embodied.vla_predict --model-path DIR --image FILE.png --instruction "..." \\
        [--model-type openvla|openvla_oft|pi0|pi05] [--action-dim A] [--num-action-chunks K] \\
        [--unnorm-key KEY] [--lora-path DIR] [--state "v1,v2,..."] [--num-steps N] [--seed S] \\
        [--wrist-image FILE.png] [--tokenizer-path FILE.model] [--action-horizon H] [--no-discrete-state] \\
        [--dtype fp32|bf16] [--device cpu|cuda] [--json]

Output: one line per action of the chunk (``--json``: a list of K (π0: H) lists of A floats). A bad
folder, image, key, state or adapter exits 2 with one ``error:`` line.
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
                                description="Action chunk of an OpenVLA / OpenVLA-OFT / π0 / π0.5 checkpoint.")
    p.add_argument("--model-path", required=True, help="checkpoint folder (real OpenVLA format)")
    p.add_argument("--image", required=True, help="RGB image file (PNG / JPEG)")
    p.add_argument("--instruction", required=True, help='task, e.g. "put the carrot on the plate"')
    p.add_argument("--model-type", choices=["openvla", "openvla_oft", "pi0", "pi05"], default="openvla")
    p.add_argument("--action-dim", type=int, default=None, help="A (OpenVLA default 7; π0: must match the statistics)")
    p.add_argument("--num-action-chunks", type=int, default=None, help="K (OpenVLA default 1; π0: first K of H)")
    p.add_argument("--unnorm-key", default=None, help="statistics to un-normalise with (default: the only one; "
                   "π0: the asset id)")
    p.add_argument("--lora-path", default=None, help="a LoRA adapter folder (RLinf layout) applied on top")
    p.add_argument("--state", default=None, help='π0: raw robot state, e.g. "0.1,0.2,..." (commas or spaces)')
    p.add_argument("--num-steps", type=int, default=10, help="π0: Euler denoising steps")
    p.add_argument("--seed", type=int, default=0, help="π0: seed of the initial noise")
    p.add_argument("--wrist-image", default=None, help="π0: image of the second camera slot")
    p.add_argument("--tokenizer-path", default=None, help="π0: PaliGemma SentencePiece .model (default: in the folder)")
    p.add_argument("--action-horizon", type=int, default=None, help="π0: H when the folder has no config.json "
                   "(RLinf's π0.5 LIBERO: 10)")
    p.add_argument("--no-discrete-state", action="store_true", help="π0.5: π0's prompt without the state "
                   "(openpi's pi05_libero, RLinf's π0.5 configs: discrete_state_input false)")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--json", action="store_true", help="print a JSON list of K lists of A floats")
    return p


def _read_image(path: str, flag: str):
    import numpy as np

    try:
        from PIL import Image

        with Image.open(Path(path)) as im:
            return np.asarray(im.convert("RGB"))
    except (OSError, ValueError) as err:
        raise _Usage(f"{flag} {path}: cannot read ({err})") from None


def _load(load, folder_error: type[Exception], args: argparse.Namespace, options):
    """``load(model_path, options, dtype=...)`` with its errors as one-line usage errors."""
    import torch

    try:
        return load(args.model_path, options, dtype=torch.bfloat16 if args.dtype == "bf16" else torch.float32)
    except folder_error as err:
        raise _Usage(f"--model-path: {err}") from None
    except KeyError as err:
        raise _Usage(f"--unnorm-key: {err.args[0]}") from None


def predict(args: argparse.Namespace) -> list[list[float]]:
    """Loads the checkpoint and returns the chunk as ``K`` lists of ``A`` floats.

    Raises:
        _Usage: one-line reason for a bad folder, image, key, state or adapter.
    """
    if args.model_type in ("pi0", "pi05"):
        return predict_pi0(args)
    import torch

    from rlinf.models.embodied.openvla import CheckpointError, OpenVLAOptions, enable_lora, load_openvla

    args.action_dim = 7 if args.action_dim is None else args.action_dim
    args.num_action_chunks = 1 if args.num_action_chunks is None else args.num_action_chunks
    if args.action_dim < 1 or args.num_action_chunks < 1:
        raise _Usage("--action-dim and --num-action-chunks must be >= 1")
    image = _read_image(args.image, "--image")
    options = OpenVLAOptions(model_type=args.model_type, action_dim=args.action_dim,
                             num_action_chunks=args.num_action_chunks, unnorm_key=args.unnorm_key)
    policy = _load(load_openvla, CheckpointError, args, options)
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


def _parse_state(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [float(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise _Usage(f"--state {text!r}: expected numbers separated by commas or spaces") from None
    if not values:
        raise _Usage("--state is empty")
    return values


def predict_pi0(args: argparse.Namespace) -> list[list[float]]:
    """The π0 / π0.5 chunk: ``H`` (or the first ``K``) lists of ``A`` un-normalised floats.

    Raises:
        _Usage: one-line reason for a bad folder, image, key, state or option.
    """
    import torch

    from rlinf.models.embodied.pi0 import Pi0CheckpointError, Pi0Options, load_pi0

    if args.lora_path:
        raise _Usage("--lora-path is not supported for π0 / π0.5")
    if args.num_steps < 1:
        raise _Usage(f"--num-steps must be >= 1, got {args.num_steps}")
    if args.num_action_chunks is not None and args.num_action_chunks < 1:
        raise _Usage("--num-action-chunks must be >= 1")
    if args.action_horizon is not None and args.action_horizon < 1:
        raise _Usage(f"--action-horizon must be >= 1, got {args.action_horizon}")
    cameras = [torch.from_numpy(_read_image(args.image, "--image").copy()).unsqueeze(0)]
    if args.wrist_image:
        cameras.append(torch.from_numpy(_read_image(args.wrist_image, "--wrist-image").copy()).unsqueeze(0))
    state = _parse_state(args.state)
    options = Pi0Options(model_type=args.model_type, asset_id=args.unnorm_key, num_steps=args.num_steps,
                         tokenizer_path=args.tokenizer_path, action_horizon=args.action_horizon,
                         discrete_state_input=False if args.no_discrete_state else None)
    policy = _load(load_pi0, Pi0CheckpointError, args, options)
    if args.action_dim is not None and args.action_dim != policy.action_dim:
        raise _Usage(f"--action-dim {args.action_dim}: the checkpoint's actions have {policy.action_dim} values")
    horizon = policy.model.spec.action_horizon
    if args.num_action_chunks is not None and args.num_action_chunks > horizon:
        raise _Usage(f"--num-action-chunks {args.num_action_chunks}: the checkpoint predicts {horizon} actions")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    policy.to(device)
    try:
        actions = policy.predict_action(cameras, [args.instruction], None if state is None else [state],
                                        generator=torch.Generator().manual_seed(args.seed))
    except ValueError as err:
        raise _Usage(f"--state: {err}") from None
    chunk = actions[0, : args.num_action_chunks or horizon]
    return [[float(v) for v in row] for row in chunk.tolist()]


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
