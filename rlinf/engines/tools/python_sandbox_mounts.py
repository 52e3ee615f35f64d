"""What the ``python`` tool's sandbox shows of the host: an allow-list of mounts.

The ``bwrap`` and ``unshare`` modes start from an empty root (a tmpfs) and mount into it, read-only,
only what the cell's interpreter needs:

- the system's programs and libraries: ``/usr`` and the ``/bin``, ``/sbin``, ``/lib*`` next to it
  (on a merged-/usr system those are symlinks, recreated as symlinks), and from ``/etc`` only the
  dynamic loader's ``ld.so.cache`` / ``ld.so.conf*`` and ``localtime``;
- the interpreter's own installation: ``sys.base_prefix`` and ``sys.base_exec_prefix`` (the
  standard library, ``lib-dynload``, ``libpython``);
- for a virtualenv, only its ``pyvenv.cfg``, the interpreter's symlink chain and its
  site-packages (``site.getsitepackages()``), never the folder around the venv: a venv that lives
  in the project shows the cell that venv's site-packages, not the project's sources or data.

Nothing else: no home folder, no ``/etc/shadow``, no ``/tmp``, ``/run`` or ``/var`` (so no Unix
socket there), no project checkout. ``sys.path`` entries added by ``.pth`` files outside these
(an editable install of rlinf puts the checkout there) do not exist inside. On top of the
allow-list, ``tools.python.hide_paths`` and rlinf's own package folder (with its checkout, when
rlinf runs from one) are covered by empty read-only tmpfs where they lie inside an allowed
folder (e.g. a checkout under ``/usr/local/src``); allowed paths beneath a hidden one are mounted
again on top of it, so a venv inside a hidden project still works.

:func:`mount_plan` turns the paths into operations that both modes apply in order:
``("bind", source, dest)``, ``("symlink", target, dest)``, ``("hide", dest)``, sorted so that a
folder is mounted before anything inside it.

Example:
    >>> plan = mount_plan(["/usr", "/usr/lib"], hide=["/usr/share"])
    >>> ("bind", "/usr", "/usr") in plan.ops, ("hide", "/usr/share") in plan.ops
    (True, True)
    >>> [op for op in plan.ops if op[-1] == "/usr/lib"]  # already inside /usr
    []
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass

__all__ = ["InterpreterLayout", "MountPlan", "interpreter_layout", "mount_plan", "project_dirs", "SYSTEM_PATHS"]

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
_LAYOUT_CODE = ("import json, site, sys, sysconfig\n"
                "print(json.dumps({'executable': sys.executable, 'prefix': sys.prefix, "
                "'base_prefix': sys.base_prefix, 'base_exec_prefix': sys.base_exec_prefix, "
                "'site_packages': site.getsitepackages() if hasattr(site, 'getsitepackages') else [], "
                "'stdlib': sysconfig.get_paths()['stdlib']}))")
_MAX_LINKS = 40


@dataclass(frozen=True)
class InterpreterLayout:
    """Where an interpreter's files are (as it reports them)."""

    executable: str
    prefix: str
    base_prefix: str
    base_exec_prefix: str
    site_packages: tuple[str, ...]
    stdlib: str

    def allowed(self) -> list[str]:
        """The paths the cell's interpreter needs, besides :data:`SYSTEM_PATHS`."""
        paths = [self.executable, self.base_prefix, self.base_exec_prefix]
        if os.path.realpath(self.prefix) != os.path.realpath(self.base_prefix):  # a virtualenv
            paths.append(os.path.join(self.prefix, "pyvenv.cfg"))
        paths += [p for p in self.site_packages if os.path.isdir(p)]
        return paths


def interpreter_layout(python: str, env: dict[str, str]) -> InterpreterLayout:
    """The layout of ``python`` (an absolute path): read in-process when it is this interpreter,
    else asked of it once (``OSError``/``ValueError`` when it cannot say)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable) and python == sys.executable:
        raw = {"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
               "base_exec_prefix": sys.base_exec_prefix, "site_packages": site.getsitepackages(),
               "stdlib": sysconfig.get_paths()["stdlib"]}
    else:
        out = subprocess.run([python, "-I", "-c", _LAYOUT_CODE], capture_output=True, text=True, env=env,
                             timeout=60, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["no output"])[-1]
            raise ValueError(f"it could not report its layout (exit {out.returncode}): {last}")
        raw = json.loads(out.stdout.strip().splitlines()[-1])
    raw["executable"] = python  # the path the sandbox runs: its symlink chain is what must exist
    raw["site_packages"] = tuple(raw["site_packages"])
    return InterpreterLayout(**raw)


def project_dirs() -> list[str]:
    """rlinf's package folder and, when rlinf runs from a checkout (not site-packages), the checkout."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    parent = os.path.dirname(package)
    if os.path.basename(parent) in ("site-packages", "dist-packages") or parent == "/":
        return [package]
    return [package, parent]


def _inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies beneath it."""
    return folder == "/" or path == folder or path.startswith(folder + "/")


def _resolve(path: str, links: dict[str, str]) -> str:
    """The real path of ``path``; every symlink met on the way goes into ``links`` (location -> target)."""
    for _ in range(_MAX_LINKS):
        parts = [p for p in os.path.normpath(path).split("/") if p]
        current = "/"
        for i, part in enumerate(parts):
            step = os.path.join(current, part)
            if os.path.islink(step):
                target = os.readlink(step)
                links[step] = target
                path = os.path.join(os.path.normpath(os.path.join(current, target)), *parts[i + 1:])
                break
            current = step
        else:
            return current
    raise OSError(40, f"too many levels of symbolic links: {path}")


@dataclass(frozen=True)
class MountPlan:
    """The sandbox's file system: ``ops`` in the order to apply them; ``binds`` the real folders
    and files mounted (read-only)."""

    ops: tuple[tuple[str, ...], ...]
    binds: tuple[str, ...]

    def hides(self, path: str) -> bool:
        """Whether ``path`` (real) is out of the cell's reach under this plan."""
        covering = [op for op in self.ops if op[0] in ("bind", "hide") and _inside(path, op[-1])]
        if not covering:
            return True
        deepest = max(covering, key=lambda op: (op[-1].count("/"), op[0] == "hide"))
        return deepest[0] == "hide"


def mount_plan(paths: list[str], hide: list[str] = ()) -> MountPlan:
    """The operations that show ``paths`` (those that exist, with the symlinks leading to them)
    and cover ``hide`` where it lies inside a shown folder; see the module docstring."""
    links: dict[str, str] = {}
    real = set()
    for path in paths:
        if os.path.lexists(path):
            real.add(_resolve(os.path.abspath(path), links))
    hidden = {os.path.realpath(h) for h in hide}
    hidden = {h for h in hidden if any(_inside(h, r) for r in real)}

    def needed(location: str) -> bool:  # not already shown by a bind above it (with no hide in between)
        for folder in real:
            if folder != location and _inside(location, folder):
                if not any(_inside(h, folder) and _inside(location, h) and h != location for h in hidden):
                    return False
        return True
    binds = sorted(r for r in real if needed(r))
    ops = [("bind", r, r) for r in binds]
    ops += [("symlink", target, where) for where, target in links.items() if needed(where) and where not in real]
    ops += [("hide", h) for h in hidden]
    order = {"bind": 0, "symlink": 0, "hide": 1}  # at one depth a hide goes last: it wins
    ops.sort(key=lambda op: (op[-1].count("/"), order[op[0]], op[-1]))
    return MountPlan(tuple(ops), tuple(binds))
