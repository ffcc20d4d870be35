"""The clean-up of :mod:`hpcgnn.prep.transform` on a graph spread over the ranks.

Each step is collective and leaves every edge on the rank owning its destination, so a
rank holds about ``1/K`` of the edges (twice that while symmetrize sends the reverse copies).
The result is the serial clean-up's graph: the same edges (of two copies, the one with the
lower input position is kept, with its edge fields), the same nodes kept by
``largest_component`` with the same new ids, and ``orig_id`` recorded the same way.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from hpcgnn import _csr
from hpcgnn.format.fields import ORIG_ID
from hpcgnn.prep.dist.blocks import (
    Ghosts,
    add_to_owners,
    block_starts,
    fetch,
    gathered_starts,
    owner_of,
    send_to_owners,
)
from hpcgnn.prep.dist.spread import SpreadGraph, to_destination_owners
from hpcgnn.prep.transform import refuse_typed
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.stages import silent


def remove_self_loops(graph: SpreadGraph) -> SpreadGraph:
    """Local. Drop every edge ``v -> v``."""
    keep = graph.src != graph.dst
    return graph if keep.all() else graph.with_edges(keep=np.flatnonzero(keep))


def dedup(graph: SpreadGraph, consume=False) -> SpreadGraph:
    """Local. One edge per (src, dst): the one of lowest ``eid``; edges come out in CSC order
    (by destination, then source). Every copy of a pair is on its destination's rank.

    An O(E) counting sort by destination and a sort of each node's sources (the CSR kernels),
    not a sort of all E pairs. Without edge fields the kernel ranks copies by ``eid`` itself;
    with them it ranks by position, so the edges are first put in ``eid`` order (they arrive
    in it unless symmetrize appended reverse copies). ``consume`` releases the input's edge
    arrays as soon as they are read."""
    if graph.num_local_edges == 0:
        return graph
    by_position = bool(graph.edata)
    if by_position and (np.diff(graph.eid) < 0).any():
        graph = graph.with_edges(keep=np.argsort(graph.eid, kind="stable"))
    rank = int(owner_of(graph.dst[:1], graph.starts)[0])
    first, end = graph.block(rank)
    indptr, src, order = _csr.coo_to_csr(graph.dst - first, graph.src, end - first)
    if not by_position:
        order = graph.eid[order]  # rank copies by eid; the kept eids are the result's
    eid, edata = graph.eid, graph.edata
    if consume:
        graph.release_edges()
    indptr = _csr.dedup_rows(indptr, src, order)
    kept = int(indptr[-1])
    dst = first + np.repeat(np.arange(end - first, dtype=np.int64), np.diff(indptr))
    if by_position:
        eid, edata = eid[order[:kept]], {k: v[order[:kept]] for k, v in edata.items()}
    else:
        eid = order[:kept]
    return replace(graph, src=src[:kept], dst=dst, eid=eid, edata=edata)


def symmetrize(comm, graph: SpreadGraph, consume=False) -> SpreadGraph:
    """Collective over comm. Add the reverse of every edge (it carries the edge's fields, and
    ``eid`` ``input_edges + eid`` so a forward copy wins over a reverse one) and dedup;
    ``consume`` releases the input's edge arrays once they are copied."""
    names = list(graph.edata)
    back = list(send_to_owners(comm, owner_of(graph.src, graph.starts), graph.dst, graph.src,
                               graph.eid + graph.input_edges, *(graph.edata[k] for k in names)))
    forward = [graph.src, graph.dst, graph.eid, *(graph.edata[k] for k in names)]
    if consume:
        graph.release_edges()
    both = []
    for i in range(len(forward)):  # one array at a time, each pair freed once joined
        both.append(np.concatenate([forward[i], back[i]]))
        forward[i] = back[i] = None
    joined = graph.with_edges(src=both[0], dst=both[1], eid=both[2], edata=dict(zip(names, both[3:])),
                              symmetric=True)
    del both
    return dedup(joined, consume=True)


