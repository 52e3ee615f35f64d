#!/usr/bin/env bash
# The README's test command: set up .venv (idempotent), then run the whole suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k channel`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup_env.sh"
cd "$root"
set +e
"$root/.venv/bin/python" -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "error: pytest collected no tests" >&2
fi
exit "$rc"
