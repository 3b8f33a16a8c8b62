"""Where cells run: a local process pool (default) or Ray tasks (``--ray``).

Both executors take jobs ``submit(key, fn, *args)`` (``fn`` a module-level function, so that it
pickles by reference) and hand back ``(key, result, error)`` as jobs finish (:meth:`next_done`).
Large inputs shared by many jobs (the workloads' base instances) are sent once with
:meth:`share`, whose handle is passed as an argument.

Worker deaths are retried, then reported, never lost:

- :class:`LocalPool` (``concurrent.futures.ProcessPoolExecutor``, SIGINT ignored in the workers,
  which end with their driver however it ends: :func:`die_with_parent`). On Linux the workers are
  forked from the driver while it runs no other thread (:meth:`LocalPool.start`, called before a
  progress display starts its thread): they begin with the modules the driver has imported
  instead of importing optsched again (about 0.3 s of CPU per worker), and receive the shared
  objects without pickling. Elsewhere, or when another thread runs (a pool made again after a
  worker died, with the progress display running), they are spawned fresh. When a
  worker process dies the pool breaks; the jobs that were in flight are
  submitted again to a new pool, each at most ``retries`` times, after which the job's error is
  ``worker process died``. At most ``workers`` jobs are in flight at once, so a break charges a
  retry only to jobs that were running.
- :class:`RayExecutor`: each job is a Ray task with ``num_cpus=1`` (Ray's scheduler places it)
  and ``max_retries=retries`` (Ray re-runs a task whose worker or node died); an error that Ray
  reports after its retries becomes the job's error. Without an address a local cluster is started
  for the run, bound to 127.0.0.1 only, and stopped at the end.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from .store import MissingDependency

__all__ = ["LocalPool", "RayExecutor", "SharedRef", "die_with_parent", "require_ray", "start_method"]

Done = tuple[str, Any, "str | None"]


@dataclass(frozen=True)
class SharedRef:
    """Handle of an object sent once to every pool worker."""

    index: int


#: In a pool worker: the shared objects (set by the initializer).
_worker_shared: list[Any] = []


def die_with_parent(parent: int) -> None:
    """End this process (SIGKILL) when its parent process ``parent`` ends, even by ``kill -9``:
    Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``), else a daemon thread that polls
    :func:`os.getppid` twice a second. A parent already gone ends this process at once."""
    import ctypes
    import time

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != parent:
        os._exit(1)
    if armed:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="optsched-parent-watch", daemon=True).start()


#: ``prctl`` option of Linux's parent-death signal (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def start_method() -> str:
    """``fork`` on Linux while this process runs no other thread, else ``spawn``."""
    return "fork" if sys.platform.startswith("linux") and threading.active_count() == 1 else "spawn"


#: The signals whose driver handlers a forked worker drops before it takes them.
_WORKER_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _init_worker(shared: list[Any], parent: int) -> None:
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    # a forked worker drops the driver's handlers: SIGTERM (the pool's end) ends it quietly, as
    # a spawned one, and its signals wake nothing of the driver's
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    if hasattr(signal, "pthread_sigmask"):  # (POSIX)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _WORKER_SIGNALS)  # held while a pool forks
    _worker_shared[:] = shared


def _call_in_worker(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return fn(*(_worker_shared[a.index] if isinstance(a, SharedRef) else a for a in args))


@dataclass
class _Job:
    key: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    attempts: int = 0


class LocalPool:
    """Jobs on ``workers`` local processes (see the module docstring)."""

    def __init__(self, workers: int, retries: int = 2, log: Callable[[str], None] | None = None) -> None:
        self.workers, self.retries = workers, retries
        #: Jobs that run at once: the capacity search's probes per round.
        self.slots = workers
        self._log = log or (lambda msg: print(msg, file=sys.stderr))
        #: The driver's child processes that are not the pool's (those before the pool was made).
        self._not_workers: set[Any] = set()
        self._shared: list[Any] = []
        self._waiting: deque[_Job] = deque()
        self._running: dict[Future, _Job] = {}
        self._finished: deque[Done] = deque()
        self._pool: ProcessPoolExecutor | None = None

    def share(self, obj: Any) -> SharedRef:
        if self._pool is not None:
            raise RuntimeError("share() must come before the first submit()")
        self._shared.append(obj)
        return SharedRef(len(self._shared) - 1)

    def submit(self, key: str, fn: Callable[..., Any], *args: Any) -> None:
        self._waiting.append(_Job(key, fn, args))
        self._fill()

    def start(self) -> None:
        """Start the workers now (forked when the module docstring allows; see there), rather
        than at the first :meth:`submit`; after the last :meth:`share`."""
        if self._pool is not None:
            return
        self._not_workers = set(multiprocessing.active_children())
        method = start_method()
        self._pool = ProcessPoolExecutor(
            self.workers,
            mp_context=multiprocessing.get_context(method),
            initializer=_init_worker,
            initargs=(self._shared, os.getpid()),
        )
        if method == "fork":  # a fork pool starts its workers at the first job: start them now, with
            # SIGINT and SIGTERM held until each worker has dropped the driver's handlers of them
            held = signal.pthread_sigmask(signal.SIG_BLOCK, _WORKER_SIGNALS)
            try:
                self._pool.submit(int)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _fill(self) -> None:
        self.start()
        assert self._pool is not None
        while self._waiting and len(self._running) < self.workers:
            job = self._waiting.popleft()
            self._running[self._pool.submit(_call_in_worker, job.fn, job.args)] = job

    def _retry(self, job: _Job) -> None:
        job.attempts += 1
        if job.attempts > self.retries:
            self._finished.append((job.key, None, f"worker process died ({job.attempts} attempts)"))
        else:
            self._waiting.appendleft(job)

    def _collect(self, futures: set[Future]) -> None:
        broken = False
        for fut in futures:
            job = self._running.pop(fut)
            try:
                self._finished.append((job.key, fut.result(), None))
            except BrokenProcessPool:
                broken = True
                self._retry(job)
            except Exception as exc:  # noqa: BLE001 - the job's own failure, reported with its key
                self._finished.append((job.key, None, f"{type(exc).__name__}: {exc}"))
        if broken:
            lost = list(self._running.values())
            self._running.clear()
            for job in lost:
                self._retry(job)
            self._log(f"sweep: a worker process died; re-running the {len(lost) + 1} cells in flight")
            self._drop_pool()

    def next_done(self, timeout: float | None = None) -> Done | None:
        """The next finished job (blocks at most ``timeout`` seconds, then None; None: no limit);
        RuntimeError when nothing is pending."""
        while not self._finished:
            if not self._running and not self._waiting:
                raise RuntimeError("no job pending")
            self._fill()
            done, _ = wait(self._running, timeout=timeout, return_when=FIRST_COMPLETED)
            if not done and timeout is not None:
                return None
            self._collect(done)
        return self._finished.popleft()

    def _drop_pool(self) -> None:
        """End every worker process of the pool (SIGTERM), then stop the pool and wait for its
        manager thread to end.

        Every worker: the driver's child processes made since the pool was, a worker still
        starting included. A worker that survived the others could wait forever for the lock of
        the pool's call queue, held by a worker ended inside its ``get``, and the manager thread
        with it. The workers end first so that no running job is waited for. The wait for the
        manager thread keeps the end of the program clean: one still running when the interpreter
        exits closes its wake-up pipe while ``concurrent.futures``' exit hook writes to it, and the
        hook's write fails ("Exception ignored ... OSError: [Errno 9] Bad file descriptor", the
        exit code unchanged).
        """
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        for child in multiprocessing.active_children():
            if child not in self._not_workers:
                child.terminate()
        pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        """End every worker (jobs still running are abandoned)."""
        self._waiting.clear()
        self._running.clear()
        self._drop_pool()


def require_ray() -> Any:
    """The ray module, or :class:`MissingDependency` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise MissingDependency("--ray needs Ray: pip install 'optsched[ray]'") from None
    return ray