def _component_roots(comm, graph: SpreadGraph, max_rounds=10_000) -> np.ndarray:
    """Collective over comm. The smallest node id of each block node's weakly connected
    component: labels flow both ways along every edge, with pointer jumping between rounds."""
    first, end = graph.block(comm.rank)
    label = np.arange(first, end, dtype=np.int64)
    sources = Ghosts(comm, graph.src, graph.starts)
    local_dst = graph.dst - first
    for _ in range(max_rounds):
        before = label.copy()
        source_label = sources.pull(label)
        np.minimum.at(label, local_dst, source_label)  # along the edge
        back_ids, back_labels = send_to_owners(comm, owner_of(graph.src, graph.starts), graph.src,
                                               label[local_dst])
        np.minimum.at(label, back_ids - first, back_labels)  # against it
        label = np.minimum(label, fetch(comm, label, graph.starts, label))  # jump to the label's label
        changed = int(comm.allreduce(int((label != before).sum()), op=mpi().SUM))
        if changed == 0:
            return label
    raise RuntimeError(f"connected components did not settle in {max_rounds} rounds")


def largest_component(comm, graph: SpreadGraph) -> SpreadGraph:
    """Collective over comm. Keep the largest weakly connected component (ties: the one holding
    the smallest id), nodes renumbered in order and re-spread in equal blocks; ``orig_id`` keeps
    each node's id before (or the reader's, when it already had one)."""
    first, end = graph.block(comm.rank)
    root = _component_roots(comm, graph)
    size = add_to_owners(comm, root, np.ones(root.shape[0], dtype=np.int64), graph.starts)
    local_best = int(np.argmax(size)) if size.size else 0
    candidates = comm.allgather((int(size[local_best]) if size.size else -1, -(first + local_best)))
    biggest = -max(candidates)[1]
    keep = root == biggest
    kept_starts = gathered_starts(comm, int(keep.sum()))
    if int(kept_starts[-1]) == graph.num_nodes:
        return graph
    new_id = np.full(end - first, -1, dtype=np.int64)
    new_id[keep] = kept_starts[comm.rank] + np.arange(int(keep.sum()), dtype=np.int64)
    edge_keep = keep[graph.dst - first]  # an edge's ends share a component
    new_src = fetch(comm, graph.src[edge_keep], graph.starts, new_id)
    new_dst = new_id[graph.dst[edge_keep] - first]
    num_nodes = int(kept_starts[-1])
    starts = block_starts(num_nodes, comm.size)
    ndata = {k: v[keep] for k, v in graph.ndata.items()}
    ndata.setdefault(ORIG_ID, np.flatnonzero(keep).astype(np.int64) + first)
    owners = owner_of(new_id[keep], starts)
    ndata = dict(zip(ndata, send_to_owners(comm, owners, *ndata.values())))
    moved = SpreadGraph(num_nodes, starts, new_src, new_dst, graph.eid[edge_keep], ndata,
                        {k: v[edge_keep] for k, v in graph.edata.items()}, graph.name, graph.source,
                        graph.symmetric, graph.input_edges)
    return to_destination_owners(comm, moved)


def prepare(comm, graph: SpreadGraph, symmetrize_edges=False, drop_self_loops=False, dedup_edges=False,
            largest_cc=False, log=silent, consume=False) -> SpreadGraph:
    """Collective over comm. The clean-up options in the serial order (self loops, symmetrize
    or dedup, largest component); ``log(line)`` after each step that ran. ``consume`` lets
    symmetrize and dedup release the input's edge arrays early (the input is then empty). On a
    typed graph the steps that would renumber or drop nodes or edges across types are refused
    as the serial clean-up refuses them, on every rank (each holds the schema)."""
    for flag, asked in (("--symmetrize", symmetrize_edges), ("--dedup", dedup_edges),
                        ("--largest-component", largest_cc)):
        if asked:
            refuse_typed(graph, flag)
    if drop_self_loops:
        graph = remove_self_loops(graph)
        log(f"remove self loops: {graph.num_edges(comm):,} edges left")
    if symmetrize_edges:
        graph = symmetrize(comm, graph, consume=consume)
        log(f"symmetrize: {graph.num_edges(comm):,} edges")
    elif dedup_edges:
        graph = dedup(graph, consume=consume)
        log(f"dedup: {graph.num_edges(comm):,} edges left")
    if largest_cc:
        graph = largest_component(comm, graph)
        log(f"largest component: {graph.num_nodes:,} nodes, {graph.num_edges(comm):,} edges")
    return graph
