"""``python -m toolkits.gpu_check``: run the GPU checks, write ``<out>/gpu_check.json``.

Usually started by ``scripts/gpu_check.sh`` (which first installs the carried wheels). Exit code
0 = the summary is ok, 1 = a check failed (or, on a GPU run, was skipped), 2 = bad arguments.

    python -m toolkits.gpu_check --out gpu_check_out                # on the GPU machine
    python -m toolkits.gpu_check --out /tmp/dry --cpu-dry-run       # the plumbing, on a CPU
    python -m toolkits.gpu_check --only fsdp_bf16,mfu --budget-s 300
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
import tempfile
import time
from pathlib import Path

from toolkits.gpu_check import CHECKS, CheckSpec
from toolkits.gpu_check.report import SCHEMA, environment, failure, summary, write
from toolkits.gpu_check.runner import Context, parse_extra, run_all

JSON_NAME = "gpu_check.json"
DEFAULT_BUDGET_S = 540.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m toolkits.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="gpu_check_out", help="folder for gpu_check.json and logs/")
    parser.add_argument("--cpu-dry-run", action="store_true",
                        help="run every check's plumbing on the CPU with tiny sizes")
    parser.add_argument("--only", default=None, help="comma-separated check names to run")
    parser.add_argument("--check", action="append", default=[], metavar="NAME=MODULE:FUNCTION[@SECONDS]",
                        help="add a check of your own (repeatable)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help="overall seconds for all checks (default %(default)s)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="peak bf16 dense TFLOPS for MFU (default: by GPU name; dry run: 1.0)")
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a new temp folder)")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the scratch folder")
    parser.add_argument("--wheels-site", default=None, help="folder the script installed the wheels into")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random models and batches")
    return parser.parse_args(argv)


def select(only: str | None, extra: list[str]) -> list[CheckSpec]:
    """The built-in checks (or those named in ``only``) plus the ``--check`` ones.

    >>> [s.name for s in select("mfu,fsdp_bf16", [])]
    ['fsdp_bf16', 'mfu']
    """
    specs = list(CHECKS)
    if only:
        wanted = [n.strip() for n in only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - {s.name for s in specs})
        if unknown:
            raise ValueError(f"--only: unknown check {unknown[0]!r}; known: {', '.join(s.name for s in specs)}")
        specs = [s for s in specs if s.name in wanted]
    added = [parse_extra(text) for text in extra]
    names = [s.name for s in specs + added]
    if len(set(names)) != len(names):
        raise ValueError(f"--check: a check name is used twice in {names}")
    return specs + added


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        specs = select(args.only, args.check)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import torch

    device = "cpu" if args.cpu_dry_run else "cuda"
    out = Path(args.out)
    workdir = args.workdir or tempfile.mkdtemp(prefix="rlinf-gpu-check-")
    ctx = Context(device=device, dry_run=args.cpu_dry_run, workdir=workdir, out_dir=str(out),
                  peak_tflops=args.peak_tflops, seed=args.seed)
    started, t0 = datetime.datetime.now(datetime.UTC), time.monotonic()
    print(f"gpu_check: {len(specs)} checks on {device}{' (dry run)' if ctx.dry_run else ''}, "
          f"budget {args.budget_s:.0f} s, out {out}")
    try:
        if device == "cuda" and not torch.cuda.is_available():
            error = ("no CUDA device visible (torch.cuda.is_available() is False); on a CPU machine "
                     "run with --cpu-dry-run")
            print(f"error: {error}", file=sys.stderr)
            checks = {s.name: failure(error, 0.0) for s in specs}
        else:
            checks = run_all(specs, ctx, args.budget_s)
    finally:
        if not args.keep_workdir and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    document = {
        "schema": SCHEMA, "dry_run": ctx.dry_run, "device": device, "started": started.isoformat(),
        "seconds": round(time.monotonic() - t0, 2), "budget_s": args.budget_s,
        "environment": environment(device, args.wheels_site), "checks": checks,
        "summary": summary(checks, ctx.dry_run),
    }
    write(out / JSON_NAME, document)
    s = document["summary"]
    print(f"wrote {out / JSON_NAME}: {len(s['passed'])} passed, {len(s['failed'])} failed, "
          f"{len(s['skipped'])} skipped ({document['seconds']:.0f} s)")
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
