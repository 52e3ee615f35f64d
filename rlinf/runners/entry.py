"""What the Hydra entry points share: run the job, turn a config error into one line and exit
code 2, print the first / last evaluation figure."""

from __future__ import annotations

import sys
from typing import Any, Callable

from rlinf.utils.typed_config import ConfigError


def run_entry(run: Callable[[Any], dict[str, float]], cfg: Any, metric: str, label: str) -> dict[str, float]:
    """Call ``run(cfg)``; print ``label: first X% -> last Y% (+Z points)`` from the summary's
    ``val/first_<metric>`` / ``val/last_<metric>``; a :class:`ConfigError` exits with code 2."""
    try:
        summary = run(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    first, last = summary.get(f"val/first_{metric}"), summary.get(f"val/last_{metric}")
    if first is not None:
        print(f"[rlinf] {label}: first validation {100 * first:.1f}% -> last validation "
              f"{100 * last:.1f}% ({100 * (last - first):+.1f} points)")
    print(f"[rlinf] done: {int(summary['steps'])} steps")
    return summary
