"""``mpirun -np P python -m hpcgnn.evaluate --data DIR --checkpoint C`` (and ``hpcgnn evaluate``):
full-neighbourhood accuracy, loss and metric (``--metric``) of a checkpoint, optionally saving each
rank's output rows. A checkpoint directory is scored by its ``best`` checkpoint, the model the
training run selected and reported (``--latest``: its newest); the first line says which file
and epoch."""

from hpcgnn.runtime.abort import entry_point, run_program
from hpcgnn.runtime.allocator import keep_heap_memory
from hpcgnn.runtime.launch import start_world
from hpcgnn.runtime.watchdog import Watchdog
from hpcgnn.training.config import parse_evaluate_config
from hpcgnn.training.evaluate import evaluate_checkpoint


@entry_point("hpcgnn evaluate")
def main(argv=None):
    """Collective over MPI.COMM_WORLD. Parse the flags, evaluate, print every split's figures on rank 0."""
    options = parse_evaluate_config(argv)
    comm = start_world()  # one world: never several one-rank copies writing the same embeddings
    keep_heap_memory()
    # a context: a refused checkpoint must not leave a clock that ends the process later
    with Watchdog(comm, options.watchdog_s, "hpcgnn evaluate"):
        accuracy = evaluate_checkpoint(options, comm)
    if comm.rank == 0:
        print(" ".join(f"{k} {v:.4f}" for k, v in accuracy.items() if v is not None), flush=True)
    return 0


if __name__ == "__main__":
    run_program(main)
