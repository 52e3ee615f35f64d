#!/usr/bin/env bash
# The README's main job: set up .venv (idempotent), put the tiny math model in results/tiny_math
# (the shipped warm start, hashes checked; `python -m toolkits.tiny_math.prepare --rebuild` trains
# it from random weights), then run GRPO on it with the embedded default config on local Ray, CPU.
# Extra arguments are Hydra overrides, e.g. `bash scripts/main.sh runner.max_steps=10`.
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE  # bytecode written once, not compiled again by each worker (setup_env.sh)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup_env.sh" --extras math  # the main job's extra only; the tests install every extra
cd "$root"
export RAY_DEDUP_LOGS="${RAY_DEDUP_LOGS:-1}"
"$root/.venv/bin/python" -m toolkits.tiny_math.prepare --out results/tiny_math
exec "$root/.venv/bin/python" examples/math/main_grpo.py "$@"
