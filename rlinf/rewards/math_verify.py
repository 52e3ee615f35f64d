"""Rule-based math reward: last ``\\boxed{}`` answer checked against the gold with math-verify.

math-verify bounds its own work with ``signal.alarm``, which only works on a process's main
thread (Ray actor methods and thread pools run elsewhere). :class:`MathVerifier` therefore
runs math-verify in a few child processes with those alarms off and enforces the time budget
itself (:mod:`.verify_pool`): a child still busy when its pair's budget runs out is killed
and replaced, and that pair scores as incorrect. Scoring thus works from any thread, never
hangs, and never raises because of what a model wrote.

Both sides go to math-verify as ``$<text>$`` so its LaTeX extractor reads them (a bare
``\\sqrt{4}`` is not extracted at all). Consequences of math-verify's rules, measured with
math-verify 0.9: ``\\frac{1}{2}`` = ``0.5``, ``2`` = ``2.0``, ``\\sqrt{4}`` = ``2``; an
assignment ``x=3`` counts as ``3`` (in both directions); ``\\{1,2\\}`` = ``\\{2,1\\}``;
intervals compare by endpoints and openness (``(1,2]`` != ``[1,2]``); ``\\pi`` != ``3.14159``.
"""

from __future__ import annotations

import atexit
import math
import threading
from collections.abc import Sequence
from typing import Any

import torch

from rlinf.algorithms.sampling import scale_math_rewards
from rlinf.rewards.base import Sample, Score
from rlinf.rewards.math_answer import extract_boxed_answer
from rlinf.rewards.verify_pool import VerifyPool, default_start_method

__all__ = ["MathVerifier", "math_reward"]


def _gold_text(gold: Any) -> str | None:
    """Gold as a string: its last box when it has one (a full solution), else the whole text."""
    if gold is None:
        return None
    text = str(gold).strip()
    boxed = extract_boxed_answer(text)
    text = boxed if boxed is not None else text
    return text or None


