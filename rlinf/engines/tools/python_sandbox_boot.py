"""The program the Python tool runs inside its sandbox: standard library only, never imported by rlinf.

``python -I python_sandbox_boot.py JOB`` reads the job (a marshal'ed dict written by
:mod:`rlinf.engines.tools.python_sandbox`: the cell, earlier cells to replay, limits, mode) and then,
in this order:

1. ``unshare`` mode only (it runs as root of a fresh user + mount + PID namespace, made by
   util-linux ``unshare``): mount a tmpfs as the new root (at the job's ``root`` folder), apply
   the job's ``mounts`` in order (the allow-list of :mod:`rlinf.engines.tools.python_sandbox_mounts`:
   recursive binds, symlinks, empty tmpfs over hidden paths), bind ``/proc``, make every mount
   there read-only in one recursive ``mount_setattr`` (one remount per mount on kernels before
   5.12), mount a size-capped tmpfs on the working directory, build a minimal ``/dev`` (null,
   zero, full, random, urandom, tty and a size-capped ``shm``, bind-mounted as bubblewrap does,
   so no disk or GPU node is reachable), ``pivot_root`` into the new root and detach the old one
   (nothing else of the host stays in the namespace), then drop every capability (bounding set
   included) and set ``no_new_privs``: the cell cannot undo any of it. Under ``bwrap``
   bubblewrap has done all this.
2. As PID 1 of its namespace (``unshare -p -f`` execs us as PID 1) it forks once: PID 1 never
   gets signals it has no handler for (SIGXCPU included), so the cell runs in the child, and
   PID 1 waits and passes the child's end on as an exit code (128 + signal, as bwrap does).
3. rlimits: address space, CPU seconds (soft; the hard limit one second later sends SIGKILL),
   file size, no core files and, when the job says so, the process count. They are set here,
   after the interpreter started, so bwrap/unshare and the interpreter's start-up are not
   limited, and inside the new user namespace, where RLIMIT_NPROC counts this sandbox's
   processes only (kernel >= 5.14 keeps the count per user namespace).
4. Replays the earlier cells (``keep_state``) with fds 1 and 2 on /dev/null, then runs the cell
   like a notebook cell: the value of a last bare expression is printed; a traceback shows the
   cell's frames only; after a MemoryError a line names the memory limit.
"""

import _ast  # not ast, json, linecache or traceback: they import re/enum/tokenize, tens of ms at start-up
import builtins
import marshal
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
MNT_DETACH = 2
# pivot_root has no libc wrapper and no common syscall number
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "ppc64": 203, "s390x": 217,
              "i686": 217, "i386": 217, "armv7l": 218, "armv8l": 218}
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
_LOCKABLE = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
             "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
SETUP_FAILED = 125  # exit code when the sandbox could not be set up (the tool says so)


class _Libc:
    """The few Linux calls the ``unshare`` mode needs, through ctypes."""

    def __init__(self):
        # lazy: the sandbox boot imports only what its mode needs; ctypes only for unshare
        import ctypes
        self.ctypes = ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long

    def check(self, result, what):
        if result != 0:
            errno = self.ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    def mount(self, source, target, fstype, flags, data=None):
        def enc(text):
            return text.encode() if isinstance(text, str) else text
        self.check(self.libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")

    def read_only_tree(self, root, method):
        """Every mount at or below ``root`` read-only: recursive mount_setattr (Linux 5.12+),
        else one remount each."""
        ctypes = self.ctypes

        class MountAttr(ctypes.Structure):
            _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                        ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]
        attr = MountAttr(1, 0, 0, 0)  # MOUNT_ATTR_RDONLY
        # mount_setattr is syscall 442 on every architecture; AT_FDCWD, AT_RECURSIVE
        if method != "remount" and \
                self.libc.syscall(442, -100, root.encode(), 0x8000, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
            return
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
        for fields in mounts:
            target = fields[4].encode().decode("unicode_escape")  # \040 etc.
            if target != root and not target.startswith(root + "/"):
                continue
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY
            for opt in fields[5].split(","):
                flags |= _LOCKABLE.get(opt, 0)
            try:
                self.mount(None, target, None, flags)
            except OSError as exc:
                if exc.errno not in (22, 2):  # EINVAL/ENOENT: shadowed, no longer a mount point
                    raise

    def minimal_dev(self, dev, shm_bytes):
        """Build a small /dev at ``dev`` from the host's nodes."""
        self.mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755")
        for name in ("null", "zero", "full", "random", "urandom", "tty"):
            if os.path.exists("/dev/" + name):
                open(os.path.join(dev, name), "w").close()
                self.mount("/dev/" + name, os.path.join(dev, name), None, MS_BIND)
        os.mkdir(os.path.join(dev, "shm"))
        self.mount("tmpfs", os.path.join(dev, "shm"), "tmpfs", MS_NOSUID | MS_NODEV,
                   f"size={shm_bytes},mode=1777")
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
            os.symlink(target, os.path.join(dev, name))

    def enter(self, root):
        """Make ``root`` the root of this mount namespace and detach the old one."""
        number = PIVOT_ROOT.get(os.uname().machine)
        if number is None:
            raise OSError(38, f"pivot_root: no syscall number known for {os.uname().machine}")
        os.chdir(root)
        self.check(self.libc.syscall(number, b".", b"."), "pivot_root")
        self.check(self.libc.umount2(b".", MNT_DETACH), "detach the old root")
        os.chdir("/")

    def drop_privileges(self):
        """No capability left (bounding set included) and no_new_privs; verified."""
        ctypes = self.ctypes
        for cap in range(64):
            if self.libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # PR_CAPBSET_DROP
                self.check(-1, f"drop capability {cap}")
        self.libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]
        self.check(self.libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()), "capset")
        self.check(self.libc.prctl(38, 1, 0, 0, 0), "no_new_privs")
        with open("/proc/self/status", encoding="utf-8") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        if int(status["CapEff"], 16) or int(status["CapBnd"], 16):
            raise OSError(1, "capabilities still held after dropping them")


