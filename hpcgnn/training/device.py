"""Where a rank computes (``--device cpu|cuda|auto``), and what the GPU path may not do.

Sampling and the feature gather always run on the CPU (the partition, the RMA windows and the
shared-memory rows are host memory); with ``--device cuda`` the model, its optimizer state and
every batch's blocks, features and labels live on one GPU per rank. Each rank takes GPU
``local rank % visible GPUs``, the local rank counted among the ranks under the same kernel
(:func:`hpcgnn.runtime.comm.host_id`: the ranks that see the same GPUs), so several ranks may share
one GPU (their processes then interleave on it; the start line says so).

A job asked for ``cuda`` where some rank sees no GPU stops before it opens the dataset, every
rank with the same one line naming the ranks and hosts without one (exit 2).

Whether the MPI library reads device memory (CUDA-aware MPI) is asked of the library itself
(``MPIX_Query_cuda_support``, which MPICH and Open MPI export, or the MPI 4.1 memory kinds of
``MPI_INFO_ENV``); ``HPCGNN_CUDA_AWARE_MPI=0|1`` overrides the answer. Without it, gradients
cross through pinned host buffers (:mod:`hpcgnn.training.gradsync`); it is never required.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

import torch

from hpcgnn.runtime.comm import host_id, mpi
from hpcgnn.runtime.errors import InputError

#: where the model computes (--device): auto is cuda where torch sees a GPU, else cpu
DEVICES = ("cpu", "cuda", "auto")

__all__ = ["DEVICES", "Placement", "cuda_aware_mpi", "cuda_memory_peak_mib", "device_name", "place_rank",
           "refuse_on_device", "resident_bytes"]

#: the share of a GPU's memory that ``--device-rows-mb`` by default gives to feature rows, split
#: among the ranks that share the GPU (the rest holds the model, its batches and their activations)
RESIDENT_SHARE = 0.25

#: set to 0 or 1: whether the MPI library reads and writes GPU memory, instead of asking it
CUDA_AWARE_ENV = "HPCGNN_CUDA_AWARE_MPI"
#: samplers whose batches the GPU path cannot take, and why
REFUSED_SAMPLERS = {
    "vr": "its history rows live in CPU windows and are attached to the blocks after the batch is on the GPU",
}


def device_name(requested) -> str:
    """Local. The device ``--device requested`` means on this process: ``auto`` is ``cuda`` where
    torch sees a GPU, else ``cpu``."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def _no_gpu_reason() -> str:
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is built without CUDA"
    return "torch sees no GPU (CUDA_VISIBLE_DEVICES, driver)"


@dataclass(frozen=True)
class Placement:
    """Local. Where this rank computes: ``device``; ``note``: the start line's words for it;
    ``cuda_aware``: every rank's MPI reads device memory; ``sharing``: most ranks on one GPU."""

    device: torch.device
    note: str
    cuda_aware: bool = False
    sharing: int = 1

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def place_rank(name, comm) -> Placement:
    """Collective over comm. Choose this rank's device for ``--device name`` (``cpu`` or ``cuda``;
    ``auto`` is resolved per process first) and make its GPU the current one.

    Raises
    ------
    InputError
        On every rank alike, naming each rank (and its host) that sees no GPU when ``cuda`` was asked for.
    """
    name = device_name(name)
    if name == "cpu":
        return Placement(torch.device("cpu"), "device cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    facts = comm.allgather((host_id(), os.uname().nodename, count, "" if count else _no_gpu_reason()))
    missing = [(rank, host, reason) for rank, (_, host, n, reason) in enumerate(facts) if n == 0]
    if missing:
        named = ", ".join(f"rank {rank} on host {host}" for rank, host, _ in missing[:4])
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        raise InputError(None, f"no CUDA GPU visible to {named}{more} ({missing[0][2]}): run with --device cpu, or "
                         "--device auto to use GPUs where there are some", "--device", "cuda")
    local_rank = sum(1 for other in facts[:comm.rank] if other[0] == facts[comm.rank][0])
    index = local_rank % count
    torch.cuda.set_device(index)
    aware = bool(comm.allreduce(int(cuda_aware_mpi()), op=mpi().MIN))
    ranks_per_host, gpus_per_host = {}, {}
    for host, _, n, _ in facts:
        ranks_per_host[host] = ranks_per_host.get(host, 0) + 1
        gpus_per_host[host] = n
    sharing = max(-(-ranks // gpus_per_host[host]) for host, ranks in ranks_per_host.items())
    note = f"device cuda ({torch.cuda.get_device_name(index)}"
    if sharing > 1:
        note += f"; up to {sharing} ranks share each GPU"
    note += ", CUDA-aware MPI)" if aware else ", gradients through pinned host memory)"
    return Placement(torch.device("cuda", index), note, aware, sharing)


def cuda_aware_mpi() -> bool:
    """Local. Whether the MPI library this process loaded reads and writes CUDA device memory
    (``HPCGNN_CUDA_AWARE_MPI`` overrides; False when nothing says so)."""
    forced = os.environ.get(CUDA_AWARE_ENV, "")
    if forced in ("0", "1"):
        return forced == "1"
    MPI = mpi()
    for path in _mpi_libraries():
        try:
            query = ctypes.CDLL(path).MPIX_Query_cuda_support
        except (OSError, AttributeError):
            continue
        query.restype = ctypes.c_int
        return bool(query())
    kinds = MPI.INFO_ENV.Get("mpi_memory_alloc_kinds") if MPI.INFO_ENV != MPI.INFO_NULL else None
    return bool(kinds) and "cuda" in kinds


def _mpi_libraries() -> list:
    """The MPI shared libraries mapped into this process (the one mpi4py was built against)."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "/libmpi" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith("libmpi") and ".so" in p)


def refuse_on_device(config, where=None):
    """Local. Refuse, in one line naming the flag, what the GPU path does not take (``config`` a
    :class:`~hpcgnn.training.config.TrainConfig` whose device is ``cuda``)."""
    why = REFUSED_SAMPLERS.get(config.sampler.name)
    if why is not None:
        raise InputError(where, f"does not run on --device cuda: {why}; train it with --device cpu", "--sampler",
                         config.sampler.name)


def cuda_memory_peak_mib(device) -> float:
    """Local. The most GPU memory torch's allocator held on ``device`` since the last reset, MiB
    (0 on the CPU)."""
    if device.type != "cuda":
        return 0.0
    return torch.cuda.max_memory_allocated(device) / 2**20


def resident_bytes(placement, mb) -> int:
    """Local. The bytes of feature rows this rank keeps on its device (``--device-rows-mb mb``;
    -1: :data:`RESIDENT_SHARE` of its GPU's memory over the ranks sharing it, none on the CPU)."""
    if mb >= 0:
        return int(mb * 2**20)
    if not placement.cuda:
        return 0
    total = torch.cuda.get_device_properties(placement.device).total_memory
    return int(RESIDENT_SHARE * total / max(placement.sharing, 1))
