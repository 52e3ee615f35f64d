#!/usr/bin/env bash
# The README's main job: set up .venv (idempotent), then run the embedded default on local Ray, CPU.
# Extra arguments are Hydra overrides, e.g. `bash scripts/main.sh demo.steps=40`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup_env.sh"
cd "$root"
exec "$root/.venv/bin/python" examples/scheduler_demo/main_demo.py "$@"
