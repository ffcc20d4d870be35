"""Distributed layer-wise inference over all nodes with full neighbourhoods, and
``python -m hpcgnn.evaluate --data DIR --checkpoint C``.

Layer l's output for every node is a DistTensor: each rank computes the rows of the nodes
it owns, in batches, reading layer l-1's rows of their in-neighbours (local or remote) through
the windows. Only a barrier separates layers, so ranks with more nodes never block others
mid-layer. Accuracy is then reduced over ranks: the exact full-graph result, not a sampled
estimate.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch
from torch.nn import functional as F

from hpcgnn.cli import entry_point
from hpcgnn.comm import install_abort_hook, mpi, world
from hpcgnn.errors import InputError
from hpcgnn.graph import MASKS


@torch.no_grad()
def layerwise_inference(model, graph, batch_size=10_000, feature="feat", needs_degrees=False, inputs=None):
    """Collective over graph.comm. Every owned node's output of ``model`` (full neighbourhoods).

    ``inputs(gids) -> tensor`` gives the first layer's input rows when they are not just the
    ``feature`` field (e.g. features with a learnable node embedding appended).
    Returns this rank's rows of the last layer, ``[num_local_nodes, out_dim]``, as a tensor.
    """
    from hpcgnn.dist_tensor import DistTensor
    from hpcgnn.nn import BlockTensors
    from hpcgnn.sampler import NeighborSampler

    was_training = model.training
    model.eval()
    sampler = NeighborSampler([-1], input_degrees=needs_degrees)
    local_ids = graph.local_node_ids()
    if inputs is None:
        table = graph.ndata[feature]

        def inputs(gids):
            return torch.from_numpy(table.gather(gids)).to(torch.float32)

    h = None
    for i in range(len(model.layers)):
        width = model.layers[i].out_features
        out = DistTensor((graph.num_nodes, width), np.float32, f"layer{i}", comm=graph.comm, book=graph.book)
        for lo in range(0, local_ids.shape[0], batch_size):
            chunk = local_ids[lo:lo + batch_size]
            batch = sampler.sample(graph, chunk)
            block = BlockTensors(batch.blocks[0], batch.input_degree)
            x = inputs(batch.input_gids) if i == 0 else torch.from_numpy(h.gather(batch.input_gids))
            out.local[lo:lo + chunk.shape[0]] = model.layer_forward(i, block, x).numpy()
        out.barrier()
        if i > 0:
            h.close()
        h = out
    logits = torch.from_numpy(h.local.copy())
    h.close()
    model.train(was_training)
    return logits


def split_accuracy(logits, graph, label="label"):
    """Collective over graph.comm. Accuracy and mean cross-entropy on every split mask present,
    over all ranks (``{split}_acc`` and ``{split}_loss``; None for a missing or empty split)."""
    MPI = mpi()
    predicted = logits.argmax(dim=1).numpy()
    labels = graph.ndata[label].local
    counts, losses = [], []
    for mask in MASKS:
        if mask in graph.ndata:
            selected = graph.ndata[mask].local.astype(bool)
            counts += [int((predicted[selected] == labels[selected]).sum()), int(selected.sum())]
            rows = torch.from_numpy(np.flatnonzero(selected))  # only these rows: the logits may be huge
            targets = torch.from_numpy(labels[selected].astype(np.int64))
            loss = F.cross_entropy(logits[rows].double(), targets, reduction="sum") if rows.numel() else 0.0
            losses.append(float(loss))
        else:
            counts += [0, 0]
            losses.append(0.0)
    totals = np.array(counts, dtype=np.int64)
    graph.comm.Allreduce(MPI.IN_PLACE, totals, op=MPI.SUM)
    loss_totals = np.array(losses, dtype=np.float64)
    graph.comm.Allreduce(MPI.IN_PLACE, loss_totals, op=MPI.SUM)
    result = {}
    for i, mask in enumerate(MASKS):
        seen = totals[2 * i + 1]
        result[mask.replace("_mask", "_acc")] = float(totals[2 * i] / seen) if seen else None
        result[mask.replace("_mask", "_loss")] = float(loss_totals[i] / seen) if seen else None
    return result


def save_embeddings(logits, graph, path):
    """Local. This rank's output rows keyed by original node id, to an HDF5 file (atomic)."""
    import h5py

    from hpcgnn.atomic import atomic_path

    with atomic_path(path, suffix=".h5") as tmp:
        with h5py.File(tmp, "w") as h5:
            h5.create_dataset("orig_id", data=graph.orig_id)
            h5.create_dataset("gid", data=graph.local_node_ids())
            h5.create_dataset("embedding", data=logits.numpy())


@entry_point("hpcgnn evaluate")
def main(argv=None):
    """Collective over MPI.COMM_WORLD. ``hpcgnn evaluate``: accuracy of a checkpoint."""
    parser = argparse.ArgumentParser(prog="hpcgnn evaluate",
                                     description="Full-neighbourhood distributed inference of a trained checkpoint.")
    parser.add_argument("--data", required=True, help="partitioned dataset directory")
    parser.add_argument("--checkpoint", required=True, help="checkpoint file written by hpcgnn train")
    parser.add_argument("--batch-size", type=int, default=10_000, help="nodes per inference batch")
    parser.add_argument("--save-embeddings", metavar="DIR",
                        help="write each rank's output rows (keyed by original id) to DIR/embeddings-RANK.h5")
    args = parser.parse_args(argv)
    from hpcgnn.allocator import keep_heap_memory
    from hpcgnn.train import build_model, embedding_shard_path, input_rows, load_checkpoint

    comm = world()
    install_abort_hook(comm)
    keep_heap_memory()
    if not os.path.exists(args.checkpoint):
        raise InputError(args.checkpoint, "checkpoint not found", "--checkpoint")
    from hpcgnn.dist_graph import DistGraph

    graph = DistGraph(args.data, comm)
    state = load_checkpoint(args.checkpoint)
    config = state["config"]
    model = build_model(config, graph)
    model.load_state_dict(state["model"])
    embedding = None
    if config.get("embed_dim"):  # the learnable node embedding: this rank's shard beside the checkpoint
        from hpcgnn.embedding import DistEmbedding

        directory = args.checkpoint if os.path.isdir(args.checkpoint) else os.path.dirname(args.checkpoint)
        embedding = DistEmbedding(graph.num_nodes, config["embed_dim"], name="node_embedding", comm=comm,
                                  book=graph.book)
        embedding.load(embedding_shard_path(directory, state["epoch"], comm.rank) + ".emb.npz")
    logits = layerwise_inference(model, graph, args.batch_size, needs_degrees=config["model"] == "gcn",
                                 inputs=input_rows(graph, embedding))
    accuracy = split_accuracy(logits, graph)
    if args.save_embeddings:
        save_embeddings(logits, graph, os.path.join(args.save_embeddings, f"embeddings-{comm.rank:05d}.h5"))
    if comm.rank == 0:
        print(" ".join(f"{k} {v:.4f}" for k, v in accuracy.items() if v is not None), flush=True)
    if embedding is not None:
        embedding.close()
    graph.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
