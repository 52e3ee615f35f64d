#!/usr/bin/env bash
# The README's test command: set up .venv (idempotent), then run the whole suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k channel`; `bash scripts/test.sh --quick`
# is the developers' tier (tests/conftest.py: no test marked ray or slow).
# Two pytest-xdist workers, one file each at a time (module fixtures stay in one process); the
# suite is CPU-bound on 2 cores, so this only fills the gaps of start-ups and waits (17.3 -> 15.3-16.4
# min here). `-n 0` (or RLINF_TEST_WORKERS=0) runs everything in one process.
# --no-loadscope-reorder: files go out in collection order, which tests/conftest.py makes longest
# first (tests/durations.json, from scripts/test_durations.py), so the workers end together.
# --max-worker-restart 0: a crashed worker ends the run with its summary; with --dist loadfile,
# pytest-xdist's replacement worker left the session waiting forever after the last test (seen in
# CI and here on 2026-11-28: both workers idle, the controller never finishing).
set -euo pipefail
# The suite starts hundreds of processes (Ray workers, CLIs) importing the same modules: with
# PYTHONDONTWRITEBYTECODE set, each compiles them again (a math group launch 56 s -> 21 s without it).
unset PYTHONDONTWRITEBYTECODE
# One torch / OpenMP thread per test process unless the caller says otherwise: two pytest-xdist
# workers on 2 cores, each at torch's default of one thread per core, oversubscribe the cores, and
# OpenMP's waiting threads then cost far more than the second thread gains (a tool-agent warm start:
# 112 s at 2 threads vs 18 s at 1 under the suite's load). Ray workers get their slot's share anyway.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup_env.sh"
cd "$root"
set +e
"$root/.venv/bin/python" -m pytest -n "${RLINF_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder \
    --max-worker-restart 0 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "error: pytest collected no tests" >&2
fi
exit "$rc"
