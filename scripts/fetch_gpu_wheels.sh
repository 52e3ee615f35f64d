#!/usr/bin/env bash
# Download the wheels scripts/gpu_check.sh installs on the GPU machine (which has no network) into
# gpu_wheels/ (git-ignored; carry it with the device call). Run here, where pip reaches an index.
#
#   bash scripts/fetch_gpu_wheels.sh                   # for the GPU machine's Python 3.12
#   bash scripts/fetch_gpu_wheels.sh --python 3.11     # another Python (repeatable)
#   bash scripts/fetch_gpu_wheels.sh --numpy           # also numpy (when that Python lacks it)
#
# Versions: this checkout's .venv's (the ones the CPU tests pass with), else the fallbacks in
# toolkits/gpu_check/wheels.py. The folder is emptied first; the total must stay under 60 MiB.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
dest="$root/gpu_wheels"
pythons=()
numpy=()
while [ $# -gt 0 ]; do
    case "$1" in
        --python) pythons+=("${2:?--python needs a version such as 3.12}"); shift 2 ;;
        --numpy) numpy=(--numpy); shift ;;
        --dest) dest="${2:?--dest needs a folder}"; shift 2 ;;
        *) echo "error: unknown argument $1 (expected --python X.Y, --numpy, --dest DIR)" >&2; exit 2 ;;
    esac
done
[ ${#pythons[@]} -gt 0 ] || pythons=(3.12)
if [ ! -x "$py" ]; then
    echo "error: no Python at $py: run bash scripts/setup_env.sh first, or set PYTHON=/path/to/python" >&2
    exit 2
fi
cd "$root"
mapfile -t reqs < <("$py" -m toolkits.gpu_check.wheels requirements "${numpy[@]}")
mkdir -p "$dest"
rm -f "$dest"/*.whl
for version in "${pythons[@]}"; do
    "$py" -m pip download --quiet --no-deps --only-binary=:all: --dest "$dest" \
        --python-version "$version" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        "${reqs[@]}"
done
"$py" -m toolkits.gpu_check.wheels list --wheels "$dest" --limit-mib 60
echo "next: carry gpu_wheels with the device call and run: bash scripts/gpu_check.sh"
