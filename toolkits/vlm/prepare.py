"""Make what ``examples/vlm/config/vlm_grpo_tiny_cpu.yaml`` reads: a tiny random Qwen2.5-VL
(``<out>/base``, :mod:`toolkits.vlm.make_tiny_vlm`) and the seeded image task (``<out>/task``:
600 train, 60 validation, 120 held-out rows, :mod:`toolkits.vlm.make_vlm_task`). A ``READY``
stamp records the settings; a second call with the same settings returns at once.

Not yet: a warm start (a supervised pass that brings the model to 10-50 % held-out before RL,
as issue 47 asks); ``base`` is the random initialisation, so the config runs the whole VLM path
but does not show learning yet (docs/vlm.md).

Example:
    python -m toolkits.vlm.prepare --out results/tiny_vlm
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from toolkits.vlm.make_tiny_vlm import make_tiny_vlm
from toolkits.vlm.make_vlm_task import write_task

STAMP = "READY"
COUNTS = {"train": 600, "val": 60, "heldout": 120}


def prepare(out: str | Path, model_type: str = "qwen2_5_vl", seed: int = 0) -> Path:
    """Write ``<out>/base`` and ``<out>/task`` (see the module docstring); returns ``out``."""
    out = Path(out)
    settings = {"model_type": model_type, "seed": seed, "counts": COUNTS}
    stamp = out / STAMP
    if stamp.is_file() and json.loads(stamp.read_text()) == settings:
        return out
    for name in ("base", "task"):
        shutil.rmtree(out / name, ignore_errors=True)
    make_tiny_vlm(model_type, out / "base", seed=seed)
    write_task(out / "task", COUNTS, seed=seed)
    stamp.write_text(json.dumps(settings))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder to write base/ and task/ into")
    parser.add_argument("--model-type", default="qwen2_5_vl", choices=("qwen2_5_vl", "qwen3_vl"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = prepare(args.out, args.model_type, args.seed)
    print(f"wrote {out}/base (random tiny {args.model_type}) and {out}/task ({COUNTS})")


if __name__ == "__main__":
    main()
