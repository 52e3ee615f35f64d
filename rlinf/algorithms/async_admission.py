"""Admission and selection of GRPO groups for fully asynchronous training, with the staleness
bound held per group.

A *group* is the ``group_size`` samples of one prompt; B = ``groups_per_step`` groups make one
training step; k = ``max_offpolicyness`` (``algorithm.max_head_offpolicyness``). The policy
version v is the number of actor updates whose weights the rollout holds; training step s
(0-based) trains with the actor at version s, and the rollout gets version s + 1 after it. A
group started under version v may train at steps v .. v + k: its *deadline* is v + k, and its
staleness at step s is s - v.

Rules (pure bookkeeping: no threads, no clocks, no torch):

- **Admission.** A group may start under rollout version v only while
  ``started_total < (v + k + 1) * B`` and ``in_flight < max_groups_in_flight``. With s steps
  taken, at most (v + k + 1 - s) * B started groups are left unconsumed, so no group starts
  while the trainer is more than k versions ahead of the weights it would use.
- **Selection** at step s: the B *finished* groups with the earliest deadlines (ties: finish
  order), accepted only if what stays behind remains feasible: for every d >= s,
  ``#(unconsumed groups, finished or running, with deadline <= d) <= (d - s) * B``. Otherwise
  :meth:`AsyncLedger.take` returns None and the trainer waits for more groups to finish.
  Earliest-deadline-first removes, for every d at once, the most groups with deadline <= d, so
  when it is refused every other choice of B finished groups is refused too.
- **Why it holds.** Invariant before step s: for every d >= s - 1, #(unconsumed with deadline
  <= d) <= (d - s + 1) * B. Admission keeps it (a group started under v <= s adds to the
  counts only for d >= v + k, where the admitted total fits), an accepted take keeps it by its
  check, and a restart only moves a deadline later. The invariant at d = s - 1 says no
  unconsumed group has a deadline before s, so every consumed group has staleness <= k; and
  once every unconsumed group has finished, the earliest-deadline choice always passes the
  check, so the trainer never waits on anything but running groups (no deadlock).
- **Recovery.** :meth:`AsyncLedger.restart` starts an unconsumed group again (its worker died,
  or its finished samples were not in the checkpoint) under a version >= its old one; it
  keeps its place in ``started_total`` and moves its deadline later.
  :meth:`AsyncLedger.state_dict` / :meth:`AsyncLedger.load_state_dict` carry everything, so a
  resumed run neither re-admits nor loses a group.

Example (B = 1, k = 2; the worked case of ``tests/algorithms/test_async_admission.py``):

>>> ledger = AsyncLedger(groups_per_step=1, max_offpolicyness=2, max_groups_in_flight=8)
>>> for gid in "ABC":
...     ledger.start(gid, version=0)
>>> ledger.can_start(0)  # started_total 3 = (0 + 2 + 1) * 1
False
>>> ledger.finish("C")
>>> ledger.take(0)  # A and B (deadline 2) still fit in steps 1 and 2
['C']
>>> ledger.start("D", version=1)  # deadline 3
>>> ledger.finish("D")
>>> ledger.take(1) is None  # taking D would leave A and B both for step 2
True
>>> ledger.finish("A")
>>> ledger.take(1)
['A']
>>> staleness_metrics(1, [0], [1])
{'rollout/staleness': 1.0, 'rollout/staleness_max': 1.0, 'rollout/version_spread': 1.0}
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

RUNNING = "running"
FINISHED = "finished"
_STATE_VERSION = 1


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class AsyncLedger:
    """Which groups may start, and which finished groups a training step takes (see the module
    docstring for the rules and why they bound staleness without deadlock).

    Args:
        groups_per_step: B, groups per training step (``data.rollout_batch_size``), >= 1.
        max_offpolicyness: k, the staleness bound (``algorithm.max_head_offpolicyness``), >= 0.
        max_groups_in_flight: Groups generating at once (started, not finished), >= 1.

    Raises:
        ValueError: An argument out of range, naming it.

    >>> ledger = AsyncLedger(groups_per_step=2, max_offpolicyness=0, max_groups_in_flight=4)
    >>> ledger.start("g0", 0); ledger.start("g1", 0)
    >>> ledger.can_start(0), ledger.in_flight, ledger.started_total  # (0 + 0 + 1) * 2 started
    (False, 2, 2)
    >>> ledger.finish("g1"); ledger.finish("g0")
    >>> ledger.take(0)  # same deadline: finish order
    ['g1', 'g0']
    """

    def __init__(self, groups_per_step: int, max_offpolicyness: int, max_groups_in_flight: int):
        self._b = _check_int("groups_per_step", groups_per_step, 1)
        self._k = _check_int("max_offpolicyness", max_offpolicyness, 0)
        self._max_in_flight = _check_int("max_groups_in_flight", max_groups_in_flight, 1)
        self._started_total = 0
        self._steps_taken = 0
        self._finish_seq = 0
        # unconsumed groups: id -> [version_start, status, finish order or None]
        self._groups: dict[Hashable, list] = {}
        self._consumed: set[Hashable] = set()

    # ------------------------------------------------------------------ read-only state

    @property
    def groups_per_step(self) -> int:
        return self._b

    @property
    def max_offpolicyness(self) -> int:
        return self._k

    @property
    def max_groups_in_flight(self) -> int:
        return self._max_in_flight

    @property
    def in_flight(self) -> int:
        """Groups started (or restarted) and not yet finished."""
        return sum(1 for g in self._groups.values() if g[1] == RUNNING)

    @property
    def started_total(self) -> int:
        """Groups ever started (a restart does not count again)."""
        return self._started_total

    @property
    def steps_taken(self) -> int:
        """Accepted :meth:`take` calls, i.e. the next step to take."""
        return self._steps_taken

    @property
    def finished_waiting(self) -> int:
        """Finished groups not yet consumed."""
        return sum(1 for g in self._groups.values() if g[1] == FINISHED)

    def running_ids(self) -> list[Hashable]:
        """Ids of the running groups in start order (after a resume: the ones to restart)."""
        return [gid for gid, g in self._groups.items() if g[1] == RUNNING]

    def version_start(self, group_id: Hashable) -> int:
        """The version an unconsumed group was (re)started under."""
        return self._get(group_id)[0]

    # ------------------------------------------------------------------ transitions

    def _check_version(self, version: Any) -> int:
        _check_int("version", version, 0)
        if version > self._steps_taken:
            raise ValueError(f"version must be <= the steps taken ({self._steps_taken}): the rollout cannot "
                             f"hold weights of an update that has not happened, got {version}")
        return version

    def _get(self, group_id: Hashable) -> list:
        if group_id in self._groups:
            return self._groups[group_id]
        if group_id in self._consumed:
            raise ValueError(f"group {group_id!r} was already consumed by a training step")
        raise ValueError(f"group {group_id!r} was never started")

    def can_start(self, version: int) -> bool:
        """Whether a new group may start under rollout ``version``:
        ``started_total < (version + k + 1) * B`` and ``in_flight < max_groups_in_flight``."""
        version = self._check_version(version)
        return (self._started_total < (version + self._k + 1) * self._b
                and self.in_flight < self._max_in_flight)

    def start(self, group_id: Hashable, version: int) -> None:
        """Record that ``group_id`` started under ``version``.

        Raises:
            ValueError: A known id, or a bad version.
            RuntimeError: :meth:`can_start` is False (starting would break the bound).
        """
        version = self._check_version(version)
        if group_id in self._groups or group_id in self._consumed:
            raise ValueError(f"group {group_id!r} was already started; use restart() to start it again")
        if not self.can_start(version):
            raise RuntimeError(
                f"group {group_id!r} may not start under version {version}: started_total "
                f"{self._started_total} must stay below (version + k + 1) * B = "
                f"{(version + self._k + 1) * self._b} and in_flight {self.in_flight} below "
                f"max_groups_in_flight {self._max_in_flight}")
        self._groups[group_id] = [version, RUNNING, None]
        self._started_total += 1

    def finish(self, group_id: Hashable) -> None:
        """Record that every sample of running group ``group_id`` is done."""
        group = self._get(group_id)
        if group[1] != RUNNING:
            raise ValueError(f"group {group_id!r} already finished")
        group[1] = FINISHED
        group[2] = self._finish_seq
        self._finish_seq += 1

    def restart(self, group_id: Hashable, version: int) -> None:
        """Start unconsumed group ``group_id`` again under ``version`` (>= its old version):
        it runs again with deadline ``version + k``; ``started_total`` is unchanged. Its
        earlier samples, if any, must be dropped by the caller."""
        version = self._check_version(version)
        group = self._get(group_id)
        if version < group[0]:
            raise ValueError(f"version for restarting group {group_id!r} must be >= the version it started "
                             f"under ({group[0]}), got {version}")
        # Re-insert at the end so start order (running_ids) follows the restart.
        del self._groups[group_id]
        self._groups[group_id] = [version, RUNNING, None]

    def _deadline(self, group: list) -> int:
        return group[0] + self._k

    def take(self, step: int) -> list[Hashable] | None:
        """The groups step ``step`` trains on (marked consumed), or None to wait.

        Earliest deadline first among the finished groups (ties: finish order), accepted only
        if for every d >= step the unconsumed groups left with deadline <= d number at most
        (d - step) * B. ``step`` must be :attr:`steps_taken` (steps are taken in order).
        """
        _check_int("step", step, 0)
        if step != self._steps_taken:
            raise ValueError(f"step must be the next step to take ({self._steps_taken}), got {step}")
        finished = [(self._deadline(g), g[2], gid) for gid, g in self._groups.items() if g[1] == FINISHED]
        if len(finished) < self._b:
            return None
        finished.sort(key=lambda t: (t[0], t[1]))
        chosen = [gid for _, _, gid in finished[: self._b]]
        chosen_set = set(chosen)
        deadlines = sorted(self._deadline(g) for gid, g in self._groups.items() if gid not in chosen_set)
        # Sorted deadlines: the (i+1)-th smallest is the tightest d for a count of i + 1.
        for count, deadline in enumerate(deadlines, start=1):
            if count > max(deadline - step, 0) * self._b:
                return None
        for gid in chosen:
            del self._groups[gid]
            self._consumed.add(gid)
        self._steps_taken += 1
        return chosen

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """Everything needed to resume: arguments, counters, unconsumed and consumed ids.
        Plain Python (ids as given), for ``torch.save`` or pickle."""
        return {
            "state_version": _STATE_VERSION,
            "groups_per_step": self._b,
            "max_offpolicyness": self._k,
            "max_groups_in_flight": self._max_in_flight,
            "started_total": self._started_total,
            "steps_taken": self._steps_taken,
            "finish_seq": self._finish_seq,
            "groups": [(gid, g[0], g[1], g[2]) for gid, g in self._groups.items()],
            "consumed": list(self._consumed),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`. B and k must match this ledger's (the admitted groups were
        counted with them); ``max_groups_in_flight`` stays this ledger's own."""
        if not isinstance(state, dict) or state.get("state_version") != _STATE_VERSION:
            raise ValueError(f"not an AsyncLedger state (state_version {_STATE_VERSION} expected)")
        for name, own in (("groups_per_step", self._b), ("max_offpolicyness", self._k)):
            if state[name] != own:
                raise ValueError(f"{name} of the saved ledger is {state[name]}, this run's is {own}: "
                                 f"resume with the same value")
        self._started_total = int(state["started_total"])
        self._steps_taken = int(state["steps_taken"])
        self._finish_seq = int(state["finish_seq"])
        self._groups = {gid: [int(v), status, seq] for gid, v, status, seq in state["groups"]}
        self._consumed = set(state["consumed"])


