#!/usr/bin/env bash
# The GPU check kit's one command (docs/gpu_check.md), for a GPU machine with PyTorch and no
# network: installs the carried wheels (gpu_wheels/, from scripts/fetch_gpu_wheels.sh) into
# .gpu_site/ with the standard library alone, puts it first on PYTHONPATH, and runs
# `python -m toolkits.gpu_check`, which writes ${OUT:-gpu_check_out}/gpu_check.json within
# about 9 minutes. Nothing outside the repository is written except the checks' temp folder.
#
#   bash scripts/gpu_check.sh                      # on the GPU machine
#   bash scripts/gpu_check.sh --cpu-dry-run        # the same plumbing on a CPU, tiny sizes
#   bash scripts/gpu_check.sh --only fsdp_bf16,mfu --budget-s 300
#   bash scripts/gpu_check.sh --only pi0_ppo       # one πRL PPO update of a real-size π0 (bf16): time, memory
#
# Own options: --wheels DIR (default gpu_wheels), --site DIR (default .gpu_site), --no-wheels
# (use the Python's own packages). Everything else goes to python -m toolkits.gpu_check.
# The Python is GPU_CHECK_PYTHON, else python3 (on the GPU machine: the one that holds PyTorch).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${GPU_CHECK_PYTHON:-python3}"
wheels="$root/gpu_wheels"
site="$root/.gpu_site"
use_wheels=1
dry_run=0
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels="${2:?--wheels needs a folder}"; shift 2 ;;
        --site) site="${2:?--site needs a folder}"; shift 2 ;;
        --no-wheels) use_wheels=0; shift ;;
        --cpu-dry-run) dry_run=1; args+=("$1"); shift ;;
        *) args+=("$1"); shift ;;
    esac
done
if ! command -v "$py" >/dev/null 2>&1; then
    echo "error: no Python '$py' on PATH: set GPU_CHECK_PYTHON to the Python that holds PyTorch" >&2
    exit 2
fi
site_args=()
if [ "$use_wheels" = 1 ]; then
    if [ ! -d "$wheels" ] && [ "$dry_run" = 1 ]; then
        echo "note: no $wheels; the dry run uses the packages of $py"
    else
        "$py" -m toolkits.gpu_check.wheels install --wheels "$wheels" --site "$site" || exit 2
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
        site_args=(--wheels-site "$site")
    fi
fi
export PYTHONUNBUFFERED=1
exec "$py" -m toolkits.gpu_check --out "${OUT:-$root/gpu_check_out}" "${site_args[@]}" "${args[@]}"
