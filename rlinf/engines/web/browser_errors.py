"""The errors of :mod:`rlinf.engines.web.browser` and where its Chromium comes from (importable
without Playwright: the HTTP client maps server replies back onto these errors).

>>> str(InstanceLost("i1", "the browser process exited"))
'instance i1 lost: the browser process exited'
"""

from __future__ import annotations

import os
import shutil

#: binaries tried in order when no ``executable_path`` is given (scripts/setup_system_browser.sh)
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium-headless-shell", "/usr/lib/chromium/chromium")


class InstanceLost(RuntimeError):
    """The instance is gone (its browser died, its page crashed, or it was recycled)."""

    def __init__(self, iid: str, reason: str) -> None:
        super().__init__(f"instance {iid} lost: {reason}")
        self.iid, self.reason = iid, reason


class UnknownInstance(KeyError):
    """No instance has this id (never allocated, or already released)."""

    def __str__(self) -> str:
        return f"unknown instance id {self.args[0]!r}"


class OperationTimeout(TimeoutError):
    """An operation overran its ``timeout_s``; the instance is being reset."""

    def __init__(self, op: str, iid: str, timeout_s: float) -> None:
        super().__init__(f"{op} on instance {iid} exceeded {timeout_s:g}s; the instance is being reset")
        self.op, self.iid, self.timeout_s = op, iid, timeout_s


class BrowserStartError(RuntimeError):
    """Chromium could not be found or launched."""


def find_chromium(executable_path: str | None = None) -> str:
    """The Chromium binary to launch: ``executable_path`` if given, else the first executable of
    :data:`CHROMIUM_CANDIDATES`, else ``chromium`` / ``chromium-headless-shell`` on the PATH.

    >>> find_chromium("/bin/sh")
    '/bin/sh'
    """
    if executable_path:
        if not _executable(executable_path):
            raise BrowserStartError(f"{executable_path!r} is not an executable file")
        return executable_path
    for candidate in CHROMIUM_CANDIDATES:
        if _executable(candidate):
            return candidate
    found = shutil.which("chromium") or shutil.which("chromium-headless-shell")
    if found:
        return found
    raise BrowserStartError("no Chromium found at " + " or ".join(CHROMIUM_CANDIDATES) + " or on the PATH; "
                            "run scripts/setup_system_browser.sh or set env_config.browser.executable_path")


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def first_line(error: BaseException) -> str:
    """The first line of an error's text (Playwright appends call logs)."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
