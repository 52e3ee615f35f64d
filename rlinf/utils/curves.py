"""Plot a run's learning curves (from its metric records) into one PNG.

Example:
    >>> import tempfile, os
    >>> records = [{"step": s, "reward/mean": s / 10, "val/accuracy": s / 20} for s in range(1, 6)]
    >>> out = os.path.join(tempfile.mkdtemp(), "curves.png")
    >>> plot_curves(records, out, keys=("reward/mean", "val/accuracy"))
    ['reward/mean', 'val/accuracy']
    >>> os.path.getsize(out) > 0
    True
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_KEYS = ("reward/mean", "reward/accuracy", "val/accuracy", "response/length_mean")


def plot_curves(records: Sequence[dict], path: str, keys: Sequence[str] = DEFAULT_KEYS) -> list[str]:
    """One panel per key that appears in ``records`` (x = ``step``); returns the keys drawn."""
    # lazy: matplotlib (~1-2 s) only when a plot is drawn
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib (~1-2 s) only when a plot is drawn
    import matplotlib.pyplot as plt

    drawn = [k for k in keys if any(k in r for r in records)]
    if not drawn:
        return []
    fig, axes = plt.subplots(1, len(drawn), figsize=(4 * len(drawn), 3.2), squeeze=False)
    for ax, key in zip(axes[0], drawn):
        points = [(r["step"], r[key]) for r in records if key in r]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o" if len(points) < 30 else None)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn
