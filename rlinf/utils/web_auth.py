"""Bearer tokens of the web services (the browser service and the shipped sites' server).

It sits in ``rlinf.utils`` because both sides use it: the browser engine (:mod:`rlinf.engines.web`)
and the shipped sites (:mod:`rlinf.envs.web_sites`), which import nothing of the engines.

Every request to either server carries ``Authorization: Bearer <token>``; anything else is
answered 401 before the rest of the request is read. In a run the tokens come from the run's
secret (``run_secret.token("web-service")`` / ``run_secret.token("web-site")``); a server started
by hand takes one from ``RLINF_WEB_TOKEN`` or a token file (:func:`token_from`). A token never
goes into a URL, a log line or a saved file other than a token file of mode 0600.

Example:
    >>> header = bearer("abc")
    >>> header
    {'Authorization': 'Bearer abc'}
    >>> authorized(header["Authorization"], "abc"), authorized("Bearer abd", "abc"), authorized(None, "abc")
    (True, False, False)
    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("::1"), is_loopback("0.0.0.0")
    (True, True, True, False)
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import stat
import tempfile

#: the environment variable a server started by hand reads its token from
TOKEN_ENV = "RLINF_WEB_TOKEN"
#: what a 401 says (never which part was wrong)
UNAUTHORIZED = "missing or wrong bearer token (send Authorization: Bearer <token>)"


def bearer(token: str) -> dict[str, str]:
    """The request header that carries ``token``."""
    return {"Authorization": f"Bearer {token}"}


def authorized(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header value carries ``token`` (constant-time compare)."""
    if header is None:
        return False
    given = header.encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, f"Bearer {token}".encode())


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server on this machine (``localhost`` or a loopback IP)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: object, what: str = "token") -> str:
    """``token`` if it is a usable bearer token (printable ASCII without spaces, 16+ characters)."""
    if not isinstance(token, str) or len(token) < 16 or not all(33 <= ord(c) < 127 for c in token):
        raise ValueError(f"{what}: expected at least 16 printable ASCII characters without spaces")
    return token


def new_token() -> str:
    """A fresh random token (64 hex characters)."""
    return secrets.token_hex(32)


def read_token_file(path: str) -> str:
    """The token in ``path`` (surrounding whitespace stripped). The file must be readable by its
    owner only (mode 0600 or 0400), like an SSH key; raises ``ValueError`` with one line."""
    try:
        mode = os.stat(path).st_mode
        with open(path, encoding="ascii") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--token-file {path}: cannot read it ({type(err).__name__}: "
                         f"{getattr(err, 'strerror', None) or err})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"--token-file {path}: other users may read it (mode {stat.S_IMODE(mode):04o}); "
                         "chmod 600 it")
    return check_token(text.strip(), f"--token-file {path}")


def token_from(token_file: str | None, environ: dict | None = None) -> str | None:
    """A hand-started server's token: ``token_file`` if given, else ``$RLINF_WEB_TOKEN``, else None."""
    if token_file is not None:
        return read_token_file(token_file)
    value = (os.environ if environ is None else environ).get(TOKEN_ENV)
    return None if not value else check_token(value.strip(), f"${TOKEN_ENV}")


def write_token_file(token: str, prefix: str = "rlinf-web-token-") -> str:
    """Write ``token`` to a new file of mode 0600 in the temp folder; returns its path."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".txt")  # mkstemp creates it 0600
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(token + "\n")
    return path


def server_token(host: str, token_file: str | None, *, name: str,
                 environ: dict | None = None) -> tuple[str, str | None]:
    """The token a hand-started server on ``host`` serves with, and the path of the token file
    written for it (None when the token came from the user). Without a token a non-loopback
    ``host`` is refused (``ValueError``); a loopback one gets a fresh token in a 0600 file.

    >>> server_token("0.0.0.0", None, name="the browser service", environ={})
    Traceback (most recent call last):
    ...
    ValueError: --host 0.0.0.0 is not a loopback address: the browser service needs a token there (set RLINF_WEB_TOKEN or pass --token-file PATH)
    """  # noqa: E501 - a doctest's expected output is one line
    token = token_from(token_file, environ)
    if token is not None:
        return token, None
    if not is_loopback(host):
        raise ValueError(f"--host {host} is not a loopback address: {name} needs a token there "
                         f"(set {TOKEN_ENV} or pass --token-file PATH)")
    token = new_token()
    return token, write_token_file(token)
