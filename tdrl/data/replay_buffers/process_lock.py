"""A lock shared by threads and processes, released by the OS when its holder dies."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import tempfile
import threading
import time
from multiprocessing import util as mp_util
from typing import Any

__all__ = ["LockTimeoutError", "ProcessLock"]

_LOCK_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
_PREFIX = "tdrl-lock-"


def _pid_namespace() -> str:
    """The inode of this process's pid namespace ("0" where /proc does not say).

    Pids only mean something inside one namespace: a lock file made in another one (a
    container sharing ``/dev/shm``) is never judged by a pid of ours.
    """
    try:
        return re.sub(r"\D", "", os.readlink("/proc/self/ns/pid")) or "0"
    except OSError:
        return "0"


_NAMESPACE = _pid_namespace()
# tdrl-lock-<pid namespace>-<creator pid>-<random>
_NAME = re.compile(rf"^{_PREFIX}(\d+)-(\d+)-\w+$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


# a process sweeps the lock directory when it makes its first lock, then at most this often
_SWEEP_INTERVAL = 30.0
_LAST_SWEEP: float | None = None


def _remove_stale_lock_files(directory: str, force: bool = False) -> None:
    """Remove the lock files of this namespace whose creating process is gone.

    A process killed by SIGKILL runs no finalizer, so the (empty) files of its locks stay.
    A file is removed only when no process holds its record lock and its creator's pid names
    no process *after* the directory was listed: a process reusing that pid later makes files of its own under new names. Two
    processes cleaning at once race harmlessly (the loser's unlink finds nothing).
    A process sweeps at its first lock, then at most every ``_SWEEP_INTERVAL`` seconds
    (``force`` sweeps now).
    """
    global _LAST_SWEEP
    now = time.monotonic()
    if not force and _LAST_SWEEP is not None and now - _LAST_SWEEP < _SWEEP_INTERVAL:
        return
    _LAST_SWEEP = now
    try:
        names = os.listdir(directory)
    except OSError:
        return
    ours = f"{_PREFIX}{_NAMESPACE}-"
    own = f"{ours}{os.getpid()}-"
    for name in names:
        if not name.startswith(ours) or name.startswith(own):
            continue
        match = _NAME.match(name)
        if match is None or match.group(1) != _NAMESPACE:
            continue
        pid = int(match.group(2))
        path = os.path.join(directory, name)
        if path in _PER_PROCESS or _alive(pid) or _held_by_another(path):
            continue
        try:
            os.unlink(path)
        except OSError:  # already removed by another cleaner, or not ours to remove
            pass


def _held_by_another(path: str) -> bool:
    """Whether a process (a surviving child of the creator) holds the record lock of ``path``."""
    # Never called on a file this process has open: closing this descriptor would drop the
    # record locks this process holds on it.
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return True  # gone, or not ours: leave it
    try:
        query = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, query))[0]
    finally:
        os.close(fd)
    return kind != fcntl.F_UNLCK


class LockTimeoutError(TimeoutError):
    """A :class:`ProcessLock` could not be taken within its timeout.

    Examples:
        >>> issubclass(LockTimeoutError, TimeoutError)
        True
    """


# One descriptor and one thread lock per lock file and process, shared by every ProcessLock
# object naming that file: POSIX record locks belong to the process, and closing any descriptor
# of the file would drop them, so a descriptor is closed only with the file.
class _Handles:
    """What one process holds of one lock file.

    ``held``: a thread of this process holds the lock; ``os_held``: this process also holds
    the record lock. Both change under ``state_lock`` so that a fork never sees a lock held
    without its record lock once other processes may take it.
    """

    __slots__ = ("fd", "held", "os_held", "pid", "state_lock", "thread_lock")

    def __init__(self, path: str) -> None:
        self.pid = os.getpid()
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.thread_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.held = False
        self.os_held = False


_PER_PROCESS: dict[str, _Handles] = {}
_PER_PROCESS_GUARD = threading.Lock()

# Whether another process may take this process's locks: set for good when the process forks
# or is forked, or pickles or unpickles a lock (what spawned children receive). Until then the
# thread lock alone excludes the writers, and the record lock (a system call per acquire and
# per release) is not taken.
_SHARED = False


def _share_held_locks() -> None:
    """Take the record lock of every lock a thread of this process holds without it."""
    pid = os.getpid()
    for handles in _PER_PROCESS.values():
        if handles.pid != pid:
            continue
        with handles.state_lock:
            if handles.held and not handles.os_held:
                # no other process can hold it: none could reach the lock until now
                fcntl.lockf(handles.fd, fcntl.LOCK_EX)
                handles.os_held = True


def _share_with_other_processes() -> None:
    """From now on take the record locks too (another process may use these locks)."""
    global _SHARED
    if _SHARED:
        return
    with _PER_PROCESS_GUARD:
        _SHARED = True
        _share_held_locks()


def _before_fork() -> None:
    global _SHARED
    _PER_PROCESS_GUARD.acquire()  # held across the fork: the child gets a consistent table
    if not _SHARED:
        _SHARED = True
        _share_held_locks()


def _after_fork_in_parent() -> None:
    _PER_PROCESS_GUARD.release()


def _after_fork_in_child() -> None:
    global _PER_PROCESS_GUARD
    _PER_PROCESS_GUARD = threading.Lock()


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)


def _process_handles(path: str) -> _Handles:
    with _PER_PROCESS_GUARD:
        handles = _PER_PROCESS.get(path)
        if handles is None or handles.pid != os.getpid():  # first use here, or inherited by fork
            handles = _PER_PROCESS[path] = _Handles(path)
    return handles


def _unlink(path: str, creator: int) -> None:
    # Only the process that created the lock file removes it: a forked child dropping its copy
    # must not pull the file from under the processes still using it.
    if os.getpid() != creator:
        return
    handles = _PER_PROCESS.pop(path, None)
    if handles is not None and handles.pid == creator:
        os.close(handles.fd)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class ProcessLock:
    """Mutual exclusion across the threads and processes sharing a replay buffer.

    A POSIX record lock on a small file: the kernel drops it when the holding process exits,
    however it exits (a SIGKILL inside ``extend`` included), so the other writers go on instead
    of waiting forever. Inside one process a thread lock serializes the threads. The lock
    travels to forked, spawned and forkserver children (pickled as the file's path).

    Its file is named after the creating process, which removes it when the lock is collected
    or at exit; a new lock removes the files left by creators that died without doing so
    (SIGKILL).

    The record lock costs a system call per acquire and per release, so a process takes it
    only once another process may use its locks: from its first fork (in the parent and the
    child), or once it pickles or unpickles a lock; a lock held at that moment gets its
    record lock at once. Before that the thread lock alone is taken.

    Args:
        name: what the lock protects, used in error messages.
        timeout: seconds :meth:`acquire` waits before raising :class:`LockTimeoutError` naming
            the holder's pid; ``None`` waits for as long as the holder lives.

    Examples:
        >>> lock = ProcessLock("writer lock", timeout=1.0)
        >>> with lock:
        ...     lock.holder_pid() == os.getpid()
        True
        >>> lock.holder_pid() is None
        True
    """

    def __init__(self, name: str = "lock", timeout: float | None = None) -> None:
        directory = _LOCK_DIR or tempfile.gettempdir()
        _remove_stale_lock_files(directory)
        prefix = f"{_PREFIX}{_NAMESPACE}-{os.getpid()}-"
        fd, self._path = tempfile.mkstemp(prefix=prefix, dir=directory)
        os.close(fd)
        self.name = name
        self.timeout = timeout
        # a multiprocessing finalizer also runs when a multiprocessing child exits (through
        # os._exit, which skips atexit), so a buffer made in a worker leaves no file behind
        self._finalizer = mp_util.Finalize(
            self, _unlink, args=(self._path, os.getpid()), exitpriority=0
        )
        self._handles: _Handles | None = None  # this process's descriptor and thread lock

    @property
    def path(self) -> str:
        """The lock file's path."""
        return self._path

    def _here(self) -> _Handles:
        handles = self._handles
        if handles is None or handles.pid != os.getpid():
            handles = self._handles = _process_handles(self._path)
        return handles

    def acquire(self, timeout: float | None = -1) -> bool:
        """Take the lock; ``timeout=-1`` uses the lock's own timeout.

        Raises:
            LockTimeoutError: when the lock stays held for longer than the timeout; the message
                names the lock, its file and the pid holding it.
        """
        handles = self._here()
        if timeout == -1:
            timeout = self.timeout
        thread_lock = handles.thread_lock
        if not thread_lock.acquire(False):
            if not thread_lock.acquire(timeout=-1 if timeout is None else timeout):
                self._raise_timeout(timeout, os.getpid())
        with handles.state_lock:
            if not _SHARED:  # no other process can take it: the thread lock is enough
                handles.held = True
                return True
        try:
            try:  # the common case, uncontended: one system call
                fcntl.lockf(handles.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
                if timeout is None:
                    fcntl.lockf(handles.fd, fcntl.LOCK_EX)
                else:
                    self._lock_until(handles.fd, time.monotonic() + timeout, timeout)
        except BaseException:
            thread_lock.release()
            raise
        with handles.state_lock:
            handles.held = handles.os_held = True
        return True

    def _lock_until(self, fd: int, deadline: float, timeout: float) -> None:
        pause = 1e-5
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as err:
                if err.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
            if time.monotonic() >= deadline:
                self._raise_timeout(timeout, self.holder_pid())
            time.sleep(pause)
            pause = min(pause * 2, 5e-3)

    def _raise_timeout(self, timeout: float, holder: int | None) -> None:
        raise LockTimeoutError(
            f"could not take the {self.name} ({self._path}) within {timeout} s: "
            f"it is held by pid {holder}"
        )

    def release(self) -> None:
        """Give the lock back."""
        handles = self._here()
        with handles.state_lock:
            if not handles.held:
                raise RuntimeError(f"release of the {self.name}, which this process does not hold")
            handles.held = False
            if handles.os_held:
                handles.os_held = False
                fcntl.lockf(handles.fd, fcntl.LOCK_UN)
        handles.thread_lock.release()

    def holder_pid(self) -> int | None:
        """The pid of the process holding the lock, or ``None`` when it is free."""
        handles = self._here()
        if handles.held:
            return handles.pid
        fd = handles.fd
        # F_GETLK reports a conflicting lock's owner; a lock of our own process never conflicts.
        query = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind, _, _, _, pid = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, query))
        return None if kind == fcntl.F_UNLCK else pid

    def __enter__(self) -> ProcessLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __getstate__(self) -> dict[str, Any]:
        _share_with_other_processes()  # the copy may go to another process
        return {"path": self._path, "name": self.name, "timeout": self.timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _share_with_other_processes()
        self._path = state["path"]
        self.name = state["name"]
        self.timeout = state["timeout"]
        self._handles = None

    def __repr__(self) -> str:
        return f"ProcessLock(name={self.name!r}, timeout={self.timeout})"
