"""Serves the shipped sites until interrupted: ``python -m rlinf.envs.web_sites --port 8080 --seed 0``."""

from __future__ import annotations

import argparse
import sys
import threading

from rlinf.envs.web_sites.server import SiteServer


def main(argv: list[str] | None = None, stop: threading.Event | None = None) -> int:
    """Parses the arguments, serves until Ctrl-C (or until ``stop`` is set), returns the exit status.

    Example:
        >>> main(["--port", "-1"])
        2
    """
    parser = argparse.ArgumentParser(prog="python -m rlinf.envs.web_sites", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (0: any free port; default 8080)")
    parser.add_argument("--seed", type=int, default=0, help="catalog seed (default 0)")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be from 0 to 65535, got {args.port}", file=sys.stderr)
        return 2
    server = SiteServer(args.host, args.port, args.seed)
    try:
        url = server.start()
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"serving shop, wiki and forms (seed {args.seed}) at {url}/ - Ctrl-C stops", flush=True)
    try:
        (stop or threading.Event()).wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