def _call_task(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class RayExecutor:
    """Jobs as Ray tasks (see the module docstring).

    Parameters
    ----------
    address
        A running cluster (``ray start --head`` prints it); None starts a local one with
        ``workers`` CPUs on 127.0.0.1 for the run.
    retries
        ``max_retries`` of every task.
    """

    def __init__(self, address: str | None, workers: int, retries: int = 2) -> None:
        if address is None or address.split(":")[0] in ("127.0.0.1", "localhost"):
            # Single-machine mode (read when Ray is imported): Ray listens on the loopback address only.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        ray = self._ray = require_ray()
        self._owned = not ray.is_initialized()  # else: a driver already connected (the Python API)
        if self._owned and address is None:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        elif self._owned:
            ray.init(address=address, log_to_driver=False)
        #: Tasks that run at once (the cluster's CPUs): the capacity search's probes per round.
        self.slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._task = ray.remote(num_cpus=1, max_retries=retries, retry_exceptions=False)(_call_task)
        self._refs: dict[Any, str] = {}
        self._finished: deque[Done] = deque()

    def start(self) -> None:
        """Nothing to start: the cluster's workers take tasks as they come."""

    def share(self, obj: Any) -> Any:
        return self._ray.put(obj)

    def submit(self, key: str, fn: Callable[..., Any], *args: Any) -> None:
        self._refs[self._task.remote(fn, *args)] = key

    def next_done(self, timeout: float | None = None) -> Done | None:
        """The next finished task (blocks at most ``timeout`` seconds, then None; None: no limit);
        RuntimeError when nothing is pending."""
        ray = self._ray
        if not self._finished:
            if not self._refs:
                raise RuntimeError("no job pending")
            refs = list(self._refs)
            ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
            if not ready:
                return None
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if len(refs) > 1 else (ready, None)
            for ref in ready:
                key = self._refs.pop(ref)
                try:
                    self._finished.append((key, ray.get(ref), None))
                except ray.exceptions.RayError as exc:
                    cause = str(exc).strip().splitlines()
                    self._finished.append((key, None, f"{type(exc).__name__}: {cause[-1] if cause else ''}"))
        return self._finished.popleft()

    def close(self) -> None:
        """Cancel the tasks still pending; disconnect (and stop a cluster started for the run)."""
        for ref in list(self._refs):
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - a task that already finished cannot be cancelled
                pass
        self._refs.clear()
        if self._owned:
            self._ray.shutdown()
