"""What one LADIES batch costs to sample: time per batch, nodes per layer and the in-edges of
each layer's destinations, beside neighbour sampling's (10,25) on the same seeds.

LADIES' importance is over every in-neighbour of a layer's destinations, so it reads all of
those in-edges; so does LABOR (DGL's LaborSampler: a variate per in-neighbour of each row).
Neighbour sampling draws positions from the degree alone and reads only what it keeps. Its
column shows how many in-edges a per-node sampler's middle layer (10,25) has below it.

    mpiexec -n 2 python bench/layer_sampling.py [--graph medium --batches 10 --layer-sizes 8000,4000]

Each rank samples ``--batches`` batches of 1000 of its training seeds after 3 warm-up ones;
rank 0 prints one JSON line per sampler (milliseconds per batch, the mean over ranks).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def measure(graph, sampler, batches, comm):
    """Per batch: time, nodes of each layer (input first, seeds last) and in-edges of each layer's
    destinations (input layer first)."""
    times, nodes, edges = [], [], []
    for i, seeds in enumerate(batches):
        t0 = time.perf_counter()
        batch = sampler.sample(graph, seeds, seed=100 + i)
        if i < 3:
            continue
        times.append(time.perf_counter() - t0)
        nodes.append([block.num_src for block in batch.blocks] + [batch.blocks[-1].num_dst])
        layer_dst = [batch.input_gids[:block.num_dst] for block in batch.blocks]
        edges.append([int(graph.in_degrees(dst).sum()) for dst in layer_dst])
    ms = comm.allreduce(1000 * float(np.mean(times))) / comm.size
    return {"ms_per_batch": round(ms, 1), "nodes_per_layer": np.mean(nodes, axis=0).round().astype(int).tolist(),
            "in_edges_of_layer": np.mean(edges, axis=0).round().astype(int).tolist()}


def main():
    from hpcgnn import DistGraph, NeighborSampler, node_split
    from hpcgnn.runtime.abort import install_abort_hook
    from hpcgnn.runtime.allocator import keep_heap_memory
    from hpcgnn.runtime.comm import world
    from hpcgnn.sampling.layer import LayerSampler

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graph", default="medium", choices=sorted(common.GRAPHS))
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--layer-sizes", default="8000,4000")
    args = parser.parse_args()
    keep_heap_memory()  # as hpcgnn.train does
    install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting
    comm = world()
    path = common.ensure_graph(*common.GRAPHS[args.graph]) if comm.rank == 0 else None
    parts = common.ensure_parts(path, comm.size, f"samplers_{args.graph}") if comm.rank == 0 else None
    parts = comm.bcast(parts)
    if comm.rank == 0:
        print("# machine:", json.dumps(common.machine_info()), flush=True)
    with DistGraph(parts, comm) as graph:
        train = node_split("train_mask", graph, seed=0)
        rng = np.random.default_rng(comm.rank)
        batches = [np.sort(rng.choice(train, 1000, replace=False)) for _ in range(args.batches + 3)]
        sizes = [int(s) for s in args.layer_sizes.split(",")]
        for name, sampler in ((f"layer {args.layer_sizes}", LayerSampler(sizes)),
                              ("neighbor 10,25", NeighborSampler([10, 25]))):
            row = measure(graph, sampler, batches, comm)
            if comm.rank == 0:
                print(json.dumps({"sampler": name, "ranks": comm.size, **row}), flush=True)


if __name__ == "__main__":
    main()
