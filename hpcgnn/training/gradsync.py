"""How the ranks agree on one gradient per optimizer step.

Every parameter's ``.grad`` is a view into one flat float32 buffer (:class:`FlatGradients`), and
a :class:`GradientSync` turns each rank's buffer into the mean over the ranks:

``blocking``
    One Allreduce of the whole buffer after backward (the default).
``overlap`` (``--overlap``)
    The buffer is cut into buckets of about ``--bucket-mb`` in the order backward produces the
    gradients (last layer first). A bucket's non-blocking Allreduce starts as soon as backward
    has accumulated every gradient in it, so communication runs while the earlier layers'
    backward still computes (torch DDP's scheme). Buckets start strictly in bucket order on every
    rank (a complete bucket waits for the ones before it): MPI requires the same order of
    collectives everywhere, and a parameter that got no gradient this step must not leave one
    rank's bucket unstarted; after backward the buckets not yet started are started, in order.
``--grad-compress bf16``
    Each rank rounds its gradient to bfloat16 and the ranks sum the bfloat16 values in float32
    (a reduce-scatter by Alltoall and an Allgather: half the bytes on the wire).
``--grad-compress topk:R``
    Each rank sends only the fraction R of its entries largest in magnitude, as (index, value)
    pairs gathered by every rank (Allgather), which sum them; top-k sparsification.

``--average-every H``
    Local SGD: each rank steps on its own gradient, with no communication, and every H optimizer
    steps the ranks replace their parameters by the mean over the ranks; at each epoch's end the
    parameters and the optimizer state, so every rank evaluates and checkpoints one model.
    ``H = 1`` is the blocking scheme itself.
``--staleness S``
    Bounded staleness: step ``t``'s gradient is reduced by a non-blocking Allreduce while the
    rank computes steps ``t + 1 .. t + S``, and the optimizer step after step ``t`` applies the
    mean gradient of step ``t - S`` (none in a run's first S steps, which take no optimizer step).
    A rank slower at one step then holds the others back only once S steps' slack is spent.
    ``S = 0`` is the blocking scheme itself.

``--sync async``
    Asynchronous training over RMA: the parameters live in a window sharded over the ranks
    (:class:`~hpcgnn.store.param_store.ParamStore`). Each step a rank reads them all one-sidedly,
    computes its gradient from them, takes its own optimizer step (its own Adam moments) and adds
    the change that step made to the shared parameters, each shard's part scaled down when the
    shard received more updates meanwhile than ranks stepping in turn make (staleness-aware
    learning rates, :func:`~hpcgnn.store.param_store.lag_scale`). No rank
    waits for another between steps, and one that ends its epoch first trains on until the others
    arrive (:func:`hpcgnn.training.loop.step_until_all_done`); at an epoch's end the ranks meet,
    read the same parameters and average their optimizer state, so evaluation and checkpoints
    see one model.

Both compressions keep error feedback: what a rank did not send this step (the rounding error, or
the entries left out) is added to its next step's gradient, so over the steps every gradient is
sent in full (their sum is exactly what was sent plus the residual still held).

On a GPU (``--device cuda``) the flat buffer lives on the device. MPI reads host memory unless
the library is CUDA-aware (:func:`hpcgnn.training.device.cuda_aware_mpi`): the blocking scheme
copies the buffer into a pinned host mirror, reduces it there and copies it back; the
overlapping scheme does so per bucket, each bucket's copy started on the compute stream as soon
as backward completes it and its Allreduce started once the copy is done; the compressions work
on the host mirror. With a CUDA-aware MPI the plain and overlapping schemes hand MPI the device
memory itself, once the stream has produced it.

Bytes on the wire (``bytes_per_step``): what each rank sends per step by the reduction's
algorithmic volume: ``2 (P-1)/P n b`` for an Allreduce of ``n`` values of ``b`` bytes (the
bandwidth-optimal reduce-scatter + allgather that MPI libraries use for large buffers), and
``(P-1) k 8`` for the top-k Allgather of ``k`` int32 indices and float32 values per rank.
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np
import torch

from hpcgnn.runtime.collectives import allreduce_
from hpcgnn.runtime.comm import mpi
from hpcgnn.training.config import parse_compression

_DEFAULT_BUCKET_MB = 1.0


class FlatGradients:
    """Local. Every parameter's ``.grad`` is a view into one buffer, so a step needs one Allreduce.

    The buffer lives where the parameters do. ``host`` is what MPI reads: the buffer itself on
    the CPU, a pinned host mirror of it on a GPU. ``cuda_aware``: MPI may read the device buffer
    itself (the plain and overlapping schemes then skip the mirror).
    """

    def __init__(self, model, cuda_aware=False):
        self.params = [p for p in model.parameters() if p.requires_grad]
        device = self.params[0].device if self.params else torch.device("cpu")
        n = sum(p.numel() for p in self.params)
        self.buffer = torch.zeros(n, device=device)
        self.on_device = device.type != "cpu"
        self.cuda_aware = bool(cuda_aware) and self.on_device
        self.host = torch.empty(n, pin_memory=True) if self.on_device else self.buffer
        self.offsets = []
        offset = 0
        for p in self.params:
            p.grad = self.buffer[offset:offset + p.numel()].view_as(p)
            self.offsets.append(offset)
            offset += p.numel()

    def zero(self):
        """Local. Zero every gradient at once."""
        self.buffer.zero_()

    def pull(self) -> torch.Tensor:
        """Local. The gradient in host memory (``host``): on a GPU copied there first, once the
        stream has computed it."""
        if self.on_device:
            self.host.copy_(self.buffer)
        return self.host

    def push(self):
        """Local. Back onto the device what was reduced in ``host`` (nothing on the CPU)."""
        if self.on_device:
            self.buffer.copy_(self.host, non_blocking=True)

    def wire(self):
        """Local. What the plain reduction hands MPI: the device buffer itself with a CUDA-aware MPI
        (once the stream has computed it), else the host copy as numpy."""
        if self.cuda_aware:
            torch.cuda.current_stream(self.buffer.device).synchronize()
            return self.buffer
        return self.pull().numpy()


def allreduce_bytes(count, itemsize, ranks) -> int:
    """Local. Bytes one rank sends in a bandwidth-optimal Allreduce of ``count`` items."""
    return int(2 * (ranks - 1) * count * itemsize // ranks) if ranks > 1 else 0


class GradientSync:
    """Local to build; :meth:`finish` is collective. The blocking mean over the ranks (the base of
    the other schemes).

    Parameters
    ----------
    grads : FlatGradients
    comm : mpi4py communicator
    """

    def __init__(self, grads, comm):
        self.grads, self.comm = grads, comm
        self.bytes_per_step = allreduce_bytes(grads.buffer.numel(), 4, comm.size)
        self.residual = None  # the compressions' error feedback: what was not sent yet
        self.steps_alone = False  # steps involve no other rank: a rank trains on while others finish

    def arm(self, last):
        """Local. Called before backward; ``last``: this backward ends an optimizer step (the
        reduction follows). Only the overlapping scheme acts on it."""

    def finish(self) -> bool:
        """Collective over comm. After backward: the buffer holds the mean gradient the optimizer
        applies; False when there is none to apply this step (:class:`StaleSync`'s first steps)."""
        grads = self.grads
        if not grads.on_device:
            allreduce_(grads.buffer.numpy(), self.comm, average=True)
            return True
        if self.comm.size > 1:
            self.comm.Allreduce(mpi().IN_PLACE, grads.wire(), op=mpi().SUM)
            if not grads.cuda_aware:
                grads.push()
        grads.buffer /= self.comm.size
        return True

    def stepped(self):
        """Collective over comm. Called after each optimizer step (local SGD averages here)."""

    def settle(self):
        """Collective over comm. Called at an epoch's end, before evaluation and checkpoints: the
        ranks hold one model afterwards (local SGD averages what its last steps left apart)."""

    def observed(self) -> dict:
        """Collective over comm (after :meth:`settle`; a scheme may reduce its figures over the
        ranks). What the epoch's record adds about the scheme (none for a plain reduction)."""
        return {}

    def state(self):
        """Local. What a checkpoint keeps of this rank's scheme: the error-feedback residual, or None."""
        return None if self.residual is None else self.residual.clone()

    def load_state(self, state):
        """Local. Restore :meth:`state` (None: nothing held, or a checkpoint of another scheme)."""
        if self.residual is not None:
            if state is None:
                self.residual.zero_()
            else:
                self.residual.copy_(torch.as_tensor(state, dtype=torch.float32).reshape(self.residual.shape))

    def resumed(self):
        """Collective over comm. Called once every rank has loaded a checkpoint (after
        :meth:`load_state`, which is local): asynchronous training shares the loaded parameters."""

    def close(self):
        """Local. Release what the scheme holds (MPI operations, hooks)."""


class OverlappedSync(GradientSync):
    """Local to build. Buckets reduced with non-blocking Allreduce while backward runs."""

    def __init__(self, grads, comm, bucket_mb=_DEFAULT_BUCKET_MB):
        super().__init__(grads, comm)
        cap = max(1, int(bucket_mb * 2**20 / 4))
        self.buckets, self.bucket_of = [], {}
        # backward produces the last parameters' gradients first: buckets from the end of the buffer
        order = list(range(len(grads.params)))[::-1]
        current, size = [], 0
        for i in order:
            current.append(i)
            size += grads.params[i].numel()
            if size >= cap:
                self.buckets.append(current)
                current, size = [], 0
        if current:
            self.buckets.append(current)
        self.views, self.ranges = [], []
        for b, members in enumerate(self.buckets):
            lo = min(grads.offsets[i] for i in members)
            hi = max(grads.offsets[i] + grads.params[i].numel() for i in members)
            self.ranges.append((lo, hi))
            # what MPI reads: the bucket's host memory, or its device memory with a CUDA-aware MPI
            self.views.append(grads.buffer[lo:hi] if grads.cuda_aware else grads.host[lo:hi].numpy())
            for i in members:
                self.bucket_of[i] = b
        self.hooks = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(grads.params)]
        self.armed = False
        self._reset()

    def _reset(self):
        self.pending = [len(m) for m in self.buckets]
        self.requests = []
        self.copies = []  # on a GPU: per bucket started, the event of its copy off the stream

    def _copied(self, b, wait) -> bool:
        """On a GPU: whether bucket ``b``'s values are in the memory MPI reads (its copy to the host
        started first if not yet; ``wait``: until it is). True at once on the CPU."""
        grads = self.grads
        if not grads.on_device:
            return True
        if len(self.copies) == b:
            lo, hi = self.ranges[b]
            stream = torch.cuda.current_stream(grads.buffer.device)
            if not grads.cuda_aware:
                grads.host[lo:hi].copy_(grads.buffer[lo:hi], non_blocking=True)
            done = torch.cuda.Event()
            done.record(stream)
            self.copies.append(done)
        if wait:
            self.copies[b].synchronize()
            return True
        return self.copies[b].query()

    def _hook(self, i):
        def on_gradient(_param):
            if not self.armed:
                return
            self.pending[self.bucket_of[i]] -= 1
            self._start_ready()
        return on_gradient

    def _start_ready(self, everything=False):
        """Start, in bucket order, every bucket whose gradients are all in (``everything``: all
        not yet started)."""
        MPI = mpi()
        while len(self.requests) < len(self.buckets):
            b = len(self.requests)
            if self.pending[b] > 0 and not everything:
                break
            if not self._copied(b, wait=everything):
                break
            self.requests.append(self.comm.Iallreduce(MPI.IN_PLACE, self.views[b], op=MPI.SUM))
        if self.requests:
            MPI.Request.Testall(self.requests)  # MPI progresses a request only inside MPI calls

    def arm(self, last):
        self.armed = bool(last) and self.comm.size > 1
        self._reset()

    def finish(self) -> bool:
        if self.comm.size == 1:
            return True
        self._start_ready(everything=True)
        mpi().Request.Waitall(self.requests)
        if not self.grads.cuda_aware:
            self.grads.push()
        self.grads.buffer /= self.comm.size
        self.armed = False
        self._reset()
        return True

    def close(self):
        for hook in self.hooks:
            hook.remove()
        self.hooks = []


