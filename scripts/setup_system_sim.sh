#!/usr/bin/env bash
# System libraries the simulators need; called by setup_env.sh with the extras list ("dev,math,...").
#
#   embodied (ManiSkill3 / SAPIEN): a Vulkan driver, even for state observations. Without a GPU
#     that is Mesa's lavapipe, and Debian 12's Mesa 22 lavapipe fails ("Failed to find a supported
#     physical device"): Mesa >= 23 comes from bookworm-backports.
#   libero (robosuite / MuJoCo), metaworld (MuJoCo; images and videos only): offscreen OpenGL
#     through EGL (libegl1 + Mesa) or OSMesa.
#
# Installs only as root or with passwordless sudo, on Debian 12 (bookworm); otherwise prints one
# line naming the tests that will be skipped. Idempotent and quick when everything is present.
set -euo pipefail
extras=",${1:-},"
want_vulkan=0
want_gl=0
case "$extras" in *,embodied,*) want_vulkan=1 ;; esac
case "$extras" in *,libero,*|*,metaworld,*) want_gl=1 ;; esac
[ "$want_vulkan$want_gl" = "00" ] && exit 0

vulkan_ready() {
    # A GPU driver's ICD is enough; otherwise Mesa's lavapipe of version >= 23.
    if ls /usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json >/dev/null 2>&1; then
        return 0
    fi
    if command -v dpkg-query >/dev/null 2>&1; then
        local v
        v="$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)"
        [ -n "$v" ] && dpkg --compare-versions "$v" ge 23 \
            && [ "$(dpkg-query -W -f='${Status}' libvulkan1 2>/dev/null || true)" = "install ok installed" ]
        return
    fi
    command -v vulkaninfo >/dev/null 2>&1 && vulkaninfo --summary >/dev/null 2>&1
}

gl_ready() {
    local libs
    libs="$(ldconfig -p 2>/dev/null || true)"  # (no `| grep -q`: its early exit fails the pipe)
    [[ "$libs" == *libEGL_mesa.so.0* || "$libs" == *libOSMesa.so* ]]
}

pkgs=()
[ "$want_vulkan" = 1 ] && ! vulkan_ready && pkgs+=(mesa-vulkan-drivers libvulkan1 vulkan-tools)
[ "$want_gl" = 1 ] && ! gl_ready && pkgs+=(libegl1 libegl-mesa0 libgl1 libopengl0 libosmesa6)
[ ${#pkgs[@]} -eq 0 ] && exit 0

skipped="ManiSkill tests (tests/simulators/test_maniskill.py) need a Vulkan driver (Mesa >= 23 lavapipe on CPU)"
[ "$want_gl" = 1 ] && skipped="$skipped; LIBERO tests need EGL or OSMesa"

sudo=()
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        echo "[setup] not root and no passwordless sudo: cannot install ${pkgs[*]}; $skipped and will be skipped"
        exit 0
    fi
fi
codename=""
[ -r /etc/os-release ] && codename="$(. /etc/os-release && [ "${ID:-}" = debian ] && echo "${VERSION_CODENAME:-}")"
if [ "$codename" != bookworm ]; then
    echo "[setup] not Debian 12 (bookworm): install ${pkgs[*]} yourself (Mesa >= 23); until then $skipped and will be skipped"
    exit 0
fi

apt_get=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0)
if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "[setup] adding the Debian bookworm-backports apt suite (Mesa >= 23 for Vulkan on CPU)"
    printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" "Suites: bookworm-backports" \
        "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
        | "${sudo[@]}" tee /etc/apt/sources.list.d/rlinf-bookworm-backports.sources >/dev/null
fi
echo "[setup] apt-get install -t bookworm-backports ${pkgs[*]}"
"${apt_get[@]}" update >/dev/null
# Mesa packages all come from backports so their versions match (they depend on each other exactly).
"${apt_get[@]}" install --no-install-recommends -t bookworm-backports "${pkgs[@]}" >/dev/null