def private_mounts(job):
    """The ``unshare`` mode's file system (see the module docstring, step 1)."""
    libc = _Libc()
    root, work = job["root"], job["work"]
    libc.mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for op in job["mounts"]:
        dest = root + op[-1]
        if op[0] == "hide":
            libc.mount("tmpfs", dest, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
        elif op[0] == "symlink":
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.symlink(op[1], dest)
        elif os.path.isdir(op[1]):
            os.makedirs(dest, exist_ok=True)
            libc.mount(op[1], dest, None, MS_BIND | MS_REC)
        else:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            open(dest, "a").close()
            libc.mount(op[1], dest, None, MS_BIND | MS_REC)
    for name in ("proc", "dev"):
        os.makedirs(os.path.join(root, name), exist_ok=True)
    libc.mount("/proc", root + "/proc", None, MS_BIND | MS_REC)
    os.makedirs(root + work)
    libc.read_only_tree(root, job["ro_method"])
    if not os.statvfs(root).f_flag & os.ST_RDONLY:
        raise OSError(30, "the new root is still writable")
    libc.mount("tmpfs", root + work, "tmpfs", MS_NOSUID | MS_NODEV, f"size={job['dir_bytes']},mode=700")
    libc.minimal_dev(root + "/dev", job["dir_bytes"])
    libc.enter(root)
    libc.drop_privileges()
    sys.path_importer_cache.clear()  # folders read before the switch are looked at again


def set_limits(limits):
    """Soft = hard for everything but CPU (hard one second later, SIGKILL); never above the
    hard limits this process already has."""
    def cap(kind, soft, hard=None):
        _, old_hard = resource.getrlimit(kind)
        hard = soft if hard is None else hard
        if old_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, old_hard), min(hard, old_hard)
        resource.setrlimit(kind, (soft, hard))
    cap(resource.RLIMIT_AS, limits["memory_bytes"])
    cap(resource.RLIMIT_CPU, limits["cpu_s"], limits["cpu_s"] + 1)
    cap(resource.RLIMIT_FSIZE, limits["file_bytes"])
    cap(resource.RLIMIT_CORE, 0)
    if limits["processes"]:
        cap(resource.RLIMIT_NPROC, limits["processes"])


def wait_as_pid1():
    """Fork; the child returns and runs the cell, PID 1 passes its end on as an exit code."""
    child = os.fork()
    if child == 0:
        return
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            break
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def _user_frames(tb):
    """Skip this file's frames at the top of a traceback."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


SOURCES = {}  # cell file name -> source, for the lines a traceback shows


def run_cell(code, filename, namespace):
    """Run ``code`` like a notebook cell (a last bare expression's value is printed)."""
    SOURCES[filename] = code
    tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        value = eval(compile(last, filename, "eval"), namespace)  # trust-reviewed: the cell's own code
        if value is not None:
            print(repr(value))


def report(exc, memory_bytes):
    """Print ``exc`` for the model; return the exit code."""
    sys.stdout.flush()
    # lazy: tens of ms at every cell's start-up (see the imports above); only on an error
    import linecache
    import traceback
    for filename, code in SOURCES.items():
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None or code == 0:
            return 0
        if isinstance(code, int):
            return code if 0 < code < SETUP_FAILED else 1
        print(code, file=sys.stderr)
        return 1
    if isinstance(exc, SyntaxError):
        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
        return 1
    traceback.print_exception(type(exc), exc, _user_frames(exc.__traceback__))
    if isinstance(exc, MemoryError):
        print(f"[memory limit {memory_bytes >> 20} MB reached: MemoryError]", file=sys.stderr)
    return 1


def replay(cells, namespace):
    """Run the earlier cells again with their output on /dev/null."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    failed = []
    try:
        for i, cell in enumerate(cells, 1):
            try:
                run_cell(cell, f"<cell {i}>", namespace)
            except BaseException as exc:  # noqa: BLE001 - reported after the output is back
                failed.append(f"[keep_state: earlier cell {i} failed on replay: {type(exc).__name__}: {exc}]")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (null, *saved):
            os.close(fd)
    for line in failed:
        print(line, file=sys.stderr)


def main():
    with open(sys.argv[1], "rb") as f:
        job = marshal.load(f)
    try:
        if job["mode"] == "unshare":
            private_mounts(job)
        os.chdir(job["work"])
        if os.getpid() == 1:
            wait_as_pid1()
        set_limits(job["limits"])
    except Exception as exc:  # noqa: BLE001 - one line for the tool, never the cell's fault
        print(f"[sandbox setup failed: {type(exc).__name__}: {exc}]", file=sys.stderr)
        sys.exit(SETUP_FAILED)
    sys.path.insert(0, job["work"])
    sys.argv = [""]
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    if job["replay"]:
        replay(job["replay"], namespace)
    try:
        run_cell(job["code"], "<cell>", namespace)
    except BaseException as exc:  # noqa: BLE001 - the cell's error is the model's output
        if isinstance(exc, MemoryError):
            namespace.clear()  # free what the cell holds, so the traceback can be printed
        sys.exit(report(exc, job["limits"]["memory_bytes"]))


if __name__ == "__main__":
    main()
