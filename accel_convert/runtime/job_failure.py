"""When one rank fails, every rank stops within seconds, and says which rank failed.

Without this, an ordinary exception on one rank hangs the job: the failing rank leaves, but its
peers sit in their next collective (DDP's all-reduce, the loader's start-of-epoch broadcast)
until the backend's collective timeout, 30 minutes on Gloo; ``torchrun`` only tears the others
down once the failing process has actually exited.

So, once this process has joined the default group (:func:`watch_for_failures`):

- An uncaught exception on a rank (``sys.excepthook``) prints its traceback as usual, then records
  ``failed_rank`` in the rendezvous store (the first rank to fail wins) and wakes every rank's
  watcher. The exit handler in :mod:`runtime.state` then skips its barrier, so the failing rank
  exits at once, and ``torchrun`` stops the others.
- A small watcher thread on every rank blocks on its own connection to that store, reading its
  rank's inbox (see :class:`_FailureWatch`). Woken by a peer's failure, it prints one line naming
  the failed rank, gives the launcher time to stop this process (so the launcher's summary names
  the real culprit), and ends it itself otherwise.
- A rank whose own exception arrives after a peer's failure was recorded (typically Gloo's
  "connection closed by peer" in a collective the failed rank left) prints one line instead of a
  second traceback: the failing rank's traceback is shown once.
- A failing rank that does not manage to exit (a destructor stuck at teardown) is ended by the
  same thread after the grace period.

Everything here talks to the store only; a store that cannot open a second connection (a
``FileStore``) gets no watcher, and the failing rank still skips the exit barrier.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import threading
import time
import traceback
from types import TracebackType
from typing import Any

import torch.distributed as dist

__all__ = [
    "BARRIER_TIMEOUT_ENV",
    "FAILURE_EXIT_SECONDS_ENV",
    "BarrierTimeoutError",
    "barrier_timeout_seconds",
    "failure_exit_seconds",
    "failure_seen",
    "monitored_barrier",
    "stop_watching",
    "watch_for_failures",
]

#: Seconds a rank is given to exit by itself once the job has failed (default 5).
FAILURE_EXIT_SECONDS_ENV = "ACCEL_CONVERT_FAILURE_EXIT_SECONDS"
_DEFAULT_FAILURE_EXIT_SECONDS = 5.0
#: The exit code of a rank stopped because another rank failed.
PEER_FAILED_EXIT_CODE = 1

_FAILED_RANK = "failed_rank"
_WHERE_REQUEST = "where_request"
#: How long one store wait of the watcher may last: in effect, no timeout. The TCPStore client
#: logs a warning (two ``socket.cpp ... waitForInput ... timed out`` lines) each time a wait
#: times out, so a watcher that woke up every second to look around filled the user's stderr;
#: this one wakes only when a message arrives. A week, not "forever": the wait needs some
#: duration, and after a week without a message the watcher just waits again.
_WAIT_FOREVER = datetime.timedelta(days=7)
#: Messages to a rank's watcher (see :meth:`_FailureWatch.post`).
_WAKE_EXIT = "exit"
_WAKE_PEER = "peer failed"
_WAKE_SELF = "failed here"
_WAKE_WHERE = "where are you"


def failure_exit_seconds() -> float:
    """How long a rank may take to exit once the job has failed."""
    try:
        return max(0.1, float(os.environ.get(FAILURE_EXIT_SECONDS_ENV, _DEFAULT_FAILURE_EXIT_SECONDS)))
    except ValueError:
        return _DEFAULT_FAILURE_EXIT_SECONDS


def _say(rank: int, message: str) -> None:
    print(f"[rank {rank}] {message}", file=sys.stderr, flush=True)


def _job_prefix() -> str:
    # One namespace per launch attempt: torchrun's store outlives worker restarts
    # (--max-restarts), and a restarted job must not see the previous attempt's failure.
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"accel_convert/job_failure/{run_id}/{restart}/"


def _underlying_store() -> dist.Store | None:
    """The store the default group rendezvoused on (torchrun's TCPStore), without the group's prefix."""
    try:
        store = dist.distributed_c10d._get_default_store()
    except (RuntimeError, AttributeError, ValueError):
        return None
    return getattr(store, "_underlying_non_prefix_store", store)


class _FailureWatch:
    """The store keys of this launch, the watcher thread, and what this rank knows of failures.

    Each rank's watcher reads an inbox: message ``n`` to rank ``r`` is the key ``inbox/r/n``, and
    the watcher blocks on the next one it has not read. A store wait cannot wait for "any of
    these keys", and a key once set stays set, so one numbered key per message is what lets a
    single blocking wait hear every kind of message (a peer failed, this rank failed, a barrier
    asks where this rank is, the process exits) in the order they were numbered.
    """

    def __init__(self, store: dist.Store, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.prefix = _job_prefix()
        # The main thread's connection (the watcher blocks on its own: a connection must not be
        # shared between threads).
        self.store = dist.PrefixStore(self.prefix, store)
        self.failed_here = threading.Event()
        self.exited = threading.Event()
        self.peer_failure: int | None = None
        self.thread: threading.Thread | None = None
        self.answered_request = ""
        self.barrier_generation = 0
        self._announce_lock = threading.Lock()
        self._announced = False
        try:
            # Where each rank runs, so that a rank that vanished without a word (killed by a
            # signal, out of host memory) can be named by its peers.
            self.store.set(f"process/{rank}", f"{socket.gethostname()}:{os.getpid()}")
        except RuntimeError:
            pass
        try:
            watcher_store = dist.PrefixStore(self.prefix, store.clone())  # type: ignore[attr-defined]
        except (RuntimeError, NotImplementedError, AttributeError):
            return
        self.thread = threading.Thread(
            target=self._watch, args=(watcher_store,), name="accel-convert-failure-watcher", daemon=True
        )
        self.thread.start()

    def post(self, rank: int, message: str) -> None:
        """Put ``message`` in ``rank``'s inbox: take the next number (atomic), then fill it."""
        number = self.store.add(f"inbox/{rank}/count", 1)
        self.store.set(f"inbox/{rank}/{number}", message)

    def announce(self, message: str) -> None:
        """Print this rank's one line about the failure, once (watcher and excepthook may race)."""
        with self._announce_lock:
            if self._announced:
                return
            self._announced = True
        _say(self.rank, message)

    def vanished_peers(self) -> list[int]:
        """Peers on this host whose process is gone (or a zombie): they died without reporting."""
        here = socket.gethostname()
        gone = []
        for rank in range(self.world_size):
            if rank == self.rank:
                continue
            try:
                host, pid = self.store.get(f"process/{rank}").decode().rsplit(":", 1)
            except (RuntimeError, ValueError):
                continue
            if host == here and not _process_alive(int(pid)):
                gone.append(rank)
        return gone

    # ------------------------------------------------------------------ main thread
    def claim_failure(self) -> int:
        """Record this rank as the one that failed unless a peer was first; return the rank recorded."""
        self.failed_here.set()
        try:
            recorded = self.store.compare_set(_FAILED_RANK, "", str(self.rank))
            return int(recorded.decode() or self.rank)
        except (RuntimeError, ValueError):  # the store is gone (its host exited): nobody to tell
            return self.rank

    def wake_everyone(self) -> None:
        """Wake every peer's watcher (they stop), and ours (it becomes this rank's exit deadline)."""
        try:
            for rank in range(self.world_size):
                if rank != self.rank:
                    self.post(rank, _WAKE_PEER)
            self.post(self.rank, _WAKE_SELF)
        except RuntimeError:
            pass

    def recorded_failure(self) -> int | None:
        """The rank recorded as failed in the store, if any."""
        if self.peer_failure is not None:
            return self.peer_failure
        try:
            if self.store.check([_FAILED_RANK]):
                return int(self.store.get(_FAILED_RANK).decode())
        except (RuntimeError, ValueError):
            pass
        return None

    def stop(self) -> None:
        """The process exits: let the watcher return (it must not sit in a store call at finalization).

        Posted after a failure too: a rank that failed as an echo of a peer's error may exit
        before the peer's message arrives, and its watcher, blocked on its inbox, would hold up
        the exit. An extra message overwrites nothing; the watcher stops at the first it reads.
        """
        self.exited.set()
        if self.thread is None or not self.thread.is_alive():
            return
        try:
            self.post(self.rank, _WAKE_EXIT)
        except RuntimeError:
            return  # the store is gone; the thread's wait fails and it returns by itself
        self.thread.join(timeout=failure_exit_seconds())

    # ------------------------------------------------------------------ watcher thread
    def _answer_where_request(self, store: dist.Store) -> None:
        """A peer's barrier timed out without this rank: say where this rank's main thread is."""
        if not store.check([_WHERE_REQUEST]):
            return
        request = store.get(_WHERE_REQUEST).decode()
        if request == self.answered_request:
            return
        self.answered_request = request
        generation, waiting_ranks, waiting_at = request.split("|", 2)
        if str(self.rank) in waiting_ranks.split(","):
            return  # this rank is one of those waiting: its barrier reports for it
        where = main_thread_location()
        store.set(f"where/{generation}/{self.rank}", where)
        _say(
            self.rank,
            f"rank(s) {waiting_ranks} wait for this rank in wait_for_everyone at {waiting_at}; this rank is at {where}",
        )

    def _next_message(self, store: dist.Store, number: int) -> str | None:
        """Block until message ``number`` of this rank's inbox arrives; None once the store is gone."""
        key = f"inbox/{self.rank}/{number}"
        while True:
            started = time.monotonic()
            try:
                store.wait([key], _WAIT_FOREVER)
                return store.get(key).decode()
            except dist.DistStoreError:
                if time.monotonic() - started < _WAIT_FOREVER.total_seconds() / 2:
                    return None  # not the week's timeout: a store that fails at once, never retried in a loop
                continue  # a week without a word: keep waiting
            except RuntimeError:  # the store's host is gone: nothing more can be learnt
                return None

    def _watch(self, store: dist.Store) -> None:
        number = 1
        while True:
            reason = self._next_message(store, number)
            number += 1
            if reason != _WAKE_WHERE:
                break
            try:
                self._answer_where_request(store)
            except RuntimeError:
                return
        if reason is None or reason == _WAKE_EXIT:
            return
        if reason == _WAKE_PEER and not self.failed_here.is_set():
            try:
                self.peer_failure = int(store.get(_FAILED_RANK).decode())
            except (RuntimeError, ValueError):
                self.peer_failure = -1
            which = f"rank {self.peer_failure}" if self.peer_failure >= 0 else "another rank"
            self.announce(f"stopping: {which} failed (its error is shown in its output)")
            # Twice the failing rank's own allowance: it exits first, so the launcher names it
            # as the root cause and stops this process itself.
            if not self.exited.wait(2 * failure_exit_seconds()):
                os._exit(PEER_FAILED_EXIT_CODE)
            return
        # This rank failed: it is on its way out; make sure it gets there.
        if not self.exited.wait(failure_exit_seconds()):
            _say(self.rank, f"did not exit within {failure_exit_seconds():g}s of its error; ending it")
            os._exit(PEER_FAILED_EXIT_CODE)


_watch: _FailureWatch | None = None
_previous_excepthook: Any = None


def watch_for_failures() -> None:
    """Start watching for failures of any rank in the default group (once per process)."""
    global _watch, _previous_excepthook
    if _watch is not None or not dist.is_initialized() or dist.get_world_size() < 2:
        return
    store = _underlying_store()
    if store is None:
        return
    _watch = _FailureWatch(store, dist.get_rank(), dist.get_world_size())
    _previous_excepthook = sys.excepthook
    sys.excepthook = _report_and_record


#: How a collective reports that the process at the other end went away (Gloo's wording).
_LOST_PEER_WORDS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Read error", "Write error")


def _looks_like_a_lost_peer(error: BaseException) -> bool:
    return isinstance(error, RuntimeError) and any(word in str(error) for word in _LOST_PEER_WORDS)


#: Linux's per-task flag for a process that has begun to exit (``PF_EXITING``, include/linux/sched.h).
_PF_EXITING = 0x4


def _process_alive(pid: int) -> bool:
    """False when ``pid`` is gone, a zombie (dead, not yet reaped by its launcher) or exiting.

    Exiting matters: a killed process closes its sockets before it becomes a zombie, so a peer
    that sees the connection drop can look at it in between.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return fields[0] not in ("Z", "X") and not int(fields[6]) & _PF_EXITING
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): ask the kernel, which cannot tell zombies apart
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _vanished_peers_soon(watch: _FailureWatch, within: float = 0.5) -> list[int]:
    """The peers that died, looking again for a moment: the kernel may not have caught up yet."""
    deadline = time.monotonic() + within
    while True:
        vanished = watch.vanished_peers()
        if vanished or time.monotonic() > deadline:
            return vanished
        time.sleep(0.01)


def _one_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _report_and_record(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    watch = _watch
    if watch is None:
        (_previous_excepthook or sys.__excepthook__)(kind, error, trace)
        return
    echoed = getattr(error, "peer_rank", None)  # an error raised *because* that peer failed
    if isinstance(echoed, int) and echoed != watch.rank:
        first = echoed
        watch.failed_here.set()
    else:
        # Claimed before printing: when every rank raises the same error at once, exactly one
        # of them shows the traceback.
        first = watch.claim_failure()
    summary = _one_line(traceback.format_exception_only(kind, error)[-1])
    if first != watch.rank:
        # A consequence of the peer's failure, as a rule: one line, not a second traceback.
        watch.announce(f"stopping: rank {first} failed first (here: {summary})")
        return
    vanished = _vanished_peers_soon(watch) if _looks_like_a_lost_peer(error) else []
    if vanished:
        # A peer died without a word (SIGKILL, the OOM killer): our error is only its echo.
        ranks = ", ".join(map(str, vanished))
        watch.announce(f"stopping: rank {ranks} died without an error (killed by a signal?) (here: {summary})")
    else:
        (_previous_excepthook or sys.__excepthook__)(kind, error, trace)
        _record_for_the_launcher(kind, error, trace)
    watch.wake_everyone()


#: Set by accel-launch for its workers: it prints a one-line summary of a failure, from the error file.
ERROR_SUMMARY_ENV = "ACCEL_LAUNCH_ERROR_SUMMARY"


def _record_for_the_launcher(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    """Write the error where torchrun's agent looks for it (``TORCHELASTIC_ERROR_FILE``, set for
    each worker, in the format of torchrun's own ``@record``), so that accel-launch's summary line
    names it: ``rank 1 failed (exit code 1): ValueError: ...``. Only under accel-launch (which
    sets ``ACCEL_LAUNCH_ERROR_SUMMARY``): plain torchrun would print the traceback a second time,
    in its failure box."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.environ.get(ERROR_SUMMARY_ENV) != "1":
        return
    import json

    data = {
        "message": {
            "message": _one_line(traceback.format_exception_only(kind, error)[-1], limit=300),
            "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(kind, error, trace)),
                "timestamp": str(int(time.time())),
            },
        }
    }
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
    except OSError:  # the summary line then says less; the traceback is printed already
        pass


