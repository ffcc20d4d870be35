"""Everything one rank trains with, built from the flags: the graph, the loader, the model, the
optimizers and the random streams.

Parameters start identical on every rank (built from one seed, then broadcast from rank 0);
the random streams that must differ per rank (dropout, any torch/numpy draw) are derived from
(seed, purpose, rank) by :func:`hpcgnn.runtime.rng.derive_seed`.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass

import numpy as np
import torch

from hpcgnn.format import ondisk
from hpcgnn.graph import DistGraph, node_split
from hpcgnn.graph.feature_scale import scale_features
from hpcgnn.loading import NodeDataLoader
from hpcgnn.nn import build_model, seed_dropout
from hpcgnn.nn.link import build_link_model
from hpcgnn.runtime.collectives import broadcast_, fail_together
from hpcgnn.runtime.comm import cores_per_rank, mpi
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.sampling import NeighborSampler
from hpcgnn.sampling.cluster import ClusterSampler
from hpcgnn.sampling.layer import LayerSampler
from hpcgnn.sampling.randomwalk import RandomWalkSampler
from hpcgnn.sampling.saint import SaintSampler
from hpcgnn.sampling.vr import ControlVariateSampler
from hpcgnn.store import DistEmbedding, SparseAdam, float_rows
from hpcgnn.training.checkpoint import dataset_identity
from hpcgnn.training.control_variate import ControlVariate
from hpcgnn.training.gradsync import FlatGradients, GradientSync, build_sync
from hpcgnn.training.link_task import LinkLoss, build_link_loader, link_dataset_sizes, require_edge_sets
from hpcgnn.training.metrics import TrainingLoss, choose_metric, class_weights, task_of

EMBEDDING_NAME = "node_embedding"


@dataclass
class Session:
    """Local. One rank's training state; ``config`` (the flags plus what the data decided) is
    what a checkpoint records to rebuild the model."""

    comm: object
    graph: DistGraph
    loader: NodeDataLoader  # or an EdgeDataLoader (--task link)
    model: torch.nn.Module
    grads: FlatGradients
    optimizer: torch.optim.Optimizer
    embedding: DistEmbedding | None
    embed_optimizer: SparseAdam | None
    config: dict
    loss: TrainingLoss  # or a LinkLoss: ``loss.batch(model_output, batch) -> (loss, correct, seen)``
    control: ControlVariate | None = None  # VR-GCN's histories (--sampler vr)
    sync: GradientSync | None = None  # how the gradient is reduced (default: one blocking Allreduce)
    dataset: dict | None = None  # the dataset's identity, which checkpoints record (checkpoint.dataset_identity)

    @property
    def link(self) -> bool:
        """Local. Whether the run predicts links (``--task link``)."""
        return self.config["task"] == "link"

    def close(self):
        """Collective over comm. Free the loader's, the embedding's and the graph's windows."""
        self.loader.close()
        if self.sync is not None:
            self.sync.close()
        if self.control is not None:
            self.control.close()
        if self.embedding is not None:
            self.embedding.close()
        self.graph.close()


FINITE_CHECK_ROWS = 65_536


def check_finite(graph, field, comm):
    """Collective over comm. Refuse a float node field holding NaN or infinity on any rank.

    ReLU turns a NaN input into 0, so NaN features do not even show in the training loss: the
    run would finish at chance accuracy. One pass over this rank's rows, in chunks (a boolean
    copy of a whole shard would cost a quarter of its memory), at start-up.
    """
    error = None
    tensor = graph.ndata.get(field)
    if tensor is not None and (np.issubdtype(tensor.dtype, np.floating) or tensor.encoding is not None):
        local = tensor.local
        start = graph.local_nodes[0]
        for lo in range(0, local.shape[0], FINITE_CHECK_ROWS):
            chunk = float_rows(local[lo:lo + FINITE_CHECK_ROWS], tensor.encoding).numpy()
            chunk = chunk.reshape(chunk.shape[0], -1)
            bad = np.flatnonzero(~np.isfinite(chunk).all(axis=1))
            if bad.size:
                value = chunk[bad[0]][~np.isfinite(chunk[bad[0]])][0]
                error = InputError(ondisk.part_path(graph.path, graph.meta, comm.rank),
                                   f"non-finite value in node {start + lo + bad[0]} (new id)", field, float(value))
                break
    fail_together(comm, error, graph.path)


