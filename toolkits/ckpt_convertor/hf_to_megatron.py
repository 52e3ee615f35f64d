"""Convert a Hugging Face checkpoint (Qwen2 / Qwen2.5, Llama, Qwen3) into a Megatron checkpoint.

    python -m toolkits.ckpt_convertor.hf_to_megatron --hf-path DIR --save-path DIR \\
        --tp-size 2 --pp-size 2 [--layers-per-stage 3,2] [--process-num 2] [--verify]

Writes Megatron-LM's legacy ``torch`` layout (``release/mp_rank_*/model_optim_rng.pt``) plus
``rlinf_megatron_meta.json``. Bad input -> one ``error:`` line on stderr, exit code 2, nothing
written. ``--verify`` checks the round trip back to HF bit for bit and, where ``tp * pp`` GPUs
are visible, megatron-core's logits against HF's (max abs diff <= 1e-4); exit code 1 if a check
fails. See docs/checkpoint_converter.md.
"""

from __future__ import annotations

import argparse
import sys
import time

from rlinf.engines.training.megatron import convert, logit_check

LOGIT_TOLERANCE = 1e-4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m toolkits.ckpt_convertor.hf_to_megatron", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--hf-path", required=True, help="HF folder: config.json + weights")
    parser.add_argument("--save-path", required=True, help="destination folder (created)")
    parser.add_argument("--tp-size", type=int, default=1, help="tensor-parallel size")
    parser.add_argument("--pp-size", type=int, default=1, help="pipeline-parallel size")
    parser.add_argument("--layers-per-stage", default=None,
                        help="comma-separated decoder layers per pipeline stage, e.g. 3,2 "
                             "(default: as even as possible, earlier stages take the extra)")
    parser.add_argument("--model-type", default=None,
                        help="qwen2, qwen2.5, llama or qwen3; checked against config.json")
    parser.add_argument("--make-vocab-size-divisible-by", type=int, default=128,
                        help="pad the vocabulary to a multiple of this times tp (0: no padding)")
    parser.add_argument("--process-num", type=int, default=1,
                        help="worker processes, each converting a share of the pipeline stages")
    parser.add_argument("--ckpt-format", default="torch", choices=["torch", "torch_dist"],
                        help="output format (only torch, the legacy layout, is implemented)")
    add_output_options(parser, "check the round trip (always) and the logits (with enough GPUs)")
    return parser.parse_args(argv)


def add_output_options(parser: argparse.ArgumentParser, verify_help: str) -> None:
    """--overwrite, --verify and --verify-timeout, shared by both converters."""
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty save path")
    parser.add_argument("--verify", action="store_true", help=verify_help)
    parser.add_argument("--verify-timeout", type=float, default=600.0,
                        help="seconds before the logit check's worker processes are killed")


def _stage_counts(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise convert.ConversionError(f"--layers-per-stage {text!r} is not a list of integers") from None


def verify(hf_path: str, megatron_path: str, world: int, timeout_s: float) -> bool:
    """Round trip, then logits where megatron-core's forward can run; prints one line each."""
    import torch

    count = convert.verify_round_trip(hf_path, megatron_path)
    print(f"verify: round trip HF -> Megatron -> HF bit-identical ({count} tensors)")
    gpus = torch.cuda.device_count()
    if gpus < world:
        print(f"verify: logit check skipped: megatron-core's GPTModel forward needs CUDA and "
              f"tp*pp = {world} GPUs ({gpus} visible); only the round-trip check ran")
        return True
    [diff] = logit_check.logit_check([logit_check.LogitCase(hf_path, megatron_path)], device="cuda",
                                     timeout_s=timeout_s)
    ok = diff <= LOGIT_TOLERANCE
    print(f"verify: logits max abs diff {diff:.3g} ({'ok' if ok else 'FAILED'}, "
          f"tolerance {LOGIT_TOLERANCE:g})")
    return ok


def verify_exit_code(hf_path: str, megatron_path: str, world: int, timeout_s: float) -> int:
    """:func:`verify` as a CLI exit code: 0 = passed, 1 = a check failed (message on stderr)."""
    try:
        return 0 if verify(hf_path, megatron_path, world, timeout_s) else 1
    except (convert.ConversionError, RuntimeError) as error:
        print(f"error: verify failed for {megatron_path}: {error}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    try:
        meta = convert.hf_to_megatron(
            args.hf_path, args.save_path, args.tp_size, args.pp_size,
            layers_per_stage=_stage_counts(args.layers_per_stage),
            make_vocab_size_divisible_by=args.make_vocab_size_divisible_by,
            process_num=args.process_num, model_type=args.model_type,
            ckpt_format=args.ckpt_format, overwrite=args.overwrite,
        )
    except convert.ConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.save_path}: {meta['family']} tp={meta['tp']} pp={meta['pp']} "
          f"layers/stage={meta['layers_per_stage']} vocab {meta['vocab_size']} -> "
          f"{meta['padded_vocab_size']} ({time.perf_counter() - start:.1f} s)")
    if args.verify:
        return verify_exit_code(args.hf_path, args.save_path, args.tp_size * args.pp_size,
                                args.verify_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
