"""Every write of a training run fails the same way on a full disk: one line naming the file,
nothing half-written. A full disk is a small RLIMIT_FSIZE (set in a subprocess, or on one rank
for the length of a write) or ``/dev/full``."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHECKPOINT_ONTO_FULL_DISK = textwrap.dedent("""
    import os, resource, signal, sys
    import torch
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.training.checkpoint import save_checkpoint

    def state(epoch, values):
        return {"model": {"w": torch.zeros(values)}, "optimizer": {}, "config": {}, "epoch": epoch, "rng": [],
                "history": []}

    directory = sys.argv[1]
    save_checkpoint(directory, state(1, 10), best=True)  # fits
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
    try:
        save_checkpoint(directory, state(2, 100_000), best=True)  # 400 kB: the disk is full
    except InputError as exc:
        print(exc)
""")


def test_a_checkpoint_onto_a_full_disk_is_one_line_and_leaves_the_last_one(tmp_path):
    directory = tmp_path / "ck"
    proc = subprocess.run([sys.executable, "-c", CHECKPOINT_ONTO_FULL_DISK, str(directory)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == f"{directory / 'epoch-0002.pt'}: cannot write (File too large)\n"
    assert sorted(os.listdir(directory)) == ["best", "epoch-0001.pt", "latest"]  # no temporary left
    assert (directory / "latest").read_text() == (directory / "best").read_text() == "epoch-0001.pt\n"


def test_metrics_onto_a_full_device_names_the_file(tmp_path):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    partition_graph(clustered_graph(num_nodes=100), tmp_path / "d", 1, "metis")
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    proc = subprocess.run([sys.executable, "-m", "hpcgnn.train", "--data", str(tmp_path / "d"), "--epochs", "1",
                           "--hidden", "4", "--fanouts", "2,2", "--no-progress", "--metrics-file", "/dev/full"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=dict(env, OMP_NUM_THREADS="1"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "hpcgnn train: error: /dev/full: cannot write (No space left on device)\n"


@pytest.mark.mpi(sizes=(2,))
def test_a_checkpoint_whose_shard_fails_on_one_rank_fails_on_every_rank_and_leaves_none(nranks, comm, shared_tmp):
    import resource
    import signal

    from hpcgnn.runtime.errors import InputError
    from hpcgnn.testing.datasets import make_dataset
    from hpcgnn.training.checkpoint import save_session
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.session import open_session

    path, _ = make_dataset(comm, shared_tmp, nranks, name="shards", num_nodes=200)
    ck = os.path.join(shared_tmp, "ck")
    session = open_session(parse_train_config(["--data", path, "--hidden", "4", "--fanouts", "2,2", "--embed-dim", "64",
                                       "--no-progress", "--prefetch", "0"]), comm)
    try:
        save_session(session, ck, 1, [], best=True)
        comm.barrier()
        before = sorted(os.listdir(ck))
        comm.barrier()
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if comm.rank == 1:  # its shard, 100 rows x 64 floats, does not fit
            resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, hard))
        try:
            with pytest.raises(InputError) as exc:
                save_session(session, ck, 2, [], best=True)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)
        assert "\n" not in str(exc.value) and "File too large" in str(exc.value), str(exc.value)
        assert "epoch-0002.rank-00001" in str(exc.value), str(exc.value)
        comm.barrier()
        assert sorted(os.listdir(ck)) == before  # no shard of epoch 2 on any rank, latest and best unmoved
        assert open(os.path.join(ck, "latest")).read() == "epoch-0001.pt\n"
    finally:
        comm.barrier()
        session.close()