#: why a run needs a node field it lacks, and the flag that does without it
MISSING_FIELD = {
    "feat": "dataset has no node features: train with --embed-dim D to learn a D-wide embedding per node instead",
    "label": "dataset has no node labels to classify: for link prediction train with --task link (on a dataset "
             "partitioned with --edge-split T,V,E)",
    "train_mask": "dataset has no training nodes (no train_mask): partition it with --split 0.6,0.2,0.2 (or "
                  "per-class:20,30), or train with --task link (on a dataset partitioned with --edge-split T,V,E)",
}


def model_config(args, graph, comm) -> dict:
    """Collective over comm. The flags plus what the dataset decides (nodes, classes, input width,
    task) and the metric the run reports and selects by (``--metric``, else the task's default)."""
    link = getattr(args, "task", "node") == "link"
    for field in (("feat",) if not args.embed_dim else ()) + (() if link else ("label", "train_mask")):
        if field not in graph.ndata:
            raise InputError(os.path.join(args.data, "meta.json"), MISSING_FIELD[field], "node_fields", field)
    if link:
        require_edge_sets(graph, args.data)
    sizes = link_dataset_sizes(graph) if link else dataset_sizes(graph, comm)
    metric = choose_metric(args.metric, sizes["task"], os.path.join(args.data, "meta.json"))
    return dict(vars(args), **sizes, metric=metric, in_dim=sizes["feat_dim"] + args.embed_dim, ranks=comm.size)


def dataset_sizes(graph, comm) -> dict:
    """Collective over comm. What the dataset decides of a model: ``num_nodes``, ``feat_dim`` (0
    without features), ``num_classes`` (one more than the largest label; a multi-label
    ``label`` [N, C]: C) and ``task`` (:func:`hpcgnn.training.metrics.task_of`)."""
    label = graph.ndata["label"]
    if len(label.shape) == 2:
        num_classes = int(label.shape[1])
    else:
        num_classes = int(comm.allreduce(int(label.local.max(initial=-1)), op=mpi().MAX)) + 1
    feat_dim = int(graph.ndata["feat"].shape[1]) if "feat" in graph.ndata else 0
    return {"num_nodes": int(graph.num_nodes), "feat_dim": feat_dim, "num_classes": num_classes,
            "task": task_of(label.shape, num_classes)}


def open_session(args, comm) -> Session:
    """Collective over comm. Load the dataset and build the loader, model and optimizers."""
    graph = DistGraph(args.data, comm, progress_interval=None if args.progress_ms < 0 else args.progress_ms / 1000)
    check_finite(graph, "feat", comm)
    scaled = scale_features(graph, getattr(args, "feature_scale", "none"))  # before anything reads a feature row
    config = dict(model_config(args, graph, comm), **scaled)
    link = config["task"] == "link"
    torch.manual_seed(derive_seed(args.seed, "model_init"))
    model = build_link_model(config, config["in_dim"]) if link else \
        build_model(config, config["in_dim"], config["num_classes"])
    with torch.no_grad():  # identical starting parameters everywhere
        broadcast_([t.data.numpy() for t in list(model.parameters()) + list(model.buffers())], comm)
    sampler = build_sampler(graph, args, model)
    control = ControlVariate(graph, model) if args.sampler == "vr" else None
    prefetch, threads = thread_plan(args.prefetch, cores_per_rank(comm))
    torch.set_num_threads(threads)
    config.update(prefetch=prefetch, threads=threads)
    loader = build_link_loader(graph, args, sampler, prefetch) if link else \
        build_node_loader(graph, args, sampler, prefetch)
    # the fused CPU kernel: one pass over all parameters, a third of the foreach version's time
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay, fused=True)
    grads = FlatGradients(model)
    embedding = embed_optimizer = None
    if args.embed_dim:
        embedding = DistEmbedding(graph.num_nodes, args.embed_dim, name=EMBEDDING_NAME, comm=comm, book=graph.book)
        embed_optimizer = SparseAdam([embedding], lr=args.embed_lr)
    seed_rank_streams(args.seed, comm.rank)
    if link:
        loss = LinkLoss(model, args.link_loss, args.margin)
    else:
        loss = TrainingLoss(config["task"], training_class_weights(graph, config)
                            if args.class_weight == "balanced" else None)
    sync = build_sync(grads, comm, args.grad_compress, args.overlap, args.bucket_mb)
    return Session(comm, graph, loader, model, grads, optimizer, embedding, embed_optimizer, config, loss, control,
                   sync, dataset_identity(graph, comm))


