"""``--png timeline.png``: the predicted timeline of one steady step (``Prediction.events``) of the
best placement above that of the config's own, on one time axis, one row per role (work, tool
waits) plus the phase switches, the driver and the weight sync.

Example:
    >>> import os, tempfile
    >>> from rlinf.scheduler.autoplace import Prediction
    >>> best = Prediction(3.0, {"rollout": 0.67, "actor": 0.33}, "rollout",
    ...                   (("rollout", "work", 0.0, 2.0), ("actor", "work", 1.0, 2.5), ("sync", "sync", 2.5, 3.0)))
    >>> out = os.path.join(tempfile.mkdtemp(), "t.png")
    >>> draw_timelines([("best: rollout: 0, actor: 1", best)], out)
    >>> os.path.getsize(out) > 0
    True
"""

from __future__ import annotations

from collections.abc import Sequence

from rlinf.scheduler.autoplace import Prediction

__all__ = ["draw_timelines"]

#: colour per event kind
COLOURS = {"work": "tab:blue", "wait": "tab:gray", "switch": "tab:red", "sync": "tab:green", "driver": "tab:purple"}


#: rows after the roles'
OTHER_ROWS = ("switch", "driver", "sync")


def _rows(panels: Sequence[tuple[str, Prediction]], roles: Sequence[str]) -> list[str]:
    seen = {role for _, pred in panels for role, *_ in pred.events}
    rows = [r for r in roles if r in seen] + [r for r in OTHER_ROWS if r in seen]
    return rows + sorted(seen - set(rows))


def draw_timelines(panels: Sequence[tuple[str, Prediction]], path: str, roles: Sequence[str] = ()) -> None:
    """One panel per ``(title, prediction)``, top to bottom, sharing the time axis, one row per
    role (``roles`` first, in that order: the step's), saved as PNG."""
    # lazy: matplotlib (~1-2 s) only when a timeline is drawn
    import matplotlib

    matplotlib.use("Agg")
    # lazy: matplotlib (~1-2 s) only when a timeline is drawn
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = _rows(panels, roles)
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.0 + 0.45 * len(rows) * len(panels)), sharex=True,
                             squeeze=False)
    kinds: dict[str, None] = {}
    for ax, (title, pred) in zip(axes[:, 0], panels):
        for role, kind, start, end in pred.events:
            y = rows.index(role)
            ax.broken_barh([(start, max(end - start, 1e-9))], (y - 0.4, 0.8), facecolors=COLOURS.get(kind, "black"),
                           edgecolor="white", linewidth=0.5)
            kinds[kind] = None
        ax.axvline(pred.step_s, color="black", linestyle="--", linewidth=1)
        ax.set_yticks(range(len(rows)), rows)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.invert_yaxis()
        ax.set_title(f"{title}: {pred.step_s:.3g} s per step (bottleneck {pred.bottleneck})", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("seconds from the start of a steady step (dashed: the next step starts)")
    fig.legend(handles=[Patch(color=COLOURS.get(k, "black"), label=k) for k in kinds], loc="upper right",
               fontsize=8, ncol=len(kinds))
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=100)
    plt.close(fig)