def failure_seen() -> bool:
    """True when this rank, or a peer, has failed: the exit handler must not wait for anyone."""
    watch = _watch
    if watch is None:
        return False
    return watch.failed_here.is_set() or watch.recorded_failure() is not None


def stop_watching() -> None:
    """Called by the exit handler once the group is gone: end the watcher thread."""
    if _watch is not None:
        _watch.stop()


# ------------------------------------------------------------------------------------------------
# Barriers that say who is missing
# ------------------------------------------------------------------------------------------------

#: Seconds ``wait_for_everyone`` waits for the other ranks before it reports who is missing (30).
BARRIER_TIMEOUT_ENV = "ACCEL_CONVERT_BARRIER_TIMEOUT"
_DEFAULT_BARRIER_TIMEOUT_S = 30.0
#: Seconds a timed-out barrier waits for the missing ranks to say where they are.
_WHERE_ANSWER_SECONDS = 3.0


class BarrierTimeoutError(RuntimeError):
    """Some ranks never reached a ``wait_for_everyone``: the message says which, and where each rank is."""


def barrier_timeout_seconds() -> float:
    """How long ``wait_for_everyone`` waits before it gives up and names the missing ranks."""
    try:
        return max(0.1, float(os.environ.get(BARRIER_TIMEOUT_ENV, _DEFAULT_BARRIER_TIMEOUT_S)))
    except ValueError:
        return _DEFAULT_BARRIER_TIMEOUT_S