class Bf16Sync(GradientSync):
    """Local to build. Gradients rounded to bfloat16 and summed with error feedback.

    The sum is a reduce-scatter and an allgather in bfloat16, written with MPI's built-in
    operations (no user-defined reduction, which MPI would call back into Python for every
    piece of the message): an Alltoall hands rank ``r`` every rank's bfloat16 piece ``r``, which
    it sums in float32 in rank order and rounds once; an Allgather returns the pieces. The bytes
    are an Allreduce's in bfloat16, every rank ends with the same values, and each entry is
    rounded once, not once per partial sum.
    """

    def __init__(self, grads, comm):
        super().__init__(grads, comm)
        n = grads.buffer.numel()
        self.bytes_per_step = allreduce_bytes(n, 2, comm.size)
        self.residual = torch.zeros(n)
        self.piece = -(-n // comm.size)
        self.wire = torch.zeros(comm.size * self.piece, dtype=torch.bfloat16)  # padded to whole pieces
        self.received = np.empty((comm.size, self.piece), dtype=np.int16)

    def finish(self):
        g = self.grads.pull()
        n = g.numel()
        g += self.residual
        self.wire[:n].copy_(g)
        torch.sub(g, self.wire[:n].float(), out=self.residual)  # what rounding left out, sent next step
        if self.comm.size > 1:
            pieces = self.wire.view(torch.int16).numpy().reshape(self.comm.size, self.piece)
            self.comm.Alltoall(pieces, self.received)
            mine = torch.from_numpy(self.received).view(torch.bfloat16).float().sum(0).to(torch.bfloat16)
            self.comm.Allgather(mine.view(torch.int16).numpy(), pieces)
        torch.div(self.wire[:n].float(), self.comm.size, out=g)
        self.grads.push()
        return True


class TopkSync(GradientSync):
    """Local to build. The fraction ``ratio`` of largest-magnitude entries, with error feedback."""

    def __init__(self, grads, comm, ratio):
        super().__init__(grads, comm)
        n = grads.buffer.numel()
        self.k = max(1, min(n, int(math.ceil(ratio * n))))
        self.bytes_per_step = (comm.size - 1) * self.k * 8
        self.residual = torch.zeros(n)

    def finish(self):
        g = self.grads.pull()
        g += self.residual
        index = torch.topk(g.abs(), self.k, sorted=False).indices
        values = g[index]
        self.residual.copy_(g)
        self.residual[index] = 0.0  # sent now; everything else waits for a later step
        sent = np.concatenate([index.to(torch.int32).numpy().view(np.float32), values.numpy()])
        every = np.empty((self.comm.size, sent.shape[0]), dtype=np.float32)
        if self.comm.size > 1:
            self.comm.Allgather(sent, every)
        else:
            every[0] = sent
        g.zero_()
        all_index = torch.from_numpy(np.ascontiguousarray(every[:, :self.k]).view(np.int32).reshape(-1)).long()
        g.index_add_(0, all_index, torch.from_numpy(np.ascontiguousarray(every[:, self.k:]).reshape(-1)))
        g /= self.comm.size
        self.grads.push()
        return True


class LocalSync(GradientSync):
    """Local to build; :meth:`stepped` and :meth:`settle` are collective. Local SGD
    (``--average-every H``, H >= 2): :meth:`finish` leaves each rank's own gradient as it is, and
    every H optimizer steps, counted from the epoch's start, the parameters are averaged over the
    ranks (in float64). Between epochs' ends the optimizer state (Adam's moments) is each rank's
    own; at an epoch's end it is averaged too, so evaluation and checkpoints see one model and one
    optimizer state, and each epoch starts a new count: a resumed run needs no state of this."""

    def __init__(self, grads, comm, every, optimizer=None):
        super().__init__(grads, comm)
        self.optimizer = optimizer
        if every < 2:
            raise ValueError(f"LocalSync averages every 2 or more steps, not {every}")
        self.average_every = int(every)
        self.bytes_per_step = allreduce_bytes(grads.buffer.numel(), 8, comm.size) // self.average_every
        self.steps = 0  # optimizer steps since the parameters were last averaged

    def finish(self) -> bool:
        return True  # this rank's own gradient, unreduced

    def observed(self) -> dict:
        return {"average_every": self.average_every}

    def stepped(self):
        self.steps += 1
        if self.steps == self.average_every:
            if self.comm.size > 1:
                average_parameters(self.grads.params, self.comm)
            self.steps = 0

    def settle(self):
        if self.comm.size > 1:
            average_parameters(list(self.grads.params) + optimizer_moments(self.optimizer, self.grads.params),
                               self.comm)
        self.steps = 0


def optimizer_moments(optimizer, params) -> list:
    """Local. ``optimizer``'s per-parameter state tensors shaped like their parameter (Adam's
    moments; not its step counts), in parameter order; none without an optimizer."""
    if optimizer is None:
        return []
    return [value for p in params for value in optimizer.state.get(p, {}).values()
            if isinstance(value, torch.Tensor) and value.shape == p.shape]


def average_parameters(params, comm):
    """Collective over comm. Replace every tensor of ``params`` by its mean over the ranks (summed
    in float64, so every rank gets the same values)."""
    if not params:
        return
    flat = torch.cat([p.detach().reshape(-1) for p in params]).to(torch.float64).cpu()  # MPI reads host memory
    allreduce_(flat.numpy(), comm, average=True)
    load_flat(params, flat)


class StaleSync(GradientSync):
    """Local to build; :meth:`finish` is collective. Bounded staleness (``--staleness S``, S >= 1):
    each step's gradient starts a non-blocking Allreduce of its own copy, and the step applies the
    mean gradient of the step S before it, waiting only for that one reduction.

    S + 1 host copies take turns: the copy a step writes is that of step ``t - S - 1``, whose
    reduction the previous step waited for. A checkpoint keeps the reductions still pending (it
    waits for them first), so a resumed run applies them in the same order.
    """

    def __init__(self, grads, comm, staleness):
        super().__init__(grads, comm)
        if staleness < 1:
            raise ValueError(f"StaleSync is for a staleness of 1 or more steps, not {staleness}")
        self.staleness = int(staleness)
        n = grads.buffer.numel()
        self.copies = [np.zeros(n, dtype=np.float32) for _ in range(self.staleness + 1)]
        self.pending = deque()  # (copy index, request or None once complete), oldest first
        self.turn = 0

    def observed(self) -> dict:
        return {"staleness": self.staleness}

    def finish(self) -> bool:
        copy = self.copies[self.turn]
        copy[...] = self.grads.pull().numpy()
        request = self.comm.Iallreduce(mpi().IN_PLACE, copy, op=mpi().SUM) if self.comm.size > 1 else None
        self.pending.append((self.turn, request))
        self.turn = (self.turn + 1) % len(self.copies)
        if len(self.pending) <= self.staleness:
            return False  # a run's first S steps: no reduced gradient yet
        index, request = self.pending.popleft()
        if request is not None:
            request.Wait()
        torch.div(torch.from_numpy(self.copies[index]), self.comm.size, out=self.grads.host)
        self.grads.push()
        return True

    def _complete(self):
        """Wait for every pending reduction (their sums stay in their copies)."""
        for i, (index, request) in enumerate(self.pending):
            if request is not None:
                request.Wait()
                self.pending[i] = (index, None)

    def state(self):
        """Local (after every rank's :meth:`finish` of the same step). The pending reduced sums,
        oldest first, ``[k, n]`` with k <= S."""
        self._complete()
        n = self.grads.buffer.numel()
        return torch.from_numpy(np.stack([self.copies[i] for i, _ in self.pending])) if self.pending \
            else torch.zeros(0, n)

    def load_state(self, state):
        """Local. Restore :meth:`state`: the pending sums, applied over the next steps (None:
        nothing pending, as at a run's start)."""
        self._complete()
        self.pending.clear()
        rows = [] if state is None else torch.as_tensor(state, dtype=torch.float32).reshape(-1, len(self.copies[0]))
        for k, row in enumerate(rows[:self.staleness]):
            self.copies[k][...] = row.numpy()
            self.pending.append((k, None))
        self.turn = len(self.pending) % len(self.copies)

    def close(self):
        self._complete()


class AsyncSync(GradientSync):
    """Collective over comm to build; :meth:`settle`, :meth:`load_state` and :meth:`close` are
    collective, the steps are not. Asynchronous training over RMA (``--sync async``).

    :meth:`finish` leaves the rank's own gradient; the optimizer steps the parameters this rank
    read; :meth:`stepped` adds the change to the shared parameters (scaled by each shard's lag)
    and reads them back for the next step. The change is taken after the optimizer step, so any
    torch optimizer works, weight decay included. On one rank there is no lag and the run is the
    synchronous one up to rounding (the shared value gains ``new - old``). On more it depends on
    the order the ranks' updates land in: not reproducible from the seed.
    """

    def __init__(self, grads, comm, optimizer=None):
        from hpcgnn.store.param_store import ParamStore  # deferred: only asynchronous runs build the store

        super().__init__(grads, comm)
        self.optimizer = optimizer
        self.read_values = flat_parameters(grads.params)
        self.store = ParamStore(comm, self.read_values.numpy())
        self.versions = np.zeros(comm.size, dtype=np.int64)  # the shards' versions as last read
        self.change = torch.empty_like(self.read_values)
        self.steps_alone = True
        n = self.read_values.numel()
        self.bytes_per_step = 2 * (n - n // comm.size) * 4 if comm.size > 1 else 0  # read + add, others' shards
        self.lags = []

    def finish(self) -> bool:
        return True  # this rank's own gradient, unreduced

    def stepped(self):
        flat_parameters(self.grads.params, out=self.change).sub_(self.read_values)
        self.lags.extend(self.store.add(self.change.numpy(), self.versions).tolist())
        self._read()

    def _read(self):
        self.versions = self.store.read(self.read_values.numpy())
        load_flat(self.grads.params, self.read_values)

    def settle(self):
        self.comm.Barrier()  # every rank's last add is complete at its owners
        self._read()
        if self.comm.size > 1:
            average_parameters(optimizer_moments(self.optimizer, self.grads.params), self.comm)

    def observed(self) -> dict:
        lags, self.lags = self.lags, []
        total = self.comm.allreduce(np.array([sum(lags), len(lags)], dtype=np.float64))
        worst = self.comm.allreduce(max(lags, default=0), op=mpi().MAX)
        return {"sync": "async", "lag_mean": float(total[0] / max(total[1], 1)), "lag_max": int(worst)}

    def resumed(self):
        """Collective over comm. A resumed run's loaded parameters (the same on every rank) become
        the shared ones."""
        self.read_values = flat_parameters(self.grads.params)
        self.store.reset(self.read_values.numpy())
        self.versions = self.store.read(self.read_values.numpy())

    def close(self):
        self.store.close()


def flat_parameters(params, out=None) -> torch.Tensor:
    """Local. The parameters' values, concatenated in order, as one float32 CPU tensor (a copy; into
    ``out`` when given, so a step allocates nothing)."""
    if not params:
        return torch.zeros(0) if out is None else out
    values = [p.detach().reshape(-1) for p in params]
    if out is not None and all(v.device.type == "cpu" and v.dtype == torch.float32 for v in values):
        return torch.cat(values, out=out)
    flat = torch.cat(values).to(torch.float32).cpu()
    return flat if out is None else out.copy_(flat)


def load_flat(params, flat):
    """Local. Copy ``flat`` (as :func:`flat_parameters` lays it out) into the parameters."""
    offset = 0
    with torch.no_grad():
        for p in params:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()


def build_sync(grads, comm, compress="none", overlap=False, bucket_mb=_DEFAULT_BUCKET_MB,
               staleness=0, average_every=1, optimizer=None, mode="allreduce") -> GradientSync:
    """Collective over comm with ``mode="async"`` (it builds the parameter store), else Local. The
    gradient exchange the flags ask for (``--sync``, ``--grad-compress``, ``--overlap``,
    ``--staleness``, ``--average-every``; local SGD and asynchronous training also average
    ``optimizer``'s state at epochs' ends)."""
    kind, ratio = parse_compression(compress)
    if mode == "async":
        if overlap or kind != "none" or staleness or average_every > 1:
            raise ValueError("--sync async reduces no gradient; it does not combine with --overlap, compression, "
                             "--staleness or --average-every")
        return AsyncSync(grads, comm, optimizer)
    if overlap and kind != "none":
        raise ValueError("--overlap reduces float32 buckets; it does not combine with compression")
    if average_every > 1:
        if overlap or kind != "none" or staleness:
            raise ValueError("--average-every reduces no gradient; it does not combine with --overlap, compression "
                             "or --staleness")
        return LocalSync(grads, comm, average_every, optimizer)
    if staleness:
        if overlap or kind != "none":
            raise ValueError("--staleness reduces whole float32 gradients; it does not combine with --overlap or "
                             "compression")
        return StaleSync(grads, comm, staleness)
    if kind == "bf16":
        return Bf16Sync(grads, comm)
    if kind == "topk":
        return TopkSync(grads, comm, ratio)
    return OverlappedSync(grads, comm, bucket_mb) if overlap else GradientSync(grads, comm)
