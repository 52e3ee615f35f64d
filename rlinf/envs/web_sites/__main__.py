"""Serves the shipped sites until interrupted: ``python -m rlinf.envs.web_sites --port 8080 --seed 0``.

Every request must carry ``Authorization: Bearer <token>``: the token comes from
``$RLINF_WEB_TOKEN`` or ``--token-file PATH``; without one, on a loopback ``--host``, a fresh token
is written to a 0600 file whose path is printed (never the token), and any other ``--host`` is
refused. ``--no-auth`` serves without a token, on a loopback ``--host`` only, for browsing the sites
by hand in an ordinary browser.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from rlinf.envs.web_sites.server import SiteServer
from rlinf.utils.web_auth import is_loopback, server_token


def main(argv: list[str] | None = None, stop: threading.Event | None = None) -> int:
    """Parses the arguments, serves until Ctrl-C (or until ``stop`` is set), returns the exit status.

    Example:
        >>> main(["--port", "-1"])
        2
    """
    parser = argparse.ArgumentParser(prog="python -m rlinf.envs.web_sites", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (0: any free port; default 8080)")
    parser.add_argument("--seed", type=int, default=0, help="catalog seed (default 0)")
    parser.add_argument("--token-file", default=None, metavar="PATH",
                        help="file holding the bearer token (mode 0600); default: $RLINF_WEB_TOKEN, else (on a "
                             "loopback --host only) a fresh token written to a 0600 file whose path is printed")
    parser.add_argument("--no-auth", action="store_true",
                        help="serve without a token (loopback --host only), to browse the sites by hand")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be from 0 to 65535, got {args.port}", file=sys.stderr)
        return 2
    if args.no_auth and not is_loopback(args.host):
        print(f"error: --no-auth serves a loopback --host only, not {args.host}", file=sys.stderr)
        return 2
    written = None
    try:
        token = None
        if not args.no_auth:
            token, written = server_token(args.host, args.token_file, name="the site server")
        return _serve(SiteServer(args.host, args.port, args.seed, token=token, open_access=args.no_auth),
                      written, stop)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if written is not None:  # a token made for this server is good for nothing once it stops
            os.unlink(written)


def _serve(server: SiteServer, written: str | None, stop: threading.Event | None) -> int:
    try:
        url = server.start()
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if written is not None:
        print(f"bearer token written to {written} (mode 0600; send Authorization: Bearer <its content>)", flush=True)
    print(f"serving shop, wiki and forms (seed {server.seed}) at {url}/ - Ctrl-C stops", flush=True)
    try:
        (stop or threading.Event()).wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