def build_sampler(graph, args, model):
    """Local. The ``--sampler`` of the run: neighbour sampling with ``--fanouts``, Cluster-GCN's
    clusters of this rank's nodes (METIS, at construction), LADIES' layer-wise importance sampling,
    PinSAGE's random walks, GraphSAINT's subgraphs (normalised by presampling, at construction) or
    VR-GCN's few neighbours per node (with the control variate of :class:`ControlVariate`)."""
    if args.sampler == "cluster":
        return ClusterSampler(graph, args.layers, args.num_clusters, "train_mask", seed=args.seed,
                              clusters_per_batch=args.clusters_per_batch,
                              input_degrees=getattr(model, "needs_degrees", False))
    if args.sampler == "layer":
        return LayerSampler(args.layer_sizes, seed=args.seed, normalize=args.layer_weights == "normalized")
    if args.sampler == "randomwalk":
        return RandomWalkSampler(args.layers, args.walks, args.walk_length, args.topk, seed=args.seed)
    if args.sampler.startswith("saint-"):
        return SaintSampler(graph, args.sampler[len("saint-"):], args.layers, args.budget, args.walk_length,
                            args.presample, seed=args.seed)
    if args.sampler == "vr":
        return ControlVariateSampler(args.layers, args.vr_neighbors, seed=args.seed)
    return NeighborSampler(args.fanouts, input_degrees=getattr(model, "needs_degrees", False))


def build_node_loader(graph, args, sampler, prefetch) -> NodeDataLoader:
    """Collective over graph.comm. This rank's training nodes in batches (with ``--sampler
    cluster``: its clusters, ``--clusters-per-batch`` at a time)."""
    train_ids = node_split("train_mask", graph, seed=args.seed)
    if graph.comm.allreduce(train_ids.shape[0]) == 0:
        raise InputError(os.path.join(args.data, "meta.json"), "no training nodes: the mask selects none",
                         "train_mask", 0)
    if isinstance(sampler, (ClusterSampler, SaintSampler)):  # seeds: clusters, or one subgraph per step
        ids, per_batch = ((sampler.cluster_ids, sampler.clusters_per_batch) if isinstance(sampler, ClusterSampler)
                          else (sampler.batch_ids, 1))
        return NodeDataLoader(graph, ids, sampler, per_batch, prefetch=prefetch, seed=args.seed,
                              feature="feat" if "feat" in graph.ndata else None, max_batches=args.steps_per_epoch)
    return NodeDataLoader(graph, train_ids, sampler, args.batch_size,
                          prefetch=prefetch, seed=args.seed, feature="feat" if "feat" in graph.ndata else None,
                          cache_bytes=int(args.cache_mb * 2**20), max_batches=args.steps_per_epoch)


def training_class_weights(graph, config):
    """Collective over graph.comm. ``--class-weight balanced`` weights from the labels of the
    training nodes each rank owns (every training node counted once)."""
    owned_train = graph.ndata["train_mask"].local.astype(bool)
    return class_weights(graph.ndata["label"].local[owned_train], config["task"], config["num_classes"], graph.comm)


def thread_plan(prefetch, cores) -> tuple[int, int]:
    """Local. ``(prefetch depth, torch threads)`` for a rank with ``cores`` cores of its own.

    The prefetch thread needs a core of its own (else it only competes with the model, and its
    MPI waits spin): 2 batches ahead when the rank has a spare core, none otherwise.
    ``prefetch`` >= 0 is the user's choice. Torch gets ``OMP_NUM_THREADS`` when it is set, else
    the cores left after the prefetch thread's.
    """
    depth = prefetch if prefetch >= 0 else (2 if cores > 1 else 0)
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        return depth, int(threads)
    return depth, max(1, cores - (1 if depth else 0))


def seed_rank_streams(seed, rank):
    """Local. Seed this rank's torch, numpy, Python and dropout streams (distinct per rank)."""
    torch.manual_seed(derive_seed(seed, "torch", rank))
    np.random.seed(derive_seed(seed, "numpy", rank) % 2**32)
    random.seed(derive_seed(seed, "python", rank))
    seed_dropout(derive_seed(seed, "dropout", rank))
