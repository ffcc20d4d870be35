"""The device stage: a loader's batches moved onto the GPU one step ahead of the model.

With ``--device cuda`` the pipeline of a rank is sample -> gather (the loader's prefetch thread,
on the CPU) -> copy (this stage) -> compute (the model, on the GPU). The stage wraps the
loader's iterator. When the trainer asks for batch ``i`` the stage takes batch ``i + 1`` from
the prefetch queue, packs its arrays (the blocks' CSR arrays and degrees, the features, the
labels, the task's extra tensors) into a pinned host buffer and starts their copies on a side
CUDA stream; then it hands over batch ``i``, whose copy was started a step earlier and ran while
step ``i - 1`` computed. The compute stream waits on the copy's event (on the GPU, not the
host), and every tensor made on the side stream is recorded to the compute stream, so the
caching allocator does not reuse its memory while the step that reads it may still run.

Two pinned buffers take turns (one being read by a copy, one being filled); a buffer grows
when a batch does not fit and is reused otherwise. Before a buffer is refilled the stage waits
for the event of the copy that read it last, which finished a whole step ago.

On the CPU the stage is the identity: batches go to the model as the loader made them.
``HPCGNN_DEVICE_STAGE=1`` runs the staging on the CPU too (plain host buffers, no streams), so
the packing and the tensors it builds are tested on machines without a GPU.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time

import numpy as np
import torch

from hpcgnn.loading.device_rows import BatchRows, ResidentRows, resident_ranges
from hpcgnn.loading.typed_rows import TypedRows

#: set to 1: stage batches through host buffers on the CPU too (what the GPU path does, minus the GPU)
STAGE_ENV = "HPCGNN_DEVICE_STAGE"
#: every array of a batch starts at a multiple of this many bytes in its buffer
_ALIGN = 64
#: a buffer that must grow takes this much more than the batch needs, so that slightly larger
#: batches later do not grow it again
_GROWTH = 1.25
#: Block fields the layers read (eids and the VR-GCN attributes stay as they are)
_BLOCK_ARRAYS = ("indptr", "src_pos", "dst_degree", "edge_weight", "etype")


def forced_on_cpu() -> bool:
    """Local. True when ``HPCGNN_DEVICE_STAGE=1``: stage batches on the CPU as on a GPU."""
    return os.environ.get(STAGE_ENV, "0") not in ("", "0", "false", "no")


class HostBuffer:
    """Local. One reusable host buffer (pinned for a GPU) that a batch's arrays are packed into."""

    def __init__(self, pinned):
        self.pinned = pinned
        self.data = torch.empty(0, dtype=torch.uint8)
        self.used = 0
        self.copied = None  # the event of the last copy that read this buffer (GPU only)

    def reset(self, needed):
        """Local. Make room for ``needed`` bytes, once the last copy out of this buffer is done."""
        if self.copied is not None:
            self.copied.synchronize()
            self.copied = None
        if needed > self.data.numel():
            self.data = torch.empty(int(needed * _GROWTH), dtype=torch.uint8, pin_memory=self.pinned)
        self.used = 0

    def put(self, tensor) -> torch.Tensor:
        """Local. A copy of the CPU ``tensor`` inside this buffer (a view of it)."""
        tensor = tensor.contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        view = self.data[self.used:self.used + nbytes].view(tensor.dtype).view(tensor.shape)
        view.copy_(tensor)
        self.used += -(-nbytes // _ALIGN) * _ALIGN
        return view


def _padded(nbytes) -> int:
    return -(-int(nbytes) // _ALIGN) * _ALIGN


def _array_bytes(value, cuda) -> int:
    if isinstance(value, np.ndarray):
        return _padded(value.nbytes)
    if isinstance(value, torch.Tensor) and not (cuda and value.is_pinned()):
        return _padded(value.numel() * value.element_size())
    return 0


def _batch_arrays(batch):
    """Every host array of ``batch`` the stage moves (to size the buffer)."""
    for block in batch.blocks:
        for name in _BLOCK_ARRAYS:
            yield getattr(block, name, None)
    yield batch.input_degree
    feat = batch.feat
    if isinstance(feat, TypedRows):
        yield feat.types
        yield from feat.positions.values()
        yield from feat.rows.values()
    elif isinstance(feat, BatchRows):
        yield from feat.arrays()
    else:
        yield feat
    yield batch.label
    yield from batch.extra.values()


def record_tensors(value, stream, seen=None):
    """Local. Record every CUDA tensor reachable from ``value`` (a tensor, a list, a dict, or an
    object's attributes: block tensors, their matrices and those matrices' device copies) to
    ``stream``: its memory is not reused before the work queued on ``stream`` so far is done."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        if value.is_cuda:
            value.record_stream(stream)
    elif isinstance(value, (list, tuple)):
        for item in value:
            record_tensors(item, stream, seen)
    elif isinstance(value, dict):
        for item in value.values():
            record_tensors(item, stream, seen)
    elif hasattr(value, "__dict__") and not isinstance(value, (type, np.ndarray)):
        for item in vars(value).values():
            record_tensors(item, stream, seen)


def to_device(value, device, non_blocking=False):
    """Local. ``value`` (a tensor, :class:`~hpcgnn.loading.typed_rows.TypedRows` or None) on ``device``."""
    if value is None:
        return None
    if isinstance(value, TypedRows):
        return TypedRows(value.types.to(device, non_blocking=non_blocking),
                         {t: at.to(device, non_blocking=non_blocking) for t, at in value.positions.items()},
                         {t: rows.to(device, non_blocking=non_blocking) for t, rows in value.rows.items()})
    return value.to(device, non_blocking=non_blocking)


class DeviceStage:
    """Local. Moves a loader's batches onto ``device`` one step ahead (see the module docstring).

    Attributes
    ----------
    copy_s : float
        Seconds the trainer's thread spent staging batches since the last :meth:`reset`: packing
        them into the host buffers and starting their copies (the copies themselves run on the
        GPU, beside the compute).
    active : bool
        False on the CPU (unless ``HPCGNN_DEVICE_STAGE=1``): the stage hands batches on untouched.
    """

    def __init__(self, device, block_tensors, active=None):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.active = (self.cuda or forced_on_cpu()) if active is None else bool(active)
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.buffers = [HostBuffer(self.cuda), HostBuffer(self.cuda)] if self.active else []
        self.turn = 0
        self.copy_s = 0.0
        #: the feature rows kept on the device (:mod:`hpcgnn.loading.device_rows`), if any
        self.resident = None
        #: ``block_tensors(blocks, input_degree, device=, non_blocking=)``: the layers' view of the
        #: moved blocks, built in the copy stream (the model layer's adapter, passed in by the
        #: trainer: loading sits below the layers)
        self.block_tensors = block_tensors

    @property
    def resident_rows(self) -> int:
        """Feature rows kept on the device (0: none)."""
        return 0 if self.resident is None else self.resident.rows

    def describe(self) -> str:
        """Local. The start line's words for the rows kept on the device ('' when none)."""
        if self.resident is None:
            return ""
        return f", {self.resident.rows:,} feature rows on the device ({self.resident.nbytes / 2**20:,.0f} MiB)"

    def reset(self):
        """Local. Zero the staging time (at the start of an epoch)."""
        self.copy_s = 0.0

    def prepare(self, loader, resident_bytes=0):
        """Local. On a GPU, have ``loader``'s fetch step gather feature rows straight into pinned
        memory (:class:`~hpcgnn.loading.fetch.FieldFetch`), so they are not packed again here;
        with ``resident_bytes`` > 0 and an active stage, keep up to that many bytes of the
        feature rows this rank reads without the network on the device
        (:mod:`hpcgnn.loading.device_rows`), and have the fetch step hand over their slots."""
        fetch = getattr(loader, "fetch", None)
        if self.cuda and fetch is not None and hasattr(fetch, "pinned"):
            fetch.pinned = True
        field = getattr(fetch, "feature", None)
        if not (self.active and resident_bytes > 0 and field is not None and hasattr(fetch, "resident")):
            return
        row_bytes = 4 * int(np.prod(field.shape[1:], dtype=np.int64))  # kept as float32
        ranges = resident_ranges(field.book, field.comm.rank, field.window.node_ranks, row_bytes, resident_bytes)
        if ranges:
            self.resident = fetch.resident = ResidentRows(field, ranges, self.device)

    def __call__(self, batches):
        """Local. An iterator over ``batches`` (a loader) with each batch on the device."""
        self.reset()
        return StagedBatches(self, iter(batches)) if self.active else batches

    def send(self, batch):
        """Local. Start moving ``batch`` to the device; ``(moved batch, ready event or None)``."""
        t0 = time.perf_counter()
        buffer = self.buffers[self.turn]
        self.turn ^= 1
        buffer.reset(sum(_array_bytes(a, self.cuda) for a in _batch_arrays(batch)))
        stream = torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext()
        with stream:
            moved = self._moved(batch, buffer)
            ready = None
            if self.cuda:
                ready = torch.cuda.Event()
                ready.record(self.stream)
                buffer.copied = ready
        self.copy_s += time.perf_counter() - t0
        return moved, ready

    def receive(self, moved, ready):
        """Local. Hand over a batch sent by :meth:`send`: the compute stream waits for its copy."""
        if ready is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(ready)
            record_tensors(moved.blocks, compute)
            record_tensors([moved.feat, moved.label, moved.extra], compute)
        return moved

    def _moved(self, batch, buffer):
        device, cuda = self.device, self.cuda

        def put(value):
            if value is None:
                return None
            if cuda and isinstance(value, torch.Tensor) and value.is_pinned():  # gathered into pinned memory
                return value.to(device, non_blocking=True)
            host = buffer.put(torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray)
                              else value)
            return host.numpy() if isinstance(value, np.ndarray) else host.to(device, non_blocking=cuda)

        blocks = [dataclasses.replace(block, **{name: put(getattr(block, name)) for name in _BLOCK_ARRAYS
                                                 if getattr(block, name, None) is not None})
                  for block in batch.blocks]
        degree = put(batch.input_degree)
        feat = batch.feat
        if isinstance(feat, TypedRows):
            feat = TypedRows(put(feat.types), {t: put(at) for t, at in feat.positions.items()},
                             {t: put(rows) for t, rows in feat.rows.items()})
        elif isinstance(feat, BatchRows):  # gathered here, from the rows kept on the device
            feat = self.resident.assemble(feat, put)
        else:
            feat = put(feat)
        extra = {key: put(value) if isinstance(value, torch.Tensor) else value for key, value in batch.extra.items()}
        tensors = self.block_tensors(blocks, degree, device=device, non_blocking=cuda)
        return dataclasses.replace(batch, blocks=tensors, input_degree=None, feat=feat, label=put(batch.label),
                                   extra=extra)


class StagedBatches:
    """Local. The iterator :class:`DeviceStage` returns: batch ``i + 1`` is sent when batch ``i``
    is handed over."""

    def __init__(self, stage, batches):
        self.stage, self.batches = stage, batches
        self.ahead = None
        self._send_next()

    def _send_next(self):
        try:
            batch = next(self.batches)
        except StopIteration:
            self.ahead = None
            return
        self.ahead = self.stage.send(batch)

    def __iter__(self):
        return self

    def __next__(self):
        if self.ahead is None:
            raise StopIteration
        moved, ready = self.ahead
        self.stage.receive(moved, ready)
        self._send_next()  # its copy runs beside this batch's compute
        return moved

    def close(self):
        """Local. Stop the loader's iterator (its prefetch thread) and drop the batch sent ahead."""
        self.ahead = None
        close = getattr(self.batches, "close", None)
        if close is not None:
            close()
