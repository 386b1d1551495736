"""How the ranks agree on an out-of-memory retry (:func:`runtime.memory.find_executable_batch_size`
with a process group of several ranks).

A rank that runs out of memory leaves the training loop while its peers sit inside a collective
waiting for it; so every attempt ends with a vote through the c10d store that already connects the ranks
(torchrun's store, the one the default process group was built on):

1. A rank that fails writes that to the store first, then lets go of its process group (abort,
   destroy, and drop every reference: the exception's frames are cleared). A Gloo group closes
   its sockets when it is freed, so a peer blocked in a collective with it fails at once
   ("connection closed by peer"). An NCCL collective waits on the GPU instead; there a small
   watcher thread on every rank waits on a store key that a failing rank sets, and aborts the
   local group, which releases the pending collective.
2. Every rank posts its outcome for the attempt (finished, out of memory with the size it would
   retry with, a failure caused by a peer, or an error of its own) and reads everyone else's.
3. All ranks take the same decision from the same outcomes: done; retry with the smallest proposed
   size (after re-creating the process group on a fresh store prefix, because the old one is
   gone); or stop, when some rank failed for a reason that is not memory.

Why a bound on collectives as well: aborting a Gloo group does not close its sockets (torch 2.13);
only freeing it does, and anything the script keeps outside the decorated function (a DDP model
in a global, say) keeps the group alive. So during a decorated call the default group is rebuilt
with a bounded collective timeout (``ACCEL_CONVERT_OOM_COLLECTIVE_TIMEOUT`` seconds, 300 by
default, never more than the group's own), and restored when the call succeeds: at worst a peer
waits that long before it joins the vote, instead of Gloo's 30 minutes. In the usual case
(everything built inside the function) every rank trains again about a second after the error
(benchmarks/oom_retry.py). Objects prepared before the call hold the replaced group: build the
model, optimizer and loaders inside the decorated function, as Accelerate's examples do.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import itertools
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from accel_convert.runtime.memory import (
    _reduced,
    _say,
    _without_locals,
    free_memory,
    is_out_of_memory,
)
from accel_convert.runtime.state import shut_down_process_group

# Default Gloo/NCCL timeout when the live group's own cannot be read (torch's default for Gloo).
_FALLBACK_TIMEOUT = datetime.timedelta(minutes=30)
#: Inside a decorated call, no collective waits longer than this (seconds; the environment
#: variable overrides it). It is what bounds a Gloo peer's wait: see "Why a bound" above.
COLLECTIVE_TIMEOUT_ENV = "ACCEL_CONVERT_OOM_COLLECTIVE_TIMEOUT"
_DEFAULT_COLLECTIVE_TIMEOUT_S = 300.0
_STORE_ROOT = "accel_convert/find_executable_batch_size"

# Each decorated call gets its own store namespace. Ranks call decorated functions in the same
# order (they run the same script), so the same counter value names the same call on every rank.
_call_numbers = itertools.count()


def start_run() -> tuple[Callable[..., tuple[bool, Any]], contextlib.AbstractContextManager] | None:
    """The attempt function of one decorated call agreed across ranks, and the scope the call runs
    in (collectives bounded); None when there is no process group of several ranks."""
    group = _LiveGroup.capture()
    if group is None:
        return None
    run = _AgreedRun(group, next(_call_numbers))
    return run.attempt, group.collectives_bounded(run.root)


# --------------------------------------------------------------------------------------------
# Several ranks: the live process group and how to rebuild it
# --------------------------------------------------------------------------------------------


@dataclass
class _LiveGroup:
    """What it takes to rebuild the default process group after it has been aborted."""

    backend: str
    rank: int
    world_size: int
    #: The group's own collective timeout, as the script created it.
    timeout: datetime.timedelta
    device_id: torch.device | None
    #: The store the ranks rendezvoused on (torchrun's), without the default group's prefix.
    store: dist.Store

    @classmethod
    def capture(cls) -> _LiveGroup | None:
        """The default group's settings, or None when there is nothing to coordinate."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        group = dist.group.WORLD
        return cls(
            backend=dist.get_backend(),
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            timeout=_group_timeout(group),
            device_id=getattr(group, "bound_device_id", None),
            store=_rendezvous_store(),
        )

    #: The bounded timeout of the groups built during a decorated call.
    collective_timeout: datetime.timedelta = _FALLBACK_TIMEOUT

    @contextlib.contextmanager
    def collectives_bounded(self, prefix: str) -> Iterator[None]:
        """Run the decorated call on a group whose collectives wait at most the bound.

        A Gloo group's timeout is fixed when it is built (``set_timeout`` does not reach the
        connections already made), so the group is rebuilt with the bound, and rebuilt with the
        original timeout when the call succeeds. After a failure the group stays as it is: the
        ranks are not together any more to rebuild it.
        """
        self.collective_timeout = min(self.timeout, _collective_bound())
        _settle_first_ddp_on_the_current_group()
        self.recreate(f"{prefix}/bounded_group", self.collective_timeout)
        yield
        self.recreate(f"{prefix}/restored_group", self.timeout)

    def abort(self) -> None:
        """Abort this rank's group: that releases its own pending NCCL collectives (Gloo ignores it)."""
        if dist.is_initialized():
            dist.group.WORLD.abort()

    def release(self) -> None:
        """Destroy this rank's group; once nothing holds it, its sockets close and peers fail fast."""
        if dist.is_initialized():
            dist.group.WORLD.abort()
            shut_down_process_group(release_models=False)
        gc.collect()

    def recreate(self, prefix: str, timeout: datetime.timedelta) -> None:
        """Destroy the (broken) default group and build a new one on a fresh store prefix.

        The fresh prefix matters: the old group's rendezvous keys are still in the store, and a
        new group reading them would try to connect to dead sockets.
        """
        shut_down_process_group(release_models=False)
        options: dict[str, Any] = {}
        if self.device_id is not None:
            options["device_id"] = self.device_id
        dist.init_process_group(
            backend=self.backend,
            store=dist.PrefixStore(prefix, self.store),
            rank=self.rank,
            world_size=self.world_size,
            timeout=timeout,
            **options,
        )


