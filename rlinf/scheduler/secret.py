"""The run's secret: one random key per run, made by the driver, known to every worker.

The driver's :class:`~rlinf.scheduler.Cluster` makes it (:meth:`RunSecret.new`); each
:class:`~rlinf.scheduler.WorkerGroup` hands it to its workers as a hidden argument of their
construction (through Ray's own task arguments, never a command line or an environment variable);
inside a worker it is :attr:`Worker.run_secret <rlinf.scheduler.Worker.run_secret>`, already set
when the worker's ``__init__`` runs. Links that rlinf opens itself prove it before anything else
is read: pipes with a challenge-response handshake, HTTP services with a bearer token derived from
it (:meth:`RunSecret.token`).

The key never appears in text: ``repr`` / ``str`` hide it, and a :class:`RunSecret` cannot be
JSON-encoded or formatted into a config by accident (it is not a ``str``). Only :meth:`token`
gives text, a one-way derivation per purpose, so a token that leaks (a browser's request log,
say) does not reveal the key or the other purposes' tokens.

Example:
    >>> s = RunSecret.new()
    >>> repr(s)
    'RunSecret(<hidden>)'
    >>> len(s.token("web")), s.token("web") == s.token("web"), s.token("web") != s.token("site")
    (64, True, True)
    >>> import pickle
    >>> pickle.loads(pickle.dumps(s)) == s
    True
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

#: bytes of a new run's key
KEY_BYTES = 32


class RunSecret:
    """A run's key. Equal secrets compare equal (in constant time); the key is never printed.

    Args:
        key: the raw key, at least 16 bytes.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes):
        if not isinstance(key, bytes | bytearray) or len(key) < 16:
            raise ValueError("a run secret is at least 16 random bytes")
        self._key = bytes(key)

    @classmethod
    def new(cls) -> RunSecret:
        """A fresh random key (``secrets.token_bytes``)."""
        return cls(secrets.token_bytes(KEY_BYTES))

    def mac(self, *parts: bytes) -> bytes:
        """HMAC-SHA256 of the parts (each length-prefixed, so ``("ab", "c")`` != ``("a", "bc")``)."""
        h = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in parts:
            h.update(len(part).to_bytes(8, "big"))
            h.update(part)
        return h.digest()

    def token(self, purpose: str) -> str:
        """A bearer token for one purpose (64 hex characters), derived one-way from the key."""
        return self.mac(b"rlinf-token", purpose.encode()).hex()

    def derive(self, purpose: str) -> RunSecret:
        """A key for one purpose (a channel's socket, say), derived one-way from this one: it can
        be handed to that purpose's parties without revealing the run's key.

        Example:
            >>> s = RunSecret.new()
            >>> s.derive("channel/a") == s.derive("channel/a"), s.derive("channel/a") == s.derive("channel/b")
            (True, False)
            >>> s.derive("channel/a") == s
            False
        """
        return RunSecret(self.mac(b"rlinf-derive", purpose.encode()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunSecret) and hmac.compare_digest(self._key, other._key)

    def __hash__(self) -> int:
        return hash(self.mac(b"rlinf-hash"))

    def __repr__(self) -> str:
        return "RunSecret(<hidden>)"

    __str__ = __repr__

    def __reduce__(self):
        return RunSecret, (self._key,)
