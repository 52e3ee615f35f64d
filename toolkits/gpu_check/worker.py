"""The process one check runs in (started by :func:`toolkits.gpu_check.runner.run_one`)::

    python -m toolkits.gpu_check.worker --target MODULE:FUNCTION --context JSON --result FILE

Calls ``FUNCTION(Context(**JSON))`` and writes its outcome to ``FILE``; an exception becomes a
``fail`` outcome with the exception's line and the traceback's last frames, written the same way.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
import traceback
from pathlib import Path

from toolkits.gpu_check.report import STATUSES, clean, failure
from toolkits.gpu_check.runner import Context


def call(target: str, ctx: Context) -> dict:
    """Import ``module:function`` and run it on ``ctx``; any exception -> a ``fail`` outcome.

    >>> call("toolkits.gpu_check.report:no_such_function", Context("cpu", True, "/tmp", "/tmp"))["error"]
    "AttributeError: module 'toolkits.gpu_check.report' has no attribute 'no_such_function'"
    """
    start = time.monotonic()
    try:
        module, _, function = target.partition(":")
        result = getattr(importlib.import_module(module), function)(ctx)
        if not isinstance(result, dict) or result.get("status") not in STATUSES:
            raise TypeError(f"{target} returned {type(result).__name__}, not an outcome dict with a "
                            f"status in {STATUSES}")
        return result
    except Exception as exc:  # noqa: BLE001 - the harness reports it; the other checks go on
        frames = traceback.format_exc().strip().splitlines()[-12:]
        return failure(f"{type(exc).__name__}: {exc}".splitlines()[0], time.monotonic() - start,
                       traceback="\n".join(frames))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolkits.gpu_check.worker")
    parser.add_argument("--target", required=True, help="MODULE:FUNCTION")
    parser.add_argument("--context", required=True, help="the Context as JSON")
    parser.add_argument("--result", required=True, help="file the outcome is written to")
    args = parser.parse_args(argv)
    result = call(args.target, Context(**json.loads(args.context)))
    Path(args.result).write_text(json.dumps(clean(result), allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