_ddp_settled = False


def _settle_first_ddp_on_the_current_group() -> None:
    """Build one throwaway DistributedDataParallel on the group the script made, once per process.

    Observed with torch 2.13: the first DDP a process builds leaves about ten references to the
    default group of that moment that nothing releases, so that group's Gloo sockets never close.
    If that were one of our per-call groups, a failing rank could not let go of it and its peers
    would wait out the collective bound (minutes) instead of about a second. Paying that one-time
    cost on the script's own group, which stays in use anyway, keeps our groups releasable.
    """
    global _ddp_settled
    if _ddp_settled:
        return
    from torch.nn.parallel import (
        DistributedDataParallel,  # only needed here, and only once
    )

    device = dist.group.WORLD.bound_device_id or (
        torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    )
    # Forked RNG: initialising the throwaway layer must not consume the script's random stream,
    # or models built inside the retried function would start differently than on one process.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        DistributedDataParallel(
            torch.nn.Linear(1, 1, device=device), device_ids=[device] if device.type == "cuda" else None
        )
    _ddp_settled = True


def _collective_bound() -> datetime.timedelta:
    seconds = float(os.environ.get(COLLECTIVE_TIMEOUT_ENV, _DEFAULT_COLLECTIVE_TIMEOUT_S))
    return datetime.timedelta(seconds=seconds)


def _rendezvous_store() -> dist.Store:
    """The store under the default process group (torchrun's TCPStore), shared by every rank.

    torch.distributed has no public accessor for it. This and ``_group_timeout`` are the only
    places that read torch internals.
    """
    store = dist.distributed_c10d._get_default_store()
    return getattr(store, "_underlying_non_prefix_store", store)


def _group_timeout(group: dist.ProcessGroup) -> datetime.timedelta:
    """The collective timeout the group was created with, to give the rebuilt group the same."""
    try:
        backend = group._get_backend(torch.device("cuda" if dist.get_backend() == "nccl" else "cpu"))
        return backend.options._timeout
    except (AttributeError, RuntimeError):
        return _FALLBACK_TIMEOUT


