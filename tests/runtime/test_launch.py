"""One MPI world, never several copies: every entry point compares the tasks its launcher
started with MPI's world, and an aborting job unlinks MPICH's named start-up segments.

The environments below are what the launchers set, as measured on SLURM 22.05 with the pip
MPICH: ``srun`` under ``MpiDefault=none`` (two copies of a world of one), ``srun --mpi=pmi2``,
and MPICH's ``mpiexec`` inside an allocation (its proxies run as a SLURM step of one task).
"""
import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.launch import check_single_process, check_world, launcher_tasks, unlink_mpi_segments
from tests.conftest import mpiexec_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BATCH_SCRIPT = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
SRUN_WITHOUT_PMI = dict(BATCH_SCRIPT, SLURM_STEP_ID="0", SLURM_STEP_NUM_TASKS="2", SLURM_PROCID="1")
SRUN_PMI2 = dict(SRUN_WITHOUT_PMI, PMI_SIZE="2", PMI_RANK="1", PMI_JOBID="7.0")
MPIEXEC_IN_ALLOCATION = dict(BATCH_SCRIPT, SLURM_STEP_ID="3", SLURM_STEP_NUM_TASKS="1", SLURM_NTASKS="1",
                             PMI_SIZE="2", PMI_RANK="1")


class World:
    def __init__(self, size):
        self.size = size


def test_the_launcher_that_started_the_process_is_read_from_its_variables():
    assert launcher_tasks({}) is None
    assert launcher_tasks(BATCH_SCRIPT) is None  # the batch script itself: a plain process
    assert launcher_tasks(SRUN_WITHOUT_PMI) == ("SLURM_STEP_NUM_TASKS", 2, 1)
    assert launcher_tasks(SRUN_PMI2) == ("PMI_SIZE", 2, 1)
    # mpiexec's world, not the one-task step that runs its proxies
    assert launcher_tasks(MPIEXEC_IN_ALLOCATION) == ("PMI_SIZE", 2, 1)
    assert launcher_tasks({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3"}) == ("OMPI_COMM_WORLD_SIZE", 4, 3)
    assert launcher_tasks({"PMI_SIZE": "many", "SLURM_STEP_NUM_TASKS": "2"}) == ("SLURM_STEP_NUM_TASKS", 2, None)


def test_copies_of_a_world_of_one_are_refused_and_one_world_passes():
    world = World(2)
    assert check_world(world, SRUN_PMI2) is world
    assert check_world(world, MPIEXEC_IN_ALLOCATION) is world
    assert check_world(World(1), BATCH_SCRIPT).size == 1
    assert check_world(World(1), {}).size == 1
    with pytest.raises(InputError) as exc:
        check_world(World(1), SRUN_WITHOUT_PMI)
    text = str(exc.value)
    assert text.startswith("field 'SLURM_STEP_NUM_TASKS': 2 tasks were started but MPI's world has 1 rank "
                           "(this is task 2)")
    assert "srun --mpi=pmi2" in text and "mpiexec" in text and text.endswith("(value 2)") and "\n" not in text
    with pytest.raises(InputError, match="field 'PMI_SIZE': 2 tasks .* use that MPI's own mpiexec"):
        check_world(World(1), {"PMI_SIZE": "2"})


def test_commands_that_are_not_mpi_programs_run_as_one_task():
    check_single_process({})
    check_single_process(BATCH_SCRIPT)
    check_single_process(dict(SRUN_WITHOUT_PMI, SLURM_STEP_NUM_TASKS="1"))
    with pytest.raises(InputError, match="field 'SLURM_STEP_NUM_TASKS': this command runs as one process, but the "
                                         "launcher started 2 copies"):
        check_single_process(SRUN_WITHOUT_PMI)


def run_as_copy(*argv, cwd):
    """A process started as task 2 of 2 by srun under MpiDefault=none: a world of one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "SLURM", "HYDRA", "MPI"))}
    env.update(SRUN_WITHOUT_PMI, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_every_entry_point_stops_a_copy_with_one_line_and_writes_nothing(tmp_path):
    from hpcgnn.prep.read.npz import write_npz
    from hpcgnn.testing.graphs import clustered_graph

    write_npz(clustered_graph(num_nodes=200), tmp_path / "g.npz")
    (tmp_path / "d").mkdir()
    for argv in (("hpcgnn.partition", "g.npz", "--parts", "2", "--out", "out"),
                 ("hpcgnn.train", "--data", "d", "--checkpoint-dir", "ck"),
                 ("hpcgnn.evaluate", "--data", "d", "--checkpoint", "ck", "--save-embeddings", "emb"),
                 ("hpcgnn.generate", "sbm", "--nodes", "50", "--avg-degree", "4", "--out", "new.npz"),
                 ("hpcgnn.convert", "g.npz", "new.h5"),
                 ("hpcgnn.inspect", "d")):
        proc = run_as_copy(*argv, cwd=tmp_path)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(f"hpcgnn {argv[0].split('.')[1]}: error: field 'SLURM_STEP_NUM_TASKS': "), \
            proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["d", "g.npz"]  # no output, lock or temporary of any copy
    assert os.listdir(tmp_path / "d") == []


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
def test_only_the_mpi_segments_this_process_maps_are_unlinked(tmp_path):
    # not a hexadecimal tag: MPICH names a live segment of this very process mpich_shm_<hex>_0
    tag = f"hpcgnn-test-{uuid.uuid4().hex}"
    mine, other, data = (f"/dev/shm/mpich_shm_{tag}_0", f"/dev/shm/mpich_shm_{tag}_1", f"/dev/shm/data-{tag}")
    for path in (mine, other, data):
        open(path, "x").close()
    maps = tmp_path / "maps"
    maps.write_text(f"7f00-7f01 rw-s 00000000 00:1a 11 {mine}\n"
                    f"7f01-7f02 rw-s 00000000 00:1a 12 {data}\n"
                    f"7f02-7f03 rw-s 00000000 00:1a 13 /dev/shm/mpich_shm_{tag}_2 (deleted)\n"
                    "7f03-7f04 r-xp 00000000 08:01 14 /usr/lib/libc.so.6\n7f04-7f05 rw-p 00000000 00:00 0\n")
    try:
        assert unlink_mpi_segments(str(maps)) == [mine]
        assert not os.path.exists(mine) and os.path.exists(other) and os.path.exists(data)
    finally:
        for path in (mine, other, data):
            if os.path.exists(path):
                os.unlink(path)


def test_a_job_that_aborts_leaves_no_segment_for_a_restart_under_its_pmi_name(tmp_path):
    """A requeued SLURM job's steps get their PMI names again; MPICH would attach to a segment
    an aborted start left under that name, and fail in MPI_Init."""
    script = tmp_path / "abort.py"
    script.write_text(textwrap.dedent("""
        import json
        from hpcgnn.runtime.abort import fail
        from hpcgnn.runtime.launch import start_world

        comm = start_world()
        maps = [line.split(None, 5)[5].strip() for line in open("/proc/self/maps") if "/dev/shm/mpich_" in line]
        if comm.rank == 0:
            print(json.dumps(maps), flush=True)
        comm.Barrier()
        fail("job", "stopping")
    """))
    proc = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, str(script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode != 0, proc.stderr
    segments = json.loads(proc.stdout.splitlines()[0])
    assert any(s.startswith("/dev/shm/mpich_shm_") for s in segments), segments
    assert not [s for s in segments if os.path.exists(s)], segments
