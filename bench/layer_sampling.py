"""What one LADIES batch costs to sample: time per batch, nodes per layer and the in-edges of
each layer's destinations, beside neighbour sampling's (10,25) on the same seeds.

LADIES' importance is over every in-neighbour of a layer's destinations, so it reads all of
those in-edges; so does LABOR (DGL's LaborSampler: a variate per in-neighbour of each row).
Neighbour sampling draws positions from the degree alone and reads only what it keeps. Its
column shows how many in-edges a per-node sampler's middle layer (10,25) has below it.

    mpiexec -n 2 python bench/layer_sampling.py [--graph medium --batches 10 --layer-sizes 8000,4000]

Each rank samples ``--batches`` batches of 1000 of its training seeds after 3 warm-up ones;
rank 0 prints one JSON line per sampler (milliseconds per batch, the mean over ranks), LADIES'
with the milliseconds per batch of each phase of its layers (reading the in-edge lists, the
column norms, the inclusion probabilities, the candidates' uniforms, the kept edges).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


class PhaseTimer:
    """Milliseconds spent in named functions of LADIES' layer (hpcgnn.sampling.layer's module
    attributes and the graph's ``in_edges``, wrapped in place while it is active)."""

    PHASES = {"_layerwise.column_norms": "column_norms", "_layerwise.keep_edges": "keep_edges",
              "inclusion_probabilities": "inclusion", "unit_uniform": "uniforms"}

    def __init__(self, graph):
        from hpcgnn.sampling import layer

        self.total = dict.fromkeys(["in_edges", *self.PHASES.values()], 0.0)
        self.patches = [(graph, "in_edges", graph.in_edges, "in_edges")]
        for path, name in self.PHASES.items():
            owner = layer
            *parents, attr = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            self.patches.append((owner, attr, getattr(owner, attr), name))

    def _wrap(self, function, name):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.total[name] += time.perf_counter() - t0
        return timed

    def __enter__(self):
        for owner, attr, function, name in self.patches:
            setattr(owner, attr, self._wrap(function, name))
        return self

    def __exit__(self, *exc):
        graph, *modules = self.patches
        delattr(graph[0], "in_edges")  # the instance's wrapper: the class's method shows through again
        for owner, attr, function, _ in modules:
            setattr(owner, attr, function)


def measure(graph, sampler, batches, comm, phases=None):
    """Per batch: time, nodes of each layer (input first, seeds last) and in-edges of each layer's
    destinations (input layer first); with a :class:`PhaseTimer`, its phases' ms per batch."""
    times, nodes, edges = [], [], []
    for i, seeds in enumerate(batches):
        if i == 3 and phases is not None:  # after the warm-up batches
            phases.total = dict.fromkeys(phases.total, 0.0)
        t0 = time.perf_counter()
        batch = sampler.sample(graph, seeds, seed=100 + i)
        if i < 3:
            continue
        times.append(time.perf_counter() - t0)
        nodes.append([block.num_src for block in batch.blocks] + [batch.blocks[-1].num_dst])
        layer_dst = [batch.input_gids[:block.num_dst] for block in batch.blocks]
        edges.append([int(graph.in_degrees(dst).sum()) for dst in layer_dst])
    ms = comm.allreduce(1000 * float(np.mean(times))) / comm.size
    row = {"ms_per_batch": round(ms, 1), "nodes_per_layer": np.mean(nodes, axis=0).round().astype(int).tolist(),
           "in_edges_of_layer": np.mean(edges, axis=0).round().astype(int).tolist()}
    if phases is not None:
        row["phase_ms_per_batch"] = {name: round(comm.allreduce(1000 * total / len(times)) / comm.size, 1)
                                     for name, total in phases.total.items()}
    return row


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
        with PhaseTimer(graph) as phases:
            row = measure(graph, LayerSampler(sizes), batches, comm, phases)
        rows = [{"sampler": f"layer {args.layer_sizes}", "ranks": comm.size, **row}]
        if comm.rank == 0:
            print(json.dumps(rows[-1]), flush=True)
        row = measure(graph, NeighborSampler([10, 25]), batches, comm)
        rows.append({"sampler": "neighbor 10,25", "ranks": comm.size, **row})
        if comm.rank == 0:
            print(json.dumps(rows[-1]), flush=True)
            common.record(rows, title=f"One LADIES batch against neighbour sampling, {args.graph} graph (ms per batch)")


if __name__ == "__main__":
    main()
