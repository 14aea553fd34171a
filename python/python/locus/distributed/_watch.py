"""The driver's exchanges with the cluster, each watched for a lost worker
and bounded in time.

A worker can die at any moment; the scheduler learns it milliseconds
later, and until then Dask still routes data to the dead address (a
scatter retries it for its whole connect timeout, and a broadcast's
replication loops on it for as long as the call lasts). So each exchange
of a call (where the shards are, the queries sent to their workers, the
wait for the answer) runs on the client's event loop beside a watch that
asks the scheduler, every fraction of a second, whether everything the
call needs is still held by a live worker: a loss ends the exchange at
once with :class:`ShardLostError`, naming what was lost. Exchanges that
only move data are also bounded by the call's ``timeout``; the wait for
the workers' compute is not (it may be long), only watched. Dask's own
errors of a lost worker (a released key, a cancelled future, a closed
connection, a timeout) become :class:`ShardLostError` too.
"""

from __future__ import annotations

import asyncio
import math
import numbers
from concurrent.futures import CancelledError
from typing import Any, Awaitable, Callable, Sequence

import distributed

from .._errors import InputError, LocusError

#: Seconds a probe of the scheduler, a scatter of the queries or a
#: placement exchange may take before the call raises ShardLostError.
DEFAULT_TIMEOUT = 30.0
# The watch asks the scheduler after 50 ms, then every twice as long, up to
# every half second.
_POLL_FIRST = 0.05
_POLL_MAX = 0.5
# Dask's errors when a worker (or the scheduler) is gone: a key the
# scheduler no longer knows, a cancelled or lost future, a closed
# connection (CommClosedError is an OSError), a timeout, a task whose
# workers kept dying.
_LOSS_ERRORS: tuple[type[BaseException], ...] = (
    CancelledError,
    asyncio.TimeoutError,
    TimeoutError,
    KeyError,
    OSError,
    distributed.KilledWorker,
)


class ShardLostError(LocusError, RuntimeError):
    """A shard's key set is gone or out of reach (its worker died, its
    future was released, or the cluster did not answer within the
    ``timeout``): the call is refused rather than answered without it."""


def check_timeout(timeout: Any) -> float:
    """``timeout`` as seconds (a finite number > 0), checked on the driver."""
    if isinstance(timeout, (str, bool)) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds, got {type(timeout).__name__}")
    t = float(timeout)
    if not (math.isfinite(t) and t > 0):
        raise InputError(f"timeout must be finite and > 0 seconds, got {t}")
    return t


