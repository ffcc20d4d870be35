"""``mpirun -np P python -m hpcgnn.train --data DIR ...`` (and ``hpcgnn train``): train a GNN,
one MPI rank per part. Parse the flags into a :class:`~hpcgnn.training.config.TrainConfig`, then
run :func:`hpcgnn.training.loop.run`."""

from hpcgnn.runtime.abort import entry_point, run_program
from hpcgnn.runtime.allocator import keep_heap_memory
from hpcgnn.runtime.launch import start_world
from hpcgnn.training.config import parse_train_config
from hpcgnn.training.loop import run


@entry_point("hpcgnn train")
def main(argv=None):
    """Collective over MPI.COMM_WORLD. Parse the flags, then train (:func:`hpcgnn.training.loop.run`)."""
    config = parse_train_config(argv)
    # one world: never several one-rank copies writing the same checkpoints; a rank stopped while the
    # job starts (MPI_Init, opening the dataset) ends it, as one stopped while it trains does
    comm = start_world(watchdog_s=config.runtime.watchdog_s, prog="hpcgnn train")
    keep_heap_memory()
    run(config, comm)
    return 0


if __name__ == "__main__":
    run_program(main)
