"""Confine a worker process before it runs student code: namespaces, Landlock, no new privileges.

Namespaces (`isolate`, then `private_proc`): the worker runs in new user, network, PID, mount, IPC
and UTS namespaces. Its network namespace has only a loopback interface that is down, so no TCP or
UDP connection, bind or name lookup reaches anything, loopback included; its PID namespace holds
only the worker and what it starts, and a fresh /proc shows only those (no other process's command
line or environment). Where the kernel refuses them (user namespaces disabled, a seccomp-filtered
container) `isolate` returns a reason; the engine notes it on every grade, or refuses to grade under
`sandbox="require"`.

Landlock (Linux >= 5.13) lets an unprivileged process drop access to every path it is not granted,
for itself and its children, irreversibly; it applies to root too. The worker may read the Python
installation, system libraries, /proc, /dev, /sys, the course package sources and data, and the
submission's folder, and may write only its own temporary folder (plus the course cache). It cannot
read `autograder/` (the hidden checks), `solutions/` or `.git`, and from ABI 6 on it cannot signal or
reach (abstract sockets) processes outside its sandbox, such as the judge. ptrace and /proc/<pid>/mem
of outside processes are denied by Landlock itself.

Where Landlock is missing (old kernel, seccomp-filtered container) `restrict_filesystem` returns a
reason instead of raising; the engine records it as a note on every grade, like a missing namespace.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# LANDLOCK_ACCESS_FS_* bits
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_AND_REMOVE = sum(1 << b for b in range(4, 13))  # remove_dir ... make_sym
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = READ_FILE | READ_DIR | EXECUTE
READ_WRITE = READ | WRITE_FILE | _MAKE_AND_REMOVE | REFER | TRUNCATE


_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


@dataclass
class SandboxPolicy:
    """Paths the worker may read and write; everything else is denied. `deny` wins over a grant that
    contains it (the grant is split into the siblings of the denied path)."""

    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)


def default_policy(course_root: Path, work_dir: Path, submission_dir: Path, checks_file: Path,
                   extra_read: list[str] | None = None, extra_write: list[str] | None = None) -> SandboxPolicy:
    """The worker's view: Python + system + course sources/data + submission folder (read), own tmp."""
    read = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin",
            "/etc", "/opt", "/proc", "/sys", "/dev"}
    read.update(p for p in sys.path if p and os.path.isabs(p))
    import bertcourse

    package = Path(bertcourse.__file__).resolve().parent  # the course package, wherever it is installed
    read.update({str(package), str(course_root / "src"), str(course_root / "course.yml"), str(submission_dir)})
    for variable in ("BERTCOURSE_DATA",):
        if os.environ.get(variable):
            read.add(os.path.abspath(os.environ[variable]))
    read.update(extra_read or [])
    write = {str(work_dir), "/dev/null", "/dev/shm", "/dev/ptmx", "/dev/pts"}  # ptys: IPython's `!cmd`
    write.update(extra_write or [])
    deny = {str(course_root / "autograder"), str(course_root / "solutions"), str(course_root / ".git"),
            str(checks_file)}
    if not any(_inside(os.path.realpath(p), os.path.realpath(checks_file.parent)) for p in (sys.prefix, work_dir)):
        deny.add(str(checks_file.parent))  # helpers next to the check module stay hidden too
    return SandboxPolicy(sorted(read), sorted(write), sorted(deny))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _expand(path: str, deny: list[str]) -> list[str]:
    """`path` itself, or (when it contains a denied path) its children that are not denied."""
    path = os.path.realpath(path)
    if any(_inside(path, d) for d in deny):
        return []
    if not any(_inside(d, path) for d in deny):
        return [path]
    try:
        children = sorted(os.listdir(path))
    except OSError:
        return []
    result: list[str] = []
    for child in children:
        result.extend(_expand(os.path.join(path, child), deny))
    return result


