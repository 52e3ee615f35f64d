#!/usr/bin/env bash
# A headless browser for web-agent environments: Debian's chromium packages driven from Python by
# Playwright (the `playwright` pip package, pointed at the system binary with `executable_path`;
# Playwright's own browser download is never used).
#
#   bash scripts/setup_system_browser.sh              # apt: chromium-headless-shell, chromium, fonts-liberation; pip: playwright
#   RLINF_BROWSER_PKGS=chromium-headless-shell bash scripts/setup_system_browser.sh   # lean: no full browser
#   RLINF_BROWSER_SELENIUM=1 bash scripts/setup_system_browser.sh  # also chromium-driver + selenium
#
# Binaries (use these, not the /usr/bin wrappers, which are sh scripts adding flags from /etc/chromium.d):
#   /usr/lib/chromium/chromium-headless-shell   the "old headless" build, what Playwright itself uses for
#                                               headless; ~15 MiB PSS per extra page vs ~60 for the full one
#   /usr/lib/chromium/chromium                  the full browser (new headless mode)
#   e.g. pw.chromium.launch(executable_path="/usr/lib/chromium/chromium-headless-shell", headless=True)
#
# Idempotent: exits 0 at once when the packages and the Python driver are present. Installs with apt
# only as root or with passwordless sudo, on Debian/Ubuntu; otherwise prints what to install and exits 0.
# pip installs into $RLINF_VENV (default: the repo's .venv) with constraints/cpu.txt on CPU-only
# machines, so torch is never replaced.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${RLINF_VENV:-$root/.venv}"
# fonts-liberation: Arial/Times/Courier-metric fonts, so real sites lay out as intended (fontconfig
# alone brings only DejaVu).
read -r -a apt_pkgs <<< "${RLINF_BROWSER_PKGS:-chromium-headless-shell chromium fonts-liberation}"
py_pkgs=("${RLINF_PLAYWRIGHT_SPEC:-playwright==1.65.2}")
if [ "${RLINF_BROWSER_SELENIUM:-0}" = 1 ]; then
    apt_pkgs+=(chromium-driver)
    py_pkgs+=("${RLINF_SELENIUM_SPEC:-selenium}")
fi
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1  # never fetch Playwright's bundled browsers

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]; }

missing_apt=()
if command -v dpkg-query >/dev/null 2>&1; then
    for p in "${apt_pkgs[@]}"; do installed "$p" || missing_apt+=("$p"); done
else
    echo "[browser] no dpkg here: install ${apt_pkgs[*]} (Debian package names) yourself"
fi

py_ok() {
    [ -x "$venv/bin/python" ] || return 1
    "$venv/bin/python" - "${py_pkgs[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for spec in sys.argv[1:]:
    name, _, want = spec.partition("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if want and have != want:
        sys.exit(1)
EOF
}

need_py=1
py_ok && need_py=0
if [ ${#missing_apt[@]} -eq 0 ] && [ "$need_py" = 0 ]; then
    exit 0
fi

if [ ${#missing_apt[@]} -gt 0 ]; then
    sudo=()
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            echo "[browser] not root and no passwordless sudo: cannot apt-get install ${missing_apt[*]};" \
                 "web-environment tests will be skipped"
            missing_apt=()
        fi
    fi
    if [ ${#missing_apt[@]} -gt 0 ]; then
        apt_get=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0)
        echo "[browser] apt-get install --no-install-recommends ${missing_apt[*]}"
        "${apt_get[@]}" update >/dev/null
        "${apt_get[@]}" install --no-install-recommends "${missing_apt[@]}" >/dev/null
    fi
fi

if [ "$need_py" = 1 ]; then
    if [ ! -x "$venv/bin/python" ]; then
        echo "[browser] no virtualenv at $venv (run scripts/setup_env.sh first)"
        exit 1
    fi
    constraints=()
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        constraints=(-c constraints/cpu.txt)  # keep the CPU build of torch
    fi
    echo "[browser] pip install ${py_pkgs[*]} into $venv"
    "$venv/bin/python" -m pip --disable-pip-version-check -q install "${constraints[@]}" "${py_pkgs[@]}"
fi

# Smoke test: launch the lightest installed binary through Playwright and read a page title.
exe=""
for cand in /usr/lib/chromium/chromium-headless-shell /usr/lib/chromium/chromium; do
    [ -x "$cand" ] && { exe="$cand"; break; }
done
if [ -n "$exe" ]; then
    "$venv/bin/python" - "$exe" <<'EOF'
import sys
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    b = p.chromium.launch(executable_path=sys.argv[1], headless=True)
    page = b.new_page()
    page.set_content("<title>ok</title><button>x</button>")
    assert page.title() == "ok", page.title()
    print(f"[browser] ok: Playwright drives {sys.argv[1]} (Chromium {b.version})")
    b.close()
EOF
fi