def _internal_folders() -> tuple[str, ...]:
    import sysconfig

    import torch

    folders = [
        os.path.dirname(os.path.abspath(__file__)),
        os.path.dirname(os.path.abspath(torch.__file__)),
        sysconfig.get_paths()["stdlib"],
    ]
    return tuple(os.path.join(folder, "") for folder in folders)


def _user_location(frame: Any) -> str:
    """``file:line`` of the innermost frame that is the script's (not the runtime's, torch's, stdlib's)."""
    internal = _internal_folders()
    innermost = frame
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(internal) and not filename.startswith("<"):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return f"{innermost.f_code.co_filename}:{innermost.f_lineno}" if innermost is not None else "unknown"


def main_thread_location() -> str:
    """Where the main thread is now (the script's innermost frame), seen from another thread."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    return _user_location(frame) if frame is not None else "unknown"


def monitored_barrier() -> None:
    """A barrier through the rendezvous store that, after :func:`barrier_timeout_seconds`, prints
    on every rank which ranks are missing and the ``file:line`` where each rank is, then raises
    :class:`BarrierTimeoutError` (instead of waiting out the backend's 30-minute timeout).

    Ranks inside the barrier published where they called it; a missing rank's watcher thread
    answers with its main thread's position. Without a watcher (no store connection of our own)
    this is ``torch.distributed.barrier()``.
    """
    watch = _watch
    if watch is None or watch.thread is None:
        dist.barrier()
        return
    watch.barrier_generation += 1
    generation = watch.barrier_generation
    where = _user_location(sys._getframe(1))
    store = watch.store
    prefix = f"barrier/{generation}"
    store.set(f"{prefix}/rank/{watch.rank}", where)
    if store.add(f"{prefix}/count", 1) == watch.world_size:
        store.set(f"{prefix}/done", "1")
    timeout = barrier_timeout_seconds()
    try:
        store.wait([f"{prefix}/done"], datetime.timedelta(seconds=timeout))
        return
    except dist.DistStoreError:
        pass
    arrived = {
        rank: store.get(f"{prefix}/rank/{rank}").decode()
        for rank in range(watch.world_size)
        if store.check([f"{prefix}/rank/{rank}"])
    }
    missing = [rank for rank in range(watch.world_size) if rank not in arrived]
    if not missing:  # everyone arrived just now
        return
    waiting = ",".join(map(str, sorted(arrived)))
    store.compare_set(_WHERE_REQUEST, "", f"{generation}|{waiting}|{where}")
    for rank in missing:
        watch.post(rank, _WAKE_WHERE)
    answers = {}
    for rank in missing:
        try:
            store.wait([f"where/{generation}/{rank}"], datetime.timedelta(seconds=_WHERE_ANSWER_SECONDS))
            answers[rank] = store.get(f"where/{generation}/{rank}").decode()
        except dist.DistStoreError:
            answers[rank] = "unknown (it did not answer)"
    places = [f"rank {rank} waits in wait_for_everyone at {place}" for rank, place in sorted(arrived.items())]
    places += [f"rank {rank} is at {answers[rank]}" for rank in missing]
    message = (
        f"wait_for_everyone at {where} waited {timeout:g}s: rank(s) {', '.join(map(str, missing))} "
        f"never arrived; {'; '.join(places)} (a barrier in a branch that some ranks skip? "
        f"{BARRIER_TIMEOUT_ENV} sets the wait)"
    )
    _say(watch.rank, message)  # every waiting rank says it; only the first to fail shows a traceback
    raise BarrierTimeoutError(message)
