"""``NodeDataLoader``: mini-batches of a rank's training nodes, sampled and gathered ahead of
time on a background thread.

Every rank yields the same number of batches per epoch (the counts are agreed with one
Allreduce; a rank with fewer seeds pads by reusing seeds), so the gradient Allreduce of each
step can never wait for a rank that already finished its epoch.
"""
from __future__ import annotations

import queue
import threading
import time

import numpy as np

from hpcgnn.comm import mpi

_DONE = object()


class NodeDataLoader:
    """Collective over the graph's comm (each epoch's start). Iterate sampled, loaded MiniBatches.

    Parameters
    ----------
    graph : DistGraph
    seed_gids : array of int
        This rank's seed nodes (e.g. from :func:`hpcgnn.node_split`).
    sampler : NeighborSampler
    batch_size : int
    shuffle : bool
        A new order each epoch, from (seed, epoch, rank).
    drop_last : bool
        Drop the last partial batch (on every rank alike).
    prefetch : int
        Batches prepared ahead on the background thread; 0 samples in the caller's thread.
    feature, label : str or None
        Node fields gathered into ``batch.feat`` (rows of ``input_gids``) and ``batch.label``
        (rows of ``seed_gids``) as torch tensors; None skips one.
    seed : int
    """

    def __init__(self, graph, seed_gids, sampler, batch_size, shuffle=True, drop_last=False, prefetch=2,
                 feature="feat", label="label", seed=0):
        self.graph = graph
        self.seed_gids = np.asarray(seed_gids, dtype=np.int64).reshape(-1)
        if np.unique(self.seed_gids).shape[0] != self.seed_gids.shape[0]:
            raise ValueError("NodeDataLoader: seed_gids contain repeats (each seed should appear once per epoch)")
        self.sampler = sampler
        self.batch_size = int(batch_size)
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.prefetch = int(prefetch)
        self.feature = feature
        self.label = label
        self.seed = int(seed)
        self.epoch = 0
        self.num_batches = self._agree_on_batches()
        #: seconds spent by the producer in sampling and in feature gathering, last epoch
        self.timings = {"sample_s": 0.0, "gather_s": 0.0}

    def _agree_on_batches(self):
        n = self.seed_gids.shape[0]
        mine = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        comm = self.graph.comm
        MPI = mpi()
        if self.drop_last:  # only full batches exist everywhere
            return int(comm.allreduce(mine, op=MPI.MIN))
        return int(comm.allreduce(mine, op=MPI.MAX))

    def __len__(self):
        return self.num_batches

    def epoch_batches(self, epoch):
        """Local. The seed ids of every batch of ``epoch`` on this rank (padded to the agreed count)."""
        rng = np.random.default_rng([self.seed, epoch, self.graph.comm.rank])
        order = rng.permutation(self.seed_gids) if self.shuffle else self.seed_gids
        needed = self.num_batches * self.batch_size
        padded = bool(order.shape[0]) and needed > order.shape[0] and not self.drop_last
        if padded:
            # pad by cycling through this rank's own seeds: every rank takes the same number of steps
            extra = rng.choice(order, needed - order.shape[0]) if self.num_batches > 1 else order[:0]
            order = np.concatenate([order, extra])
        batches = [order[i * self.batch_size:(i + 1) * self.batch_size] for i in range(self.num_batches)]
        if padded:  # a padded batch may repeat a seed; the sampler needs unique seeds
            batches = [np.unique(b) for b in batches]
        return batches

    def load(self, seeds, batch_seed):
        """Local. Sample one batch and gather its features and labels."""
        import torch

        t0 = time.perf_counter()
        batch = self.sampler.sample(self.graph, seeds, seed=batch_seed)
        t1 = time.perf_counter()
        if self.feature is not None:
            batch.feat = torch.from_numpy(self.graph.ndata[self.feature].gather(batch.input_gids))
        if self.label is not None:
            batch.label = torch.from_numpy(self.graph.ndata[self.label].gather(batch.seed_gids))
        t2 = time.perf_counter()
        self.timings["sample_s"] += t1 - t0
        self.timings["gather_s"] += t2 - t1
        return batch

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        self.timings = {"sample_s": 0.0, "gather_s": 0.0}
        batches = self.epoch_batches(epoch)
        base = (self.seed * 1_000_003 + epoch) * 65_537 + self.graph.comm.rank
        jobs = [(seeds, base * 4099 + i) for i, seeds in enumerate(batches)]
        if self.prefetch <= 0:
            return (self.load(seeds, s) for seeds, s in jobs)
        return _PrefetchIterator(self, jobs)


class _PrefetchIterator:
    """Runs ``loader.load`` on a daemon thread into a bounded queue; errors re-raise here."""

    def __init__(self, loader, jobs):
        self._queue = queue.Queue(maxsize=loader.prefetch)
        self._stop = threading.Event()
        self._remaining = len(jobs)
        self.wait_s = 0.0
        self._thread = threading.Thread(target=self._produce, args=(loader, jobs), daemon=True,
                                        name="hpcgnn-prefetch")
        self._thread.start()

    def _produce(self, loader, jobs):
        try:
            for seeds, batch_seed in jobs:
                if self._stop.is_set():
                    return
                self._put(loader.load(seeds, batch_seed))
            self._put(_DONE)
        except BaseException as exc:  # handed to the consumer, which raises it in its own thread
            self._put(exc)

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self):
        return self

    def __next__(self):
        if self._remaining == 0 and not self._thread.is_alive() and self._queue.empty():
            raise StopIteration
        t0 = time.perf_counter()
        item = self._queue.get()
        self.wait_s += time.perf_counter() - t0
        if item is _DONE:
            self.close()
            raise StopIteration
        if isinstance(item, BaseException):
            self.close()
            raise item
        self._remaining -= 1
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
        if hasattr(self, "_stop"):
            self._stop.set()
