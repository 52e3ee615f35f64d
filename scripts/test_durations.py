"""Write ``tests/durations.json`` (seconds per test file) from a pytest junit XML, for the suite's
slowest-first file order (tests/conftest.py).

    .venv/bin/python -m pytest ... --junitxml=/tmp/suite.xml
    .venv/bin/python scripts/test_durations.py /tmp/suite.xml > tests/durations.json

Only the order matters (files run longest first, so the two workers end together), so figures
measured under load do as well as idle ones.
"""

from __future__ import annotations

import collections
import json
import sys
import xml.etree.ElementTree as ET


def file_seconds(junit_path: str) -> dict[str, float]:
    """Seconds per test file (``tests/x/test_y.py``; doctests: the module's path)."""
    totals: dict[str, float] = collections.defaultdict(float)
    for case in ET.parse(junit_path).getroot().iter("testcase"):
        module = case.get("classname", "")
        path = case.get("file") or module.replace(".", "/") + ".py"
        totals[path] += float(case.get("time", 0) or 0)
    return {path: round(seconds, 1) for path, seconds in sorted(totals.items(), key=lambda kv: -kv[1])
            if seconds >= 0.5}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/test_durations.py JUNIT_XML > tests/durations.json")
    json.dump(file_seconds(sys.argv[1]), sys.stdout, indent=0)
    sys.stdout.write("\n")
