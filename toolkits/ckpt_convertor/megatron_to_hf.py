"""Convert a Megatron checkpoint (legacy ``torch`` layout) back into a Hugging Face folder.

    python -m toolkits.ckpt_convertor.megatron_to_hf --load-path DIR --save-path DIR \\
        [--hf-config-path DIR] [--verify]

The HF config comes from ``--hf-config-path`` (its tokenizer / generation files are copied too)
or from the checkpoint's ``rlinf_megatron_meta.json``; a checkpoint without that file (saved by
Megatron-LM training) needs ``--hf-config-path``, and its TP / PP layout is read from the files.
Writes ``config.json`` + ``model.safetensors`` with the vocabulary unpadded. ``--verify`` re-reads
the result and checks it converts to the same checkpoint, and compares logits where enough GPUs
are visible. Bad input -> one ``error:`` line on stderr, exit code 2, nothing written.
"""

from __future__ import annotations

import argparse
import sys
import time

from rlinf.engines.training.megatron import convert
from toolkits.ckpt_convertor.hf_to_megatron import add_output_options, verify_exit_code


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m toolkits.ckpt_convertor.megatron_to_hf", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--load-path", required=True,
                        help="megatron checkpoint folder (holds latest_checkpointed_iteration.txt)")
    parser.add_argument("--save-path", required=True, help="destination HF folder (created)")
    parser.add_argument("--hf-config-path", default=None,
                        help="HF folder whose config.json (and tokenizer files) to use")
    add_output_options(parser, "check the written folder against the checkpoint")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    try:
        state = convert.megatron_to_hf(args.load_path, args.save_path,
                                       hf_config_path=args.hf_config_path, overwrite=args.overwrite)
        layout = convert.checkpoint_layout(args.load_path, convert.read_hf_config(args.save_path))
    except convert.ConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.save_path}: {len(state)} tensors from tp={layout['tp']} "
          f"pp={layout['pp']} ({time.perf_counter() - start:.1f} s)")
    if args.verify:
        return verify_exit_code(args.save_path, args.load_path, layout["tp"] * layout["pp"],
                                args.verify_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
