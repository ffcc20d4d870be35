"""Batches prepared ahead on a background thread, and the timings a loader reports.

The producer thread runs ``produce(job)`` for each job into a bounded queue; an exception on
it is re-raised in the consumer's thread, and ``close()`` (also on an early ``break``) stops
and joins it. MPI is initialised with thread level MULTIPLE, so the producer may read remote
rows while the consumer computes.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

THREAD_NAME = "hpcgnn-prefetch"
_DONE = object()


@dataclass
class LoaderStats:
    """Local. Seconds a loader spent in the last epoch, by phase.

    ``sample_s`` and ``gather_s`` are spent wherever batches are made (the prefetch thread when
    there is one); ``wait_s`` is what the consumer waited for them, ``batches`` how many it got.
    The counters cover the batches made this epoch.
    """

    sample_s: float = 0.0
    gather_s: float = 0.0
    wait_s: float = 0.0
    batches: int = 0
    #: bytes of rows read from ranks on other nodes (adjacency and fields)
    network_bytes: int = 0
    #: feature rows the batches needed from other nodes, and how many a cache served
    remote_rows: int = 0
    cache_hits: int = 0
    #: bytes the cache's hits kept off the network
    cache_saved_bytes: int = 0

    def reset(self):
        """Local. Zero every counter (a loader does so at the start of each epoch)."""
        self.sample_s = self.gather_s = self.wait_s = 0.0
        self.batches = self.network_bytes = self.remote_rows = self.cache_hits = self.cache_saved_bytes = 0


class InlineIterator:
    """Local. Batches made in the caller's thread, one per ``next``."""

    def __init__(self, produce, jobs, stats: LoaderStats):
        self._jobs = iter(jobs)
        self._produce, self._stats = produce, stats

    def __iter__(self):
        return self

    def __next__(self):
        item = self._produce(next(self._jobs))
        self._stats.batches += 1
        return item

    def close(self):
        """Local. Nothing runs in the background: forget the remaining jobs."""
        self._jobs = iter(())


def _put(out, stop, item):
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _produce_all(produce, jobs, out, stop):
    """The producer thread: every job's batch into ``out``, then the end marker (or the error)."""
    try:
        for job in jobs:
            if stop.is_set():
                return
            _put(out, stop, produce(job))
        _put(out, stop, _DONE)
    except BaseException as exc:  # handed to the consumer, which raises it in its own thread
        _put(out, stop, exc)


class PrefetchIterator:
    """Local. Runs ``produce(job)`` for every job on a daemon thread, ``depth`` batches ahead."""

    def __init__(self, produce, jobs, depth, stats: LoaderStats):
        self._queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._remaining = len(jobs)
        self._stats = stats
        # the thread holds the queue and the event, not this object: a loop left by ``break``
        # drops the iterator, whose ``__del__`` then stops and joins the thread
        self._thread = threading.Thread(target=_produce_all, args=(produce, jobs, self._queue, self._stop),
                                        daemon=True, name=THREAD_NAME)
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._remaining == 0 and not self._thread.is_alive() and self._queue.empty():
            raise StopIteration
        t0 = time.perf_counter()
        item = self._queue.get()
        self._stats.wait_s += time.perf_counter() - t0
        if item is _DONE:
            self.close()
            raise StopIteration
        if isinstance(item, BaseException):
            self.close()
            raise item
        self._remaining -= 1
        self._stats.batches += 1
        return item

    def close(self):
        """Local. Stop the producer thread and wait for it (also on an early ``break``)."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()

    def __del__(self):
        # a ``for`` loop left by ``break`` drops its iterator here: the producer must be done
        # before the caller can free the graph it reads (closing a DistGraph under a running
        # sampler crashes the process)
        if hasattr(self, "_thread") and threading.current_thread() is not self._thread:
            self.close()


def iterate(produce, jobs, depth, stats: LoaderStats):
    """Local. An iterator over ``produce(job)`` for every job: on a thread ``depth`` ahead, or
    in the caller's thread when ``depth`` is 0. Both have ``close()``."""
    if depth <= 0:
        return InlineIterator(produce, jobs, stats)
    return PrefetchIterator(produce, jobs, depth, stats)