def restrict_filesystem(policy: SandboxPolicy) -> str | None:
    """Apply `policy` to this process for good. Returns None on success, else why it is unavailable."""
    abi = landlock_abi()
    if abi < 1:
        return "Landlock is not available on this kernel"
    handled = READ_WRITE | (IOCTL_DEV if abi >= 5 else 0)
    if abi < 2:
        handled &= ~REFER
    if abi < 3:
        handled &= ~TRUNCATE
    attr = _RulesetAttr(handled, 0, (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(ctypes.c_uint64) * (3 if abi >= 6 else 1)
    libc = _libc()
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"Landlock ruleset could not be created (errno {ctypes.get_errno()})"
    deny = [os.path.realpath(d) for d in policy.deny]
    try:
        for paths, access in ((policy.read, READ | (IOCTL_DEV if abi >= 5 else 0)), (policy.write, READ_WRITE)):
            for granted in paths:
                for path in _expand(granted, deny):
                    _add_rule(libc, ruleset, path, access & handled)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"prctl(PR_SET_NO_NEW_PRIVS) failed (errno {ctypes.get_errno()})"
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return f"Landlock restrict_self failed (errno {ctypes.get_errno()})"
    finally:
        os.close(ruleset)
    return None


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path that does not exist needs no rule
    try:
        if not os.path.isdir(path):
            access &= _FILE_ONLY
        rule = _PathBeneathAttr(access, fd)
        libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                     ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(fd)


def isolate() -> str | None:
    """Move this (single-threaded) process into new user/network/PID/mount/IPC/UTS namespaces.

    The PID namespace applies to the children only: the caller must fork, and the child (PID 1 there)
    must call `private_proc` before it runs anything else. Without user namespaces, root (with
    CAP_SYS_ADMIN) still gets the rest. Returns None on success, else why isolation is unavailable."""
    if not sys.platform.startswith("linux"):
        return "network and process isolation needs Linux namespaces"
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWUTS
    if libc.unshare(ctypes.c_int(flags | _CLONE_NEWUSER)) == 0:
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as handle:
                    handle.write(text)
        except OSError as exc:
            return f"the user namespace could not be set up ({exc})"
        return None
    user_errno = ctypes.get_errno()
    if libc.unshare(ctypes.c_int(flags)) == 0:
        return None
    return (f"the kernel refused new namespaces (user namespaces: {os.strerror(user_errno)}; "
            f"without them: {os.strerror(ctypes.get_errno())}), so the network and other processes were reachable")


# Where the machine's services keep their named Unix sockets (PostgreSQL, Docker, nscd, systemd): hidden
# behind an empty tmpfs, since a network namespace does not cover named sockets.
SOCKET_FOLDERS = ("/run", "/var/run")


def private_proc(keep: list[str] | None = None) -> str | None:
    """In the first process of a new PID namespace: mount a /proc that shows only this namespace, and
    empty folders over SOCKET_FOLDERS (unless one holds a path in `keep` the worker needs)."""
    libc = _libc()
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if libc.mount(b"none", b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None) != 0:
        return f"the mount namespace could not be made private ({os.strerror(ctypes.get_errno())})"
    if libc.mount(b"proc", b"/proc", b"proc", flags, None) != 0:
        return (f"a private /proc could not be mounted ({os.strerror(ctypes.get_errno())}), "
                "so other processes were visible")
    kept = [os.path.realpath(p) for p in keep or []]
    for folder in sorted({os.path.realpath(f) for f in SOCKET_FOLDERS if os.path.isdir(f)}):
        if any(_inside(path, folder) or _inside(folder, path) for path in kept):
            continue
        if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", flags, b"size=64k") != 0:
            return f"{folder} could not be hidden ({os.strerror(ctypes.get_errno())}), so its sockets were reachable"
    return None


# seccomp: a classic-BPF filter that makes socket(AF_UNIX, ...) fail with EPERM. A network namespace
# does not cover named Unix sockets (a path anywhere, e.g. /tmp/.X11-unix or a PostgreSQL built to use
# /tmp), and Landlock does not govern connect(); student code has no use for a new Unix socket (the
# worker's own channel, socketpair() and pipes are unaffected).
_SECCOMP_SET_MODE_FILTER, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 1, 22, 2
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
_AF_UNIX, _EPERM = 1, 1
_X32_SYSCALL_BIT = 0x40000000
# audit architecture -> the number of socket(2) there
_SOCKET_SYSCALL = {0xC000003E: 41, 0xC00000B7: 198}  # x86_64, aarch64
_MACHINE_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _unix_socket_filter(arch: int) -> list[tuple[int, int, int, int]]:
    """The BPF program: on another architecture than ours, or an x32 call, refuse everything (a 32-bit
    call could otherwise bypass the numbers below); socket(AF_UNIX, ...) -> EPERM; all else allowed."""
    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    deny = _SECCOMP_RET_ERRNO | _EPERM
    return [
        (ld_w_abs, 0, 0, 4),                        # seccomp_data.arch
        (jeq_k, 1, 0, arch),
        (ret_k, 0, 0, deny),
        (ld_w_abs, 0, 0, 0),                        # seccomp_data.nr
        (jge_k, 0, 1, _X32_SYSCALL_BIT),
        (ret_k, 0, 0, deny),
        (jeq_k, 0, 3, _SOCKET_SYSCALL[arch]),
        (ld_w_abs, 0, 0, 16),                       # seccomp_data.args[0], low 32 bits: the family
        (jeq_k, 0, 1, _AF_UNIX),
        (ret_k, 0, 0, deny),
        (ret_k, 0, 0, _SECCOMP_RET_ALLOW),
    ]


def forbid_unix_sockets() -> str | None:
    """Install the seccomp filter above for this process and its children, for good (after
    PR_SET_NO_NEW_PRIVS, which `restrict_filesystem` sets). None on success, else why not."""
    arch = _MACHINE_ARCH.get(os.uname().machine) if sys.platform.startswith("linux") else None
    if arch is None:
        return "named Unix sockets stay reachable: no seccomp filter for this platform"
    program = _unix_socket_filter(arch)
    filters = (_SockFilter * len(program))(*[_SockFilter(*op) for op in program])
    fprog = _SockFprog(len(program), filters)
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS) failed (errno {ctypes.get_errno()})"
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return (f"the seccomp filter could not be installed (errno {ctypes.get_errno()}), "
                "so named Unix sockets were reachable")
    return None


def limit_resources(memory_limit_mb: int, max_output_bytes: int) -> None:
    """Backstops the engine's RSS watchdog: a data-segment cap (allocations past it fail with
    MemoryError instead of taking the machine down) and a file size cap for runaway output."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead
    try:
        current = _vm_data_bytes()
        cap = current + 2 * memory_limit_mb * 1024 * 1024  # the watchdog stops RSS at the limit itself
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_output_bytes, max_output_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass


def _vm_data_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
_EXTRA_TASKS = 512  # threads and processes a worker may add (bounds a fork bomb)


def drop_privileges() -> str | None:
    """Give up every capability for good (a grader running as root keeps no root powers in the worker:
    no permission bypass, and RLIMIT_NPROC applies), then cap the number of tasks. None on success."""
    import resource

    if not sys.platform.startswith("linux"):
        return "capabilities are a Linux feature"
    libc = _libc()
    for capability in range(64):
        libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)  # EINVAL past the last capability: ignored
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        return f"capabilities could not be dropped (errno {ctypes.get_errno()})"
    try:
        tasks = _tasks_of_uid(os.getuid()) + _EXTRA_TASKS
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
    except (ValueError, OSError) as exc:
        return f"RLIMIT_NPROC could not be set ({exc})"
    return None


def _tasks_of_uid(uid: int) -> int:
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            total += int(fields.get("Threads", "1").strip())
    return total