class MathVerifier:
    """Scores boxed answers against golds with math-verify in a small process pool.

    The object holds only picklable configuration until its first verification; pickling it
    (e.g. to ship it to a Ray actor) drops the pool, which restarts lazily on the other side.
    Calls from several threads are serialized.

    Args:
        num_processes: Child processes verifying in parallel.
        timeout_s: Time budget of one pair, from the moment it is handed to a child.
        total_timeout_s: Bound on one :meth:`score` call; pairs not finished by then score
            incorrect. ``None``: ``startup_timeout_s + timeout_s * ceil(pairs / num_processes)``.
        max_answer_chars: Boxed answers longer than this score incorrect without parsing
            (real final answers are short; long ones are junk or attacks). ``None``: no cap.
        start_method: ``"forkserver"`` (default where available, else ``"spawn"``). Fork is
            refused: the caller may hold threads and locks.
        memory_headroom_mb: Virtual-memory allowance of a child above its size at start-up
            (Linux ``RLIMIT_AS``); an allocation beyond it fails and the pair scores
            incorrect. ``None``: no cap.
        startup_timeout_s: How long a child may take to become ready.

    Example:
        >>> with MathVerifier() as verifier:  # answers without a box need no child process
        ...     verifier.score(["I think it is 4.", r"so \\boxed{}"], ["4", "4"])
        [False, False]
    """

    def __init__(self, num_processes: int = 1, timeout_s: float = 2.0,
                 total_timeout_s: float | None = None, max_answer_chars: int | None = 2048,
                 start_method: str | None = None, memory_headroom_mb: int | None = 2048,
                 startup_timeout_s: float = 60.0) -> None:
        if start_method is None:
            start_method = default_start_method()
        if start_method not in ("forkserver", "spawn"):
            raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {start_method!r}")
        if int(num_processes) < 1:
            raise ValueError(f"num_processes must be >= 1, got {num_processes}")
        for name, value in (("timeout_s", timeout_s), ("startup_timeout_s", startup_timeout_s),
                            ("total_timeout_s", total_timeout_s),
                            ("max_answer_chars", max_answer_chars)):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        self.num_processes = int(num_processes)
        self.timeout_s = float(timeout_s)
        self.total_timeout_s = total_timeout_s
        self.max_answer_chars = max_answer_chars
        self.start_method = start_method
        self.memory_headroom_mb = memory_headroom_mb
        self.startup_timeout_s = float(startup_timeout_s)
        self._setup()

    def _setup(self) -> None:
        self._lock = threading.Lock()
        self._pool: VerifyPool | None = None
        self._closed = False

    @classmethod
    def from_config(cls, reward_cfg: Any, **overrides: Any) -> MathVerifier:
        """Build from a ``reward`` config section (``verify_processes``, ``verify_timeout_s``)."""
        kwargs = {"num_processes": getattr(reward_cfg, "verify_processes", 1),
                  "timeout_s": getattr(reward_cfg, "verify_timeout_s", 2.0)}
        kwargs.update(overrides)
        return cls(**kwargs)

    def _config(self) -> dict:
        return {name: getattr(self, name) for name in (
            "num_processes", "timeout_s", "total_timeout_s", "max_answer_chars",
            "start_method", "memory_headroom_mb", "startup_timeout_s")}

    def __getstate__(self) -> dict:
        return self._config()

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._setup()

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value!r}" for key, value in self._config().items())
        return f"MathVerifier({args})"

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    @property
    def pids(self) -> list[int]:
        """Process ids of the children (empty before the first verification)."""
        pool = self._pool
        return pool.pids if pool is not None else []

    def score(self, responses: Sequence[Any], golds: Sequence[Any]) -> list[bool]:
        """Whether each response's last boxed answer equals its gold.

        A response without a (non-empty, closed) box is incorrect without any parsing.
        Golds may be bare answers (``"\\frac{1}{2}"``, ``18``) or texts with a box.

        Args:
            responses: Model responses.
            golds: Reference answers, one per response.

        Returns:
            One bool per response.

        Raises:
            ValueError: If the two lengths differ.
            RuntimeError: If the verifier was closed, or its children cannot start.
        """
        if len(responses) != len(golds):
            raise ValueError(f"got {len(responses)} responses but {len(golds)} golds")
        results = [False] * len(responses)
        indices, pairs = [], []
        for index, (response, gold) in enumerate(zip(responses, golds)):
            answer = extract_boxed_answer(response)
            if not answer or (self.max_answer_chars is not None
                              and len(answer) > self.max_answer_chars):
                continue
            gold_text = _gold_text(gold)
            if gold_text is not None:
                indices.append(index)
                pairs.append((f"${gold_text}$", f"${answer}$"))
        with self._lock:
            if self._closed:
                raise RuntimeError("MathVerifier is closed")
            if not pairs:
                return results
            if self._pool is None:
                self._pool = VerifyPool(self.num_processes, self.timeout_s, self.start_method,
                                        self.memory_headroom_mb, self.startup_timeout_s)
            total = self.total_timeout_s
            if total is None:
                total = self.startup_timeout_s + self.timeout_s * math.ceil(
                    len(pairs) / self.num_processes)
            for index, ok in zip(indices, self._pool.run(pairs, total)):
                results[index] = ok
        return results

    def score_many(self, samples: Sequence[Sample]) -> list[Score]:
        """:meth:`score` as a :class:`~rlinf.rewards.base.Scorer`: value 1 (correct) or 0.

        >>> with MathVerifier() as verifier:
        ...     [s.correct for s in verifier.score_many([Sample("no box", "4")])]
        [False]
        """
        correct = self.score([s.response for s in samples], [s.reference for s in samples])
        return [Score(1.0 if ok else 0.0, correct=ok) for ok in correct]

    def close(self) -> None:
        """Stop and reap every child; later :meth:`score` calls raise. Idempotent.

        Waits for a :meth:`score` running in another thread to finish first.
        """
        with self._lock:
            self._closed = True
            if self._pool is not None:
                self._pool.close()
                self._pool = None


_DEFAULT_LOCK = threading.Lock()
_DEFAULT_VERIFIER: MathVerifier | None = None


def _default_verifier() -> MathVerifier:
    """The per-process verifier of :func:`math_reward`; its children stop at interpreter exit."""
    global _DEFAULT_VERIFIER
    with _DEFAULT_LOCK:
        if _DEFAULT_VERIFIER is None or _DEFAULT_VERIFIER._closed:
            _DEFAULT_VERIFIER = MathVerifier()
            atexit.register(_DEFAULT_VERIFIER.close)
        return _DEFAULT_VERIFIER


def math_reward(responses: Sequence[Any], golds: Sequence[Any], reward_scale: float = 1.0,
                verifier: MathVerifier | None = None) -> torch.Tensor:
    """``reward_type: math``: +reward_scale for a correct boxed answer, -reward_scale otherwise.

    Args:
        responses: Model responses.
        golds: Reference answers, one per response.
        reward_scale: Reward magnitude (``reward.reward_scale``), >= 0.
        verifier: Verifier to use; default: one shared per process (one child, 2 s budget),
            whose child starts at the first boxed answer.

    Returns:
        ``[len(responses)]`` float32 tensor of ``±reward_scale``.

    Example:
        >>> math_reward(["no final answer", "still none"], ["1", "2"], reward_scale=5.0)
        tensor([-5., -5.])
    """
    verifier = verifier if verifier is not None else _default_verifier()
    return scale_math_rewards(verifier.score(responses, golds), reward_scale)
