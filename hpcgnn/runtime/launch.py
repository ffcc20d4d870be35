"""Whether this process is the one MPI world its launcher started, and not a copy of it.

A launcher that does not share a process-management interface (PMI) with the MPI library
starts independent processes that each see a world of one rank: ``srun`` on a cluster whose
``MpiDefault`` is ``none``, or the ``mpiexec`` of another MPI. Each copy would do the whole
job and write the same outputs. Every entry point therefore compares the number of tasks its
launcher says it started with the size of ``MPI.COMM_WORLD`` (the MPI commands, through
:func:`start_world`) or with one (``generate`` and ``inspect``, which are not MPI programs),
and stops with one line naming the launcher's variable and the remedy.
"""
from __future__ import annotations

import os
import sys

from hpcgnn.runtime.comm import world
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.watchdog import init_timer, start_phase

#: (tasks, this task's index) as each launcher exports them, the MPI launchers' own first:
#: their numbers describe the world MPI builds, while under ``mpiexec`` inside an allocation
#: SLURM's step variables describe the step that runs mpiexec's proxies
_LAUNCHER_VARIABLES = (
    ("PMI_SIZE", "PMI_RANK"),                            # MPICH's hydra, srun --mpi=pmi2, Intel MPI
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),    # Open MPI's mpirun
    ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"),      # MVAPICH's mpirun_rsh
    ("SLURM_STEP_NUM_TASKS", "SLURM_PROCID"),            # srun (set in job steps, not in the batch script)
)
_SRUN_REMEDY = ("srun gave MPI no PMI (the site's MpiDefault is probably 'none'): launch with "
               "'srun --mpi=pmi2' (see 'srun --mpi=list') or with mpiexec inside the allocation, as jobs/*.sbatch do")
_OTHER_REMEDY = "the launcher belongs to another MPI than the one mpi4py loads: use that MPI's own mpiexec"


def launcher_tasks(environ=None) -> tuple[str, int, int | None] | None:
    """Local. ``(variable, tasks, this task's index or None)`` as the launcher of this process
    exported them; None for a process no launcher started (a plain ``python -m``)."""
    environ = os.environ if environ is None else environ
    for size_name, rank_name in _LAUNCHER_VARIABLES:
        tasks = _integer(environ.get(size_name))
        if tasks is not None and tasks > 0:
            return size_name, tasks, _integer(environ.get(rank_name))
    return None


def check_world(comm, environ=None):
    """Local. ``comm`` (the world), once it is known to be all the tasks the launcher started.

    Raises
    ------
    InputError
        The launcher started a different number of tasks than ``comm`` has ranks: several
        independent copies of the job (each a world of one rank), never one MPI job.
    """
    found = launcher_tasks(environ)
    if found is None or found[1] == comm.size:
        return comm
    name, tasks, index = found
    this = f" (this is task {index + 1})" if index is not None else ""
    remedy = _SRUN_REMEDY if name == "SLURM_STEP_NUM_TASKS" else _OTHER_REMEDY
    raise InputError(None, f"{tasks} tasks were started but MPI's world has {comm.size} "
                     f"rank{'s' if comm.size != 1 else ''}{this}: independent copies, not one MPI job; "
                     f"{remedy}", name, tasks)


def start_world(environ=None, watchdog_s=0.0, prog="hpcgnn"):
    """Collective over MPI.COMM_WORLD. The world of an entry point (MPI is initialised here).

    It is checked to be the one world the launcher started (:func:`check_world`); then, once
    every rank has attached it, the name of MPICH's start-up shared memory is unlinked
    (:func:`unlink_mpi_segments`), so that no way of ending the job leaves it behind.

    With ``watchdog_s`` > 0 (``--watchdog-s``) a rank of several stopped while the job starts
    ends the job instead of leaving the others waiting: ``MPI_Init`` is timed by
    :func:`~hpcgnn.runtime.watchdog.init_timer`, and from then on the ranks' liveness is watched
    (:func:`~hpcgnn.runtime.watchdog.start_phase`) until the caller's own watchdog takes over.

    Raises
    ------
    InputError
        On every rank: the launcher started independent copies (see :func:`check_world`).
    """
    launched = launcher_tasks(environ)
    several = launched is not None and launched[1] > 1
    initialised = sys.modules.get("mpi4py.MPI") is not None  # MPI_Init ran already: nothing to time
    with init_timer(watchdog_s if several and not initialised else 0, prog):
        comm = world()
    comm = check_world(comm, environ)
    if comm.size > 1:
        comm.Barrier()  # every rank of the node has opened the segment by its name
        unlink_mpi_segments()
        start_phase(comm, watchdog_s, prog)
    return comm


def check_single_process(environ=None):
    """Local. Refuse to run as one of several tasks, for a command that is not an MPI program
    (every copy would write the same output).

    Raises
    ------
    InputError
        The launcher started more than one task.
    """
    found = launcher_tasks(environ)
    if found is not None and found[1] > 1:
        raise InputError(None, f"this command runs as one process, but the launcher started {found[1]} "
                         "copies of it: run it without srun or mpiexec", found[0], found[1])


#: MPICH names the shared memory of its start-up after the job's PMI name and unlinks it only
#: in ``MPI_Finalize``. A job that aborts (or is killed) leaves it behind, and a requeued SLURM
#: job, whose steps get their PMI names again (``<job id>.<step id>``), would attach to its
#: stale contents and fail in ``MPI_Init``.
_MPI_SEGMENT_PREFIXES = ("mpich_shm_", "mpich_vci_")


def unlink_mpi_segments(maps="/proc/self/maps") -> list[str]:
    """Local. Unlink the names of the MPI library's named shared-memory segments that this
    process maps (``/dev/shm/mpich_shm_*``); returns the paths unlinked.

    The memory stays mapped, and MPICH needs the names only while the ranks of a node attach:
    unlinked once every rank has, they are gone whichever way the job ends.
    """
    try:
        with open(maps) as fh:
            paths = {line.split(None, 5)[5].strip() for line in fh if line.count(" ") >= 5 and "/dev/shm/" in line}
    except OSError:
        return []
    unlinked = []
    for path in sorted(paths):
        name = os.path.basename(path)
        if os.path.dirname(path) == "/dev/shm" and name.startswith(_MPI_SEGMENT_PREFIXES) and " " not in name:
            try:
                os.unlink(path)
                unlinked.append(path)
            except OSError:  # another rank of this node was first
                pass
    return unlinked


def _integer(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