# --------------------------------------------------------------------------------------------
# Several ranks: outcomes and the decision every rank takes from them
# --------------------------------------------------------------------------------------------

FINISHED, OUT_OF_MEMORY, PEER_FAILED, ERROR = "finished", "out_of_memory", "peer_failed", "error"


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended on one rank."""

    kind: str
    #: For OUT_OF_MEMORY: the batch size this rank proposes to retry with.
    next_batch_size: int | None = None
    #: For ERROR: what went wrong, to name it on the other ranks.
    detail: str = ""

    def to_bytes(self) -> bytes:
        return json.dumps({"kind": self.kind, "next": self.next_batch_size, "detail": self.detail}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Outcome:
        fields = json.loads(data)
        return cls(fields["kind"], fields["next"], fields["detail"])


@dataclass(frozen=True)
class Decision:
    """What every rank does after an attempt: ``done``, ``retry`` (with ``batch_size``) or ``stop``."""

    action: str
    batch_size: int | None = None
    #: The ranks that ran out of memory (retry) or failed otherwise (stop).
    ranks: tuple[int, ...] = ()
    reason: str = ""


def decide(outcomes: dict[int, Outcome]) -> Decision:
    """The decision all ranks take from all ranks' outcomes (so they all take the same one).

    An error that is not about memory beats everything: retrying would hide a real bug. Otherwise
    any out-of-memory error means everyone retries, with the smallest size anyone proposed.
    """
    errors = {rank: o for rank, o in sorted(outcomes.items()) if o.kind == ERROR}
    if errors:
        reason = "; ".join(f"rank {rank}: {o.detail}" for rank, o in errors.items())
        return Decision("stop", ranks=tuple(errors), reason=reason)
    out_of_memory = {rank: o for rank, o in sorted(outcomes.items()) if o.kind == OUT_OF_MEMORY}
    if out_of_memory:
        smallest = min(o.next_batch_size for o in out_of_memory.values())  # type: ignore[type-var]
        return Decision("retry", batch_size=smallest, ranks=tuple(out_of_memory))
    if any(o.kind == PEER_FAILED for o in outcomes.values()):
        # A rank saw its group break, yet nobody owns up: a peer died without a word.
        return Decision("stop", reason="the process group broke but no rank reported an error")
    return Decision("done")


def _rank_list(ranks: tuple[int, ...]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


# --------------------------------------------------------------------------------------------
# Several ranks: one decorated call, attempt after attempt
# --------------------------------------------------------------------------------------------


class _AgreedRun:
    """The attempts of one decorated call on one rank, coordinated with the other ranks."""

    def __init__(self, group: _LiveGroup, call_number: int) -> None:
        self.group = group
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.root = f"{_STORE_ROOT}/restart_{restart}/call_{call_number}"
        self.attempt_number = 0

    def attempt(
        self,
        function: Callable[..., Any],
        batch_size: int,
        reduce_batch_size_fn: Callable[..., int] | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[bool, Any]:
        """One try on every rank: ``(True, result)``, ``(False, agreed next size)`` or an exception."""
        keys = _AttemptKeys(f"{self.root}/attempt_{self.attempt_number}", self.group)
        self.attempt_number += 1
        own_error: Exception | None = None  # kept only when it is not about memory
        result: Any = None
        with _PeerFailureWatcher(keys, self.group):
            try:
                result = function(batch_size, *args, **kwargs)
                outcome = Outcome(FINISHED)
            except Exception as caught:  # noqa: BLE001 (classified, then re-raised or retried)
                outcome = self._classify(caught, keys, batch_size, reduce_batch_size_fn)
                if outcome.kind != PEER_FAILED:
                    keys.announce_failure()  # before letting go of the group: peers look for it
                if outcome.kind == ERROR:
                    own_error = _without_locals(caught)
        if outcome.kind != FINISHED:
            # The exception and its traceback are gone (or emptied) by now, and with them the
            # function's frames, whose DDP model holds the group: the group can really go now.
            self.group.release()
        keys.post(outcome)
        if own_error is not None:
            raise own_error
        decision = decide(keys.gather_outcomes())
        if decision.action == "done":
            return True, result
        if decision.action == "stop":
            raise RuntimeError(
                f"find_executable_batch_size: stopping on rank {self.group.rank} because {decision.reason}"
            )
        return False, self._retry(decision, batch_size, keys)

    @staticmethod
    def _classify(
        error: Exception, keys: _AttemptKeys, batch_size: int, reduce_batch_size_fn: Callable[..., int] | None
    ) -> Outcome:
        if is_out_of_memory(error):
            return Outcome(OUT_OF_MEMORY, next_batch_size=_reduced(batch_size, reduce_batch_size_fn))
        if keys.peer_failed():
            # Most likely our collective broke because the failing peer aborted its group.
            return Outcome(PEER_FAILED)
        return Outcome(ERROR, detail=f"{type(error).__name__}: {error}"[:500])

    def _retry(self, decision: Decision, batch_size: int, keys: _AttemptKeys) -> int:
        assert decision.batch_size is not None
        if self.group.rank == 0:
            _say(
                f"out of memory at batch size {batch_size} on {_rank_list(decision.ranks)}; "
                f"retrying with {decision.batch_size}"
            )
        free_memory()
        self.group.recreate(f"{keys.prefix}/next_group", self.group.collective_timeout)
        return decision.batch_size


class _AttemptKeys:
    """The store keys of one attempt: who failed, who must wake up, and each rank's outcome."""

    def __init__(self, prefix: str, group: _LiveGroup) -> None:
        self.prefix = prefix
        self.group = group
        self.store = dist.PrefixStore(prefix, group.store)

    def wake_key(self, rank: int) -> str:
        return f"wake/{rank}"

    def announce_failure(self) -> None:
        # add() answers, so once it returns the store holds the key: a peer that checks after
        # its collective breaks (because we abort right after this) is sure to see it.
        self.store.add("failures", 1)
        others = [r for r in range(self.group.world_size) if r != self.group.rank]
        if others:
            self.store.multi_set([self.wake_key(r) for r in others], [b"peer failed"] * len(others))

    def peer_failed(self) -> bool:
        return self.store.check(["failures"])

    def post(self, outcome: Outcome) -> None:
        self.store.set(f"outcome/{self.group.rank}", outcome.to_bytes())

    def gather_outcomes(self) -> dict[int, Outcome]:
        keys = [f"outcome/{rank}" for rank in range(self.group.world_size)]
        self.store.wait(keys, self.group.timeout)
        return {rank: Outcome.from_bytes(data) for rank, data in enumerate(self.store.multi_get(keys))}