class Needs:
    """What an exchange cannot go on without: futures whose data must stay
    on a live worker (a finished one held by none is lost; a lost or
    cancelled one too) and workers that must stay up, each with the name
    the error gives it."""

    def __init__(
        self,
        futures: Sequence[tuple[distributed.Future, str]] = (),
        workers: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.futures = list(futures)
        self.workers = list(workers)

    async def probe(self, client: distributed.Client) -> tuple[list[str], dict, set]:
        """The names of what is lost now, the workers holding each future
        and the live workers, asked of the scheduler (its list of workers
        drops a dead one as soon as it notices)."""
        out = [f"{name} ({f.status})" for f, name in self.futures if f.status in ("lost", "cancelled")]
        # Those finished before the question (one that finishes while it is
        # asked is not in the answer).
        held = [(f, name) for f, name in self.futures if f.status == "finished"]
        who, alive = await asyncio.gather(_who_has(client, [f for f, _ in held]), client.nthreads())
        alive = set(alive)
        for f, name in held:
            if not any(w in alive for w in who.get(f.key, ())):
                out.append(f"{name} (no live worker holds it)")
        out += [f"{name} (gone)" for w, name in self.workers if w not in alive]
        return out, who, alive

    async def lost(self, client: distributed.Client) -> list[str]:
        """The names of what is lost now (see :meth:`probe`)."""
        return (await self.probe(client))[0]


async def _who_has(client: distributed.Client, futures: list) -> dict:
    return dict(await client.who_has(futures)) if futures else {}


async def watched(
    client: distributed.Client,
    work: Awaitable | Callable[[], bool],
    needs: Needs,
    what: str,
    timeout: float | None,
    probe_timeout: float,
) -> Any:
    """Runs ``work`` (an awaitable, or a predicate polled until true) on the
    client's loop while watching ``needs``: its answer, or
    :class:`ShardLostError` as soon as something needed is lost, the
    scheduler does not answer a probe within ``probe_timeout`` seconds, or
    ``timeout`` seconds (None: no bound) pass."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    predicate = work if callable(work) else None
    task = None if predicate is not None else asyncio.ensure_future(work)  # type: ignore[arg-type]
    poll = _POLL_FIRST
    try:
        while True:
            if task is not None:
                done, _ = await asyncio.wait({task}, timeout=poll)
                if done:
                    try:
                        return task.result()
                    except _LOSS_ERRORS as e:
                        # Dask's error of a loss: named by what the
                        # scheduler knows now is lost, if it knows.
                        try:
                            lost = await asyncio.wait_for(needs.lost(client), probe_timeout)
                        except _LOSS_ERRORS:
                            lost = []
                        if lost:
                            raise lost_error(what, lost) from e
                        raise
            elif predicate is not None and predicate():
                return None
            else:
                await asyncio.sleep(poll)
            try:
                lost = await asyncio.wait_for(needs.lost(client), probe_timeout)
            except _LOSS_ERRORS as e:
                raise ShardLostError(
                    f"{what}: the scheduler did not answer within {probe_timeout:g} s "
                    f"({type(e).__name__}: {e}); no result is given"
                ) from e
            if lost:
                raise lost_error(what, lost)
            if task is not None and timeout is not None and loop.time() - start > timeout:
                raise ShardLostError(
                    f"{what}: no answer within timeout={timeout:g} s; no result is given"
                )
            poll = min(2 * poll, _POLL_MAX)
    finally:
        if task is not None:
            # An answer no longer wanted is dropped (its error retrieved,
            # so asyncio does not report it).
            task.cancel()
            task.add_done_callback(_drop)


def _drop(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


def run(client: distributed.Client, fn: Callable[[], Awaitable], what: str) -> Any:
    """``fn()`` run on the client's event loop from the driver's thread;
    Dask's errors of a lost worker raised there become
    :class:`ShardLostError` (the engine's own errors pass through)."""
    try:
        return client.sync(fn)
    except LocusError:
        raise
    except _LOSS_ERRORS as e:
        raise ShardLostError(
            f"{what}: a worker or its data was lost ({type(e).__name__}: {e}); "
            "no result is given without it (rebuild the sharded key set)"
        ) from e


def wait(
    client: distributed.Client, futures: Sequence[distributed.Future], names: Sequence[str], what: str, timeout: float
) -> None:
    """Waits (from the driver's thread) until no future of ``futures`` is
    pending, each named in errors by ``names``; a lost one raises
    :class:`ShardLostError` (one that erred is left to its ``result()``)."""
    needs = Needs(list(zip(futures, names)))

    def ready() -> bool:
        # A lost or cancelled future is never ready: the watch names it.
        return all(f.status in ("finished", "error") for f in futures)

    async def go() -> None:
        await watched(client, ready, needs, what, None, timeout)

    run(client, go, what)


def wait_ok(
    client: distributed.Client, futures: Sequence[distributed.Future], names: Sequence[str], what: str, timeout: float
) -> None:
    """:func:`wait`, then the first future that erred raises its own error
    (an :class:`InputError` naming its row, say)."""
    wait(client, futures, names, what, timeout)
    for f in futures:
        if f.status == "error":
            f.result()


def gather(
    client: distributed.Client, futures: Any, needs: Needs, what: str, timeout: float
) -> Any:
    """``client.gather(futures)`` (from the driver's thread) while ``needs``
    stay held; the compute behind ``futures`` is not bounded in time, only
    watched."""

    async def go() -> Any:
        return await watched(client, client.gather(futures), needs, what, None, timeout)

    return run(client, go, what)


def again(what: str) -> str:
    """What to do after the call ``what`` lost a shard: run a mean shift
    again (it places its own shards), rebuild a sharded key set."""
    return "run it again" if what.startswith("mean_shift") else "rebuild the sharded key set"


def lost_error(what: str, lost: Sequence[str]) -> ShardLostError:
    """The error of a call that found ``lost`` gone."""
    return ShardLostError(f"{what}: lost " + "; ".join(lost) + f"; no result is given without it ({again(what)})")


def scatter(
    client: distributed.Client, items: Sequence[tuple[Any, str]], what: str, timeout: float
) -> list[distributed.Future]:
    """Each ``(data, worker)`` of ``items`` scattered to its worker (never
    broadcast), all at once, from the driver's thread: the futures, or
    :class:`ShardLostError` when a target worker dies or ``timeout``
    seconds pass."""
    targets = sorted({w for _, w in items})
    needs = Needs(workers=[(w, f"worker {w}") for w in targets])
    what = f"{what}: sending data to {', '.join(targets)}"

    async def go() -> list:
        sends = asyncio.gather(
            *(client.scatter(data, workers=[w], hash=False, timeout=timeout) for data, w in items)
        )
        return await watched(client, sends, needs, what, timeout, timeout)

    return run(client, go, what)


def who_has(client: distributed.Client, futures: Sequence[distributed.Future], what: str, timeout: float) -> dict:
    """The workers holding each future (by key), asked of the scheduler
    within ``timeout`` seconds."""

    async def go() -> dict:
        return await asyncio.wait_for(_who_has(client, list(futures)), timeout)

    return run(client, go, what)
