"""Parsing one ``cluster.component_placement`` value, and mapping its parts to processes.

A placement value is ``all``, ``N``, ``a-b`` or a comma-separated list of such parts, each
optionally followed by ``:N`` or ``:a-b`` naming process ranks (see ``docs/placement_grammar.md``).
This module knows nothing about nodes: it works on abstract resource ranks ``0 .. n-1``;
:mod:`rlinf.scheduler.placement.builder` maps those ranks to nodes and accelerators.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlinf.utils.typed_config import ConfigError

#: Most processes one component may have (guards against typos like ``0:0-99999999``).
MAX_PROCESSES = 1 << 16

_INT = re.compile(r"[0-9]+")
_MAX_DIGITS = 9

VALUE_FORMS = (
    "a placement is 'all', 'N', 'a-b' (a <= b) or a comma-separated list of them, each part "
    "optionally followed by ':N' or ':a-b' process ranks, or {node_group: <label>, placement: ...}"
)


class PlacementError(ConfigError):
    """An invalid placement or cluster setting; ``str()`` is one line naming key, token and rule.

    A :class:`~rlinf.utils.typed_config.ConfigError` (and so a ``ValueError``): callers catch one
    type for every config problem.

    Attributes:
        key: the config key, e.g. ``cluster.component_placement.actor``.
        token: the offending text, e.g. ``'0-16'``.
        problem: what is wrong with it.
        allowed: what would be accepted instead.

    >>> err = PlacementError("cluster.num_nodes", "0", "'0' is too small", "use an int >= 1")
    >>> str(err)
    "cluster.num_nodes: '0' is too small; use an int >= 1"
    """

    def __init__(self, key: str, token: object, problem: str, allowed: str = "") -> None:
        self.key = key
        self.token = str(token)
        self.problem = problem
        self.allowed = allowed
        msg = f"{problem}; {allowed}" if allowed else problem
        super().__init__(key, msg.replace("\r", " ").replace("\n", " "))


@dataclass(frozen=True)
class Span:
    """An inclusive rank range ``first..last``; ``first is None`` stands for ``all``."""

    first: int | None
    last: int | None

    def resolve(self, n: int, *, key: str, token: str, allowed: str, what: str) -> range:
        """The ranks of this span among ``n`` available ones; PlacementError when out of range.

        >>> Span(2, 4).resolve(8, key="k", token="2-4", allowed="", what="rank")
        range(2, 5)
        >>> Span(None, None).resolve(3, key="k", token="all", allowed="", what="rank")
        range(0, 3)
        """
        if n <= 0:
            raise PlacementError(key, token, f"{token!r} names {what}s but there are none", allowed)
        if self.first is None:
            return range(n)
        assert self.last is not None
        if self.last >= n:
            bad = self.first if self.first >= n else n
            raise PlacementError(key, token, f"{what} {bad} in {token!r} is out of range", allowed)
        return range(self.first, self.last + 1)


@dataclass(frozen=True)
class Part:
    """One comma-separated part: its text, resource ranks, and process ranks (``None`` without ``:``)."""

    text: str
    resources: Span
    processes: Span | None


@dataclass(frozen=True)
class PlacementSpec:
    """A parsed placement value: the original text and its parts, in order."""

    text: str
    parts: tuple[Part, ...]

    @property
    def with_processes(self) -> bool:
        """Whether the parts carry ``:PROC`` process ranks (then all of them do)."""
        return self.parts[0].processes is not None


def _value_text(value: object, key: str) -> str:
    if value is None:
        raise PlacementError(key, "None", "the placement is empty (None)", VALUE_FORMS)
    if isinstance(value, bool):
        raise PlacementError(key, repr(value), f"{value!r} is a bool, not a placement", VALUE_FORMS)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    tname = type(value).__name__
    raise PlacementError(key, repr(value), f"{value!r} ({tname}) is not a placement", VALUE_FORMS)


def _parse_int(text: str, *, key: str, token: str) -> int:
    t = text.strip()
    if not _INT.fullmatch(t):
        problem = f"{t!r} in {token!r} is not a rank" if t else f"{token!r} is missing a number"
        raise PlacementError(key, token, problem, "ranks are non-negative integers")
    if len(t) > 1 and t[0] == "0":
        raise PlacementError(key, token, f"{t!r} in {token!r} has a leading zero",
                             f"write ranks in decimal without leading zeros, e.g. {t.lstrip('0') or '0'!r}")
    if len(t) > _MAX_DIGITS:
        raise PlacementError(key, token, f"{t!r} in {token!r} is too large", "ranks have at most 9 digits")
    return int(t)


def _parse_span(text: str, *, allow_all: bool, key: str, token: str) -> Span:
    t = text.strip()
    if t == "all" and allow_all:
        return Span(None, None)
    if "-" in t:
        a_txt, b_txt = t.split("-", 1)
        a = _parse_int(a_txt, key=key, token=token)
        b = _parse_int(b_txt, key=key, token=token)
        if a > b:
            raise PlacementError(
                key, token, f"range '{a}-{b}' in {token!r} is descending", f"write '{b}-{a}'"
            )
        return Span(a, b)
    forms = "'all', 'N' or 'a-b'" if allow_all else "'N' or 'a-b' (process ranks)"
    if t == "all":
        raise PlacementError(key, token, f"'all' in {token!r} cannot name process ranks", f"use {forms}")
    if not t:
        raise PlacementError(key, token, f"{token!r} has an empty rank", f"use {forms}")
    rank = _parse_int(t, key=key, token=token)
    return Span(rank, rank)


def parse_placement(value: object, key: str) -> PlacementSpec:
    """Parse one placement string or int into its parts (no cluster needed yet).

    Args:
        value: the YAML value: a string like ``"0-3,5"`` or ``"0-7:0-3"``, or an int.
        key: config key named in errors.

    Returns:
        The parsed :class:`PlacementSpec`.

    Raises:
        PlacementError: empty value or part, non-integer, descending range, bool, mixed ``:``.

    >>> spec = parse_placement("0-3:0-7", "k")
    >>> spec.parts[0].resources, spec.parts[0].processes
    (Span(first=0, last=3), Span(first=0, last=7))
    >>> parse_placement(5, "k").parts[0].resources
    Span(first=5, last=5)
    """
    text = _value_text(value, key)
    if not text.strip():
        raise PlacementError(key, repr(text), f"the placement {text!r} is empty", VALUE_FORMS)
    parts = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise PlacementError(key, text, f"{text!r} has an empty part", VALUE_FORMS)
        if ":" in part:
            res_txt, proc_txt = part.split(":", 1)
            if ":" in proc_txt:
                raise PlacementError(key, part, f"{part!r} has more than one ':'", VALUE_FORMS)
            res = _parse_span(res_txt, allow_all=True, key=key, token=part)
            procs: Span | None = _parse_span(proc_txt, allow_all=False, key=key, token=part)
        else:
            res = _parse_span(part, allow_all=True, key=key, token=part)
            procs = None
        parts.append(Part(part, res, procs))
    if len({p.processes is None for p in parts}) > 1:
        raise PlacementError(
            key, text, f"{text!r} mixes parts with ':' and parts without",
            "either every part names its process ranks with ':' or none does",
        )
    return PlacementSpec(text, tuple(parts))


def parse_rank_list(value: object, key: str) -> tuple[Part, ...]:
    """Parse a rank list without process ranks (e.g. ``node_ranks: "0-1,3"``).

    >>> [(p.text, p.resources) for p in parse_rank_list("0-1,3", "k")]
    [('0-1', Span(first=0, last=1)), ('3', Span(first=3, last=3))]
    """
    spec = parse_placement(value, key)
    if spec.with_processes:
        raise PlacementError(
            key, spec.text, f"{spec.text!r} has ':'", "a rank list has 'all', 'N' or 'a-b' parts"
        )
    return spec.parts


def _claim(owner: dict[int, str], ranks: range, part: Part, key: str, what: str) -> None:
    for r in ranks:
        if r in owner:
            raise PlacementError(
                key, part.text, f"{what} {r} in {part.text!r} is already used by {owner[r]!r}",
                "a component may use each resource once",
            )
        owner[r] = part.text


def assign_processes(
    spec: PlacementSpec, num_resources: int, *, key: str, allowed: str, what: str = "accelerator rank"
) -> list[tuple[str, tuple[int, ...]]]:
    """Map every process rank of ``spec`` to the resource ranks it gets.

    Args:
        spec: a parsed placement.
        num_resources: resource ranks available (``0 .. num_resources-1``).
        key: config key named in errors.
        allowed: description of the valid ranks, used in out-of-range errors.
        what: what a resource rank is called in errors.

    Returns:
        Index ``p`` holds ``(part text, resource ranks of process p)``.

    >>> [r for _, r in assign_processes(parse_placement("0-1:0-3", "k"), 8, key="k", allowed="")]
    [(0,), (0,), (1,), (1,)]
    >>> [r for _, r in assign_processes(parse_placement("0-3:0-1", "k"), 8, key="k", allowed="")]
    [(0, 1), (2, 3)]
    """
    owner: dict[int, str] = {}
    n = num_resources
    if not spec.with_processes:
        out: list[tuple[str, tuple[int, ...]]] = []
        for part in spec.parts:
            ranks = part.resources.resolve(n, key=key, token=part.text, allowed=allowed, what=what)
            _claim(owner, ranks, part, key, what)
            out.extend((part.text, (r,)) for r in ranks)
        return out
    slots: dict[int, tuple[str, tuple[int, ...]]] = {}
    for part in spec.parts:
        res = part.resources.resolve(n, key=key, token=part.text, allowed=allowed, what=what)
        assert part.processes is not None and part.processes.first is not None
        procs = range(part.processes.first, part.processes.last + 1)  # type: ignore[operator]
        if len(slots) + len(procs) > MAX_PROCESSES:
            raise PlacementError(key, part.text, f"{part.text!r} gives too many processes",
                                 f"at most {MAX_PROCESSES} processes per component")
        _claim(owner, res, part, key, what)
        r_count, p_count = len(res), len(procs)
        if p_count >= r_count and p_count % r_count == 0:
            per = p_count // r_count
            groups = [(res[i // per],) for i in range(p_count)]
        elif p_count < r_count and r_count % p_count == 0:
            per = r_count // p_count
            groups = [tuple(res[i * per:(i + 1) * per]) for i in range(p_count)]
        else:
            raise PlacementError(
                key, part.text,
                f"{part.text!r} splits {p_count} processes over {r_count} resources unevenly",
                "in 'RES:PROC' the process count must be a multiple of the resource count or divide it",
            )
        for p, group in zip(procs, groups):
            if p in slots:
                raise PlacementError(
                    key, part.text, f"process rank {p} in {part.text!r} is already given by {slots[p][0]!r}",
                    "process ranks across parts must be exactly 0..n-1 with no overlap",
                )
            slots[p] = (part.text, group)
    count = len(slots)
    if max(slots) + 1 != count:
        missing = next(p for p in range(count) if p not in slots)
        raise PlacementError(
            key, spec.text, f"process ranks in {spec.text!r} have a gap at {missing}",
            "process ranks across parts must be exactly 0..n-1 with no gap",
        )
    return [slots[p] for p in range(count)]