class _PeerFailureWatcher:
    """While the function runs, abort this rank's group as soon as a peer announces a failure.

    Gloo needs no help (the failing peer's freed group closes the sockets we wait on; aborting a
    Gloo group is harmless), but an NCCL collective waits on the GPU and only a local abort
    releases it. The thread blocks on its own store connection (a store object must not be shared
    between threads) until a failing peer sets this rank's wake key, or until the attempt ends and
    we set it ourselves. A store that cannot open a second connection gets no watcher.
    """

    def __init__(self, keys: _AttemptKeys, group: _LiveGroup) -> None:
        self.keys = keys
        self.group = group
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="oom-peer-watcher", daemon=True)

    def __enter__(self) -> _PeerFailureWatcher:
        try:
            self.store = dist.PrefixStore(self.keys.prefix, self.group.store.clone())
        except (RuntimeError, NotImplementedError):  # e.g. a FileStore: fine for Gloo
            return self
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.finished.set()
        if self.thread.is_alive():
            self.keys.store.set(self.keys.wake_key(self.group.rank), b"attempt over")
            self.thread.join()

    def _watch(self) -> None:
        key = self.keys.wake_key(self.group.rank)
        while True:
            try:
                # In effect no timeout: torch logs every store wait that times out (two
                # socket.cpp lines), and the attempt's end sets the key anyway (__exit__).
                self.store.wait([key], datetime.timedelta(days=7))
                break
            except dist.DistStoreError:  # a week: keep waiting while the attempt runs
                if self.finished.is_set():
                    return
        if not self.finished.is_set():
            self.group.abort()