def staleness_metrics(step: int, version_start: Sequence[int], version_end: Sequence[int]) -> dict[str, float]:
    """Per-sample staleness metrics of the samples trained at ``step``.

    With n samples: ``rollout/staleness`` = (1/n) sum_i (step - version_start_i),
    ``rollout/staleness_max`` = max_i (step - version_start_i),
    ``rollout/version_spread`` = (1/n) sum_i (version_end_i - version_start_i) (versions a
    sample's generation spanned; 0 without partial rollout).

    Raises:
        ValueError: Empty or unequal lengths, version_end < version_start, or version_start > step.

    >>> staleness_metrics(3, [1, 3, 2], [2, 3, 3])
    {'rollout/staleness': 1.0, 'rollout/staleness_max': 2.0, 'rollout/version_spread': 0.6666666666666666}
    """
    starts = [int(v) for v in version_start]
    ends = [int(v) for v in version_end]
    if not starts:
        raise ValueError("version_start is empty: no samples to measure")
    if len(starts) != len(ends):
        raise ValueError(f"version_start and version_end differ in length ({len(starts)} vs {len(ends)})")
    if any(e < s for s, e in zip(starts, ends)):
        raise ValueError("version_end must be >= version_start for every sample")
    if max(starts) > step:
        raise ValueError(f"version_start must be <= step {step}, got {max(starts)}")
    stale = [step - s for s in starts]
    return {
        "rollout/staleness": sum(stale) / len(stale),
        "rollout/staleness_max": float(max(stale)),
        "rollout/version_spread": sum(e - s for s, e in zip(starts, ends)) / len(starts),
    }
