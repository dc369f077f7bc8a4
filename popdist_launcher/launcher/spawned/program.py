"""The instance's program as processes: started in a process group of its own (forked and
executed here, or posix_spawn from a wrapper forked by the launcher), and at the end everything
below the wrapper killed. Standard library C modules only, as the wrapper (instance.py)."""
import _signal
import os
import time

SIGKILL = _signal.SIGKILL
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


def prctl():
    """libc's prctl(), through the C module behind ctypes: the ctypes package's own import
    would cost every wrapper ~5 ms of CPU (measured), this ~1 ms."""
    import _ctypes

    class CInt(_ctypes._SimpleCData):
        _type_ = "i"

    class Prctl(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = CInt

    class Libc:  # what CFuncPtr((name, library)) reads: the dlopen handle
        _handle = _ctypes.dlopen(None, os.RTLD_NOW)

    return Prctl(("prctl", Libc))


def killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def spawn(argv, env, with_stdin: bool, stack_w: int, prctl):
    """Start the program in a process group of its own with stdin (a pipe, or /dev/null),
    stdout and stderr pipes; raises OSError as execve did. With ``prctl`` the program is forked
    here and dies with this wrapper (PR_SET_PDEATHSIG). Without (a wrapper forked from the
    launcher, as large as it: a fork would copy its page tables) it is started by posix_spawn,
    and the launcher, on the same host, kills its group if this wrapper dies."""
    in_r, in_w = os.pipe() if with_stdin else (os.open(os.devnull, os.O_RDONLY), None)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if prctl is None:
        os.set_inheritable(stack_w, True)
        actions = [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                   (os.POSIX_SPAWN_DUP2, err_w, 2)]
        try:
            spawn = os.posix_spawn if os.sep in argv[0] else os.posix_spawnp
            pid = spawn(argv[0], argv, env, file_actions=actions, setpgroup=0)
        except OSError:
            for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
                if fd is not None:
                    os.close(fd)
            raise
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        return pid, in_w, out_r, err_r
    fail_r, fail_w = os.pipe()  # close-on-exec: end of file means the exec succeeded
    me = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
            if os.getppid() != me:  # the wrapper died before the line above
                os._exit(1)
            for fd, target in ((in_r, 0), (out_w, 1), (err_w, 2)):
                os.dup2(fd, target)
            os.set_inheritable(stack_w, True)
            keep = sorted({0, 1, 2, stack_w, fail_w})
            for low, high in zip(keep, keep[1:] + [os.sysconf("SC_OPEN_MAX")]):
                os.closerange(low + 1, high)
            if os.sep in argv[0]:
                os.execve(argv[0], argv, env)
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            os.write(fail_w, f"{exc.errno}".encode())
        finally:
            os._exit(127)
    os.close(fail_w)
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    failure = b""
    while True:
        chunk = os.read(fail_r, 64)
        if not chunk:
            break
        failure += chunk
    os.close(fail_r)
    if failure:
        os.waitpid(pid, 0)
        for fd in (in_w, out_r, err_r):
            if fd is not None:
                os.close(fd)
        code = int(failure)
        raise (PermissionError if code in (1, 13) else OSError)(code, os.strerror(code))
    return pid, in_w, out_r, err_r


def kill_descendants(timeout: float = 5.0) -> None:
    """SIGKILL every process below this one. As a child subreaper it inherits the orphans of
    what it kills, so repeat until it has no children left."""
    me = os.getpid()
    own_group = os.getpgid(0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = _children(me)
        if not kids:
            return
        for kid in kids:
            try:
                group = os.getpgid(kid)
                if group != own_group:
                    os.killpg(group, SIGKILL)
                os.kill(kid, SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break


def _children(pid: int) -> "list[int]":
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        pass
    kids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    return kids
