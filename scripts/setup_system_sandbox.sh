#!/usr/bin/env bash
# The sandbox of the `python` tool (rlinf/engines/tools/python_sandbox.py): Debian's `bubblewrap`
# package (the `bwrap` binary). Without it, `tools.python.isolation: auto` falls back to
# util-linux `unshare` (user, mount, PID and network namespaces; docs/tools_sandbox.md says what
# each mode protects against).
#
#   bash scripts/setup_system_sandbox.sh
#
# Idempotent and cheap: when `bwrap` is on PATH it only runs one bwrap start (~20 ms) and prints
# nothing. Installs with apt only as root or with passwordless sudo, on Debian/Ubuntu; otherwise
# prints one line and exits 0. The check says when bwrap cannot start a sandbox here (unprivileged user namespaces may be disabled, e.g. by
# kernel.unprivileged_userns_clone=0 or AppArmor's restrict_unprivileged_userns) and says so.
set -euo pipefail

fallback="the python tool will fall back to 'unshare' (tools.python.isolation: auto)"

if ! command -v bwrap >/dev/null 2>&1; then
    sudo=()
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            echo "[sandbox] no bwrap, and not root nor passwordless sudo to apt-get install bubblewrap: $fallback"
            exit 0
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "[sandbox] no bwrap and no apt-get here (install bubblewrap yourself): $fallback"
        exit 0
    fi
    apt_get=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0)
    echo "[sandbox] apt-get install --no-install-recommends bubblewrap"
    if ! { "${apt_get[@]}" update >/dev/null && "${apt_get[@]}" install --no-install-recommends bubblewrap >/dev/null; }; then
        echo "[sandbox] apt-get install bubblewrap failed: $fallback"
        exit 0
    fi
fi

if ! bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc --die-with-parent /bin/true 2>/dev/null; then
    echo "[sandbox] bwrap is installed but cannot start a sandbox here (user namespaces off?): $fallback"
fi
