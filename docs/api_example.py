"""The Python API end to end on a graph this script makes itself (the README quotes it).

    mpirun -np 2 python docs/api_example.py [WORKDIR]      # or: python docs/api_example.py (one rank)

Rank 0 generates a small graph with planted classes and partitions it into one part per rank;
then every rank loads its part, samples mini-batches, reads features of any owner, keeps a
learnable embedding, trains through the library's loop and evaluates on the full graph.
"""
import os
import sys
import tempfile

from hpcgnn import DistEmbedding, DistGraph, DistTensor, NeighborSampler, NodeDataLoader, SparseAdam, node_split
from hpcgnn.nn import SAGE
from hpcgnn.prep.generate import sbm_graph
from hpcgnn.prep.partition import partition_graph
from hpcgnn.prep.transform import prepare
from hpcgnn.runtime.comm import world
from hpcgnn.training.config import parse_train_config
from hpcgnn.training.loop import run

comm = world()                                    # MPI.COMM_WORLD, thread level MULTIPLE
work = sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(), "hpcgnn-api-example")
parts = os.path.join(work, f"sbm{comm.size}")
if comm.rank == 0 and not os.path.exists(parts):
    graph = prepare(sbm_graph(2000, num_classes=4, avg_degree=8, homophily=0.8, feat_dim=16, seed=0),
                    symmetrize_edges=True)       # Local. any reader's or generator's Graph
    meta = partition_graph(graph, parts, num_parts=comm.size, method="metis")
    print("edge cut", round(meta["partitioner"]["edge_cut_fraction"], 3))
comm.barrier()

g = DistGraph(parts, comm)                        # Collective. rank r loads part r
x = g.ndata["feat"][[0, 5, g.num_nodes - 1]]      # Local. any rows, any owner (a torch tensor)
h = DistTensor((g.num_nodes, 16), "float32", "h", comm=comm, book=g.book)  # Collective
h[[1, 2]] = x[:2]
h.barrier()                                       # writes are visible to all after the barrier
h.assign([3], x[2:3])                             # Collective: all ranks write at once, the highest rank's row kept
emb = DistEmbedding(g.num_nodes, 8, "emb", comm=comm, book=g.book)
opt = SparseAdam([emb], lr=0.01)                  # rows updated by their owners, state sharded
train = node_split("train_mask", g)               # Collective. local nodes first, equal counts
loader = NodeDataLoader(g, train, NeighborSampler([5, 10]), batch_size=200)
model = SAGE(g.ndata["feat"].shape[1], 32, 4)
for batch in loader:                              # the same number of batches on every rank
    logits = model(batch.blocks, batch.feat)      # blocks: input side first
print(f"rank {comm.rank}: {len(loader)} batches, last logits {tuple(logits.shape)}")
emb.close()
h.close()
g.close()                                         # Collective. windows are MPI resources

# The whole training loop, with the flags of `hpcgnn train`; evaluation is full-neighbourhood.
model, history = run(parse_train_config(["--data", parts, "--epochs", "3", "--hidden", "32", "--fanouts", "5,10",
                                 "--batch-size", "200", "--lr", "0.01", "--eval-every", "1", "--no-progress"]), comm)
if comm.rank == 0:
    print(f"test accuracy {history[-1]['test_acc']:.3f} (chance 0.25)")
