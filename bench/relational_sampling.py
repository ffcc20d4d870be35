"""Per-relation neighbour sampling: seeds per second of the ``relational`` sampler on a typed graph
with IGBH's schema, beside the homogeneous neighbour sampler on the same graph.

    python bench/relational_sampling.py                      # one rank, the "small" graph
    python bench/relational_sampling.py --size quick         # a smoke test of seconds
    mpiexec -n 2 python bench/relational_sampling.py         # 2 ranks: remote rows too

Graph    :func:`hpcgnn.prep.generate_hetero.hetero_graph` (paper, author, institute, fos; cites,
         written_by, affiliated_to, topic and their ``rev_`` reverses: 8 relations), drawn and
         METIS-partitioned into one part per rank once per size and seed (bench/work).
Batches  ``--batch-size`` distinct training papers per rank, ``--batches`` timed after 3 warm-up
         ones, the same seeds for every sampler.
Rows     ``relational``: ``--fanouts`` in-neighbours per node, layer AND relation
         (:class:`~hpcgnn.sampling.relational.RelationalSampler`, blocks with ``etype``);
         ``neighbor``: ``--fanouts`` per node and layer over all relations together
         (:class:`~hpcgnn.sampling.neighbor.NeighborSampler`), the cost of sampling without
         relations; ``hop``: one call of :func:`~hpcgnn.graph.typed_sampling.sample_neighbors_by_relation`
         on the batch's seeds with the last fanout (the primitive without relabelling).
Figures  seeds/s = seeds of all ranks / the slowest rank's seconds; edges per block (rank 0's
         mean, input block first).

Importable: :func:`typed_dataset` prepares the graph and :func:`measure` times one sampler on an
open DistGraph (a comparison script can call both on its own graph).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

#: nodes over all types and edges before reverses, per size
SIZES = {"quick": (6_000, 30_000), "small": (200_000, 1_000_000), "full": (2_000_000, 10_000_000)}
WARMUP = 3


def typed_dataset(size, parts, seed=0, comm=None) -> tuple[str, dict]:
    """Collective over comm (None: serial). The IGBH-schema graph of ``size`` (a :data:`SIZES` key)
    partitioned into ``parts`` METIS parts, drawn once under bench/work: ``(path, facts)``."""
    path = os.path.join(common.WORK, f"relational_{size}_s{seed}_p{parts}")
    facts = None
    if comm is None or comm.rank == 0:
        if not os.path.exists(os.path.join(path, "meta.json")):
            from hpcgnn.prep.generate_hetero import hetero_graph
            from hpcgnn.prep.partition import partition_graph

            nodes, edges = SIZES[size]
            graph = hetero_graph(num_nodes=nodes, num_edges=edges, feat_dim=16, seed=seed, add_reverse=True)
            os.makedirs(common.WORK, exist_ok=True)
            partition_graph(graph, path, parts, "metis", seed=seed)
        with open(os.path.join(path, "meta.json")) as fh:
            meta = json.load(fh)
        facts = {"nodes": meta["num_nodes"], "edges": meta["num_edges"], "parts": parts,
                 "relations": [r for _, r, _ in meta["schema"]["edge_types"]]}
    if comm is not None:
        facts = comm.bcast(facts)
    return path, facts


def measure(graph, sample, batches, comm) -> dict:
    """Collective over comm. Time ``sample(seeds, i)`` over ``batches`` (the first :data:`WARMUP` untimed):
    ``{"seeds_per_s", "seconds", "edges_per_block"}`` (rank 0's mean edges per block)."""
    from hpcgnn.runtime.comm import mpi

    seen, edges, t0 = 0, [], None
    for i, seeds in enumerate(batches):
        if i == WARMUP:
            comm.Barrier()
            t0 = time.perf_counter()
        sizes = sample(seeds, i)
        if i >= WARMUP:
            seen += seeds.shape[0]
            edges.append(sizes)
    elapsed = time.perf_counter() - t0
    slowest = comm.allreduce(elapsed, op=mpi().MAX)
    total = comm.allreduce(seen, op=mpi().SUM)
    return {"seeds_per_s": total / slowest, "seconds": slowest,
            "edges_per_block": np.mean(edges, axis=0).round().astype(int).tolist()}


def main(argv=None):
    from hpcgnn import DistGraph, NeighborSampler, node_split
    from hpcgnn.graph.typed_sampling import sample_neighbors_by_relation
    from hpcgnn.runtime.abort import install_abort_hook
    from hpcgnn.runtime.allocator import keep_heap_memory
    from hpcgnn.runtime.comm import world
    from hpcgnn.sampling.relational import RelationalSampler, layer_fanouts

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", choices=sorted(SIZES))
    parser.add_argument("--fanouts", default="15,10,5", help="per layer (input layer first) and relation")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=20, help="timed batches per rank")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="append the record here instead of bench/results/relational_sampling.json")
    args = parser.parse_args(argv)
    keep_heap_memory()  # as hpcgnn.train does
    install_abort_hook()  # an error on one rank ends the job instead of leaving the others waiting
    comm = world()
    if comm.rank == 0:
        common.print_header("Per-relation neighbour sampling on an IGBH-schema typed graph")
    path, facts = typed_dataset(args.size, comm.size, args.seed, comm)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    rows = []
    with DistGraph(path, comm) as graph:
        train = node_split("train_mask", graph, seed=args.seed)
        rng = np.random.default_rng(args.seed + comm.rank)
        batches = [rng.choice(train, min(args.batch_size, train.shape[0]), replace=False)
                   for _ in range(WARMUP + args.batches)]
        relational = RelationalSampler(layer_fanouts(graph.schema, fanouts, ""), seed=args.seed)
        neighbor = NeighborSampler(fanouts, seed=args.seed)
        runs = {"relational": lambda seeds, i: [b.num_edges for b in relational.sample(graph, seeds, i).blocks],
                "neighbor": lambda seeds, i: [b.num_edges for b in neighbor.sample(graph, seeds, i).blocks],
                "hop": lambda seeds, i: [sample_neighbors_by_relation(graph, seeds, fanouts[-1], seed=i)[1].shape[0]]}
        for name, sample in runs.items():
            figures = measure(graph, sample, batches, comm)
            row = {"sampler": name, "ranks": comm.size, "fanouts": args.fanouts, **figures}
            rows.append(row)
            if comm.rank == 0:
                print(json.dumps(row), flush=True)
    if comm.rank == 0:
        common.record(rows, path=args.json, title="Per-relation neighbour sampling, seeds/s (IGBH schema)",
                      columns=["sampler", "ranks", "fanouts", "seeds_per_s", "edges_per_block"], graph=facts,
                      recipe={"size": args.size, "batch_size": args.batch_size, "batches": args.batches,
                              "seed": args.seed})
    return rows


if __name__ == "__main__":
    main()
