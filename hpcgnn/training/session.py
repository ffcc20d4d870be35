"""Everything one rank trains with, built from the run's :class:`~hpcgnn.training.config.TrainConfig`:
the graph, the task's loader, model and loss, the optimizers and the random streams.

Parameters start identical on every rank (built from one seed, then broadcast from rank 0);
the random streams that must differ per rank (dropout, any torch/numpy draw) are derived from
(seed, purpose, rank) by :func:`hpcgnn.runtime.rng.derive_seed`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import torch

from hpcgnn.format import ondisk
from hpcgnn.format.schema import typed_field_name
from hpcgnn.graph import DistGraph, fold_of_nodes
from hpcgnn.graph.feature_scale import scale_features
from hpcgnn.loading.device_stage import DeviceStage
from hpcgnn.nn import as_block_tensors
from hpcgnn.runtime.collectives import broadcast_, fail_together
from hpcgnn.runtime.comm import cores_per_rank
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.sampling import SamplerRun, sampler_spec
from hpcgnn.store import DistEmbedding, DistTensor, SparseAdam, float_rows
from hpcgnn.store.partition_book import PartitionBook
from hpcgnn.tasks import DatasetFacts, Task, task_named
from hpcgnn.training.balance import StepBalancer
from hpcgnn.training.checkpoint import dataset_identity, seed_rank_streams
from hpcgnn.training.config import TrainConfig
from hpcgnn.training.control_variate import ControlVariate
from hpcgnn.training.device import Placement, place_rank, resident_bytes
from hpcgnn.training.gradsync import FlatGradients, GradientSync, build_sync
from hpcgnn.training.optim import EagerAdam

EMBEDDING_NAME = "node_embedding"


@dataclass
class Session:
    """Local. One rank's training state: the run's ``config``, the dataset's ``facts`` and the
    ``task``, and what they built. A checkpoint records ``config`` and ``facts`` to rebuild the model."""

    comm: object
    graph: DistGraph
    loader: object  # the task's loader: a NodeDataLoader, an EdgeDataLoader, ...
    model: torch.nn.Module
    grads: FlatGradients
    optimizer: torch.optim.Optimizer
    embedding: DistEmbedding | None
    embed_optimizer: SparseAdam | None
    config: TrainConfig
    facts: DatasetFacts
    task: Task
    loss: object  # the task's loss: ``loss.batch(model_output, batch) -> (loss, correct, seen)``
    control: ControlVariate | None = None  # VR-GCN's histories (a sampler with ``history``)
    sync: GradientSync | None = None  # how the gradient is reduced (default: one blocking Allreduce)
    dataset: dict | None = None  # the dataset's identity, which checkpoints record (checkpoint.dataset_identity)
    decided: dict | None = None  # what the run decided at start: prefetch depth, threads, feature scaling
    placement: Placement | None = None  # where this rank computes (--device)
    stage: DeviceStage | None = None  # moves each batch to the device, a step ahead (the identity on the CPU)
    balancer: StepBalancer | None = None  # --step-balance speed: the ranks' shares of the steps' seeds

    @property
    def device(self) -> torch.device:
        return self.placement.device if self.placement is not None else torch.device("cpu")

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


_FINITE_CHECK_ROWS = 65_536


def check_finite(graph, field, comm, fields=None, node_type=None):
    """Collective over comm. Refuse a float node field holding NaN or infinity on any rank (of
    ``fields``, default ``graph.ndata``; a typed graph's fields of ``node_type``: rows by type id).

    ReLU turns a NaN input into 0, so NaN features do not even show in the training loss: the
    run would finish at chance accuracy. One pass over this rank's rows, in chunks (a boolean
    copy of a whole shard would cost a quarter of its memory), at start-up.
    """
    error = None
    tensor = (graph.ndata if fields is None else fields).get(field)
    if tensor is not None and (np.issubdtype(tensor.dtype, np.floating) or tensor.encoding is not None):
        local, first_row = tensor.local, int(tensor.book.starts[comm.rank])
        for lo in range(0, local.shape[0], _FINITE_CHECK_ROWS):
            chunk = float_rows(local[lo:lo + _FINITE_CHECK_ROWS], tensor.encoding).numpy()
            chunk = chunk.reshape(chunk.shape[0], -1)
            bad = np.flatnonzero(~np.isfinite(chunk).all(axis=1))
            if bad.size:
                # the error names the part file holding the node and the node's global id
                gid = first_row + lo + int(bad[0])
                if node_type is not None:  # rows of a typed field are type ids
                    gid = int(graph.layout.gids_of(graph.schema.type_index(node_type), [gid])[0])
                    field = typed_field_name(node_type, field)
                part = int(PartitionBook.from_meta(graph.meta).owner(gid))
                value = chunk[bad[0]][~np.isfinite(chunk[bad[0]])][0]
                error = InputError(ondisk.part_path(graph.path, graph.meta, part),
                                   f"non-finite value in node {gid} (new id)", field, float(value))
                break
    fail_together(comm, error, graph.path)


def hold_out_fold(graph, folds, held, seed, comm):
    """Collective over comm. Set the graph's ``train_mask`` and ``val_mask`` (in memory) for one run
    of ``--refit-folds``: the pool of training and validation nodes is dealt into ``folds``
    (:func:`~hpcgnn.graph.fold_of_nodes`); fold ``held`` validates and the others train, or with
    ``held`` None the whole pool trains and nothing validates."""
    if "train_mask" not in graph.ndata:
        return  # the task refuses the dataset, naming the flag
    pool = graph.ndata["train_mask"].local.astype(bool)
    if "val_mask" in graph.ndata:
        pool |= graph.ndata["val_mask"].local.astype(bool)
    fold = fold_of_nodes(graph, pool, folds, seed, comm)
    validate = fold == held if held is not None else np.zeros_like(pool)
    graph.ndata["train_mask"].local[...] = pool & ~validate
    if "val_mask" in graph.ndata:
        graph.ndata["val_mask"].local[...] = validate
    else:
        graph.ndata["val_mask"] = DistTensor((graph.num_nodes,), np.uint8, name="val_mask", comm=comm,
                                             book=graph.book, local_data=validate)
    graph.barrier()


def open_session(config: TrainConfig, comm, fold=None) -> Session:
    """Collective over comm. Load the dataset and build the loader, model and optimizers (the
    model and its optimizer state on the run's ``--device``). ``fold``: the fold a run of
    ``--refit-folds`` validates on (None: its last run, on every labelled node)."""
    runtime = config.runtime
    placement = place_rank(runtime.device, comm)  # a rank without the GPU asked for stops the job here
    graph = DistGraph(config.input.data, comm,
                      progress_interval=None if runtime.progress_ms < 0 else runtime.progress_ms / 1000)
    if config.evaluation.refit_folds:
        hold_out_fold(graph, config.evaluation.refit_folds, fold, config.seed, comm)
    check_finite(graph, "feat", comm)
    for name, fields in graph.typed_ndata.items():
        check_finite(graph, "feat", comm, fields, name)
    scaled = scale_features(graph, config.input.feature_scale)  # before anything reads a feature row
    task = task_named(config.task.name)
    config = task.settle(config, graph)
    facts = task.facts(graph, config, comm)
    metric = task.choose_metric(config.evaluation.metric, facts, os.path.join(config.input.data, "meta.json"))
    config = replace(config, evaluation=replace(config.evaluation, metric=metric))
    torch.manual_seed(derive_seed(config.seed, "model_init"))
    model = task.build_model(config, facts)
    with torch.no_grad():  # identical starting parameters everywhere
        broadcast_([t.data.numpy() for t in list(model.parameters()) + list(model.buffers())], comm)
    use_kernels(model, getattr(config.model, "kernels", None))
    model.to(placement.device)
    spec = sampler_spec(config.sampler.name)
    sampler = spec.build(graph, config.sampler.options,
                         SamplerRun(config.model.layers, config.seed, getattr(model, "needs_degrees", False)))
    control = ControlVariate(graph, model) if spec.history else None
    prefetch, threads = thread_plan(runtime.prefetch, cores_per_rank(comm), placement.device.type == "cuda")
    torch.set_num_threads(threads)
    loader = task.build_loader(graph, config, sampler, prefetch)
    # the fused CPU kernel: one pass over all parameters, a third of the foreach version's time
    optimizer = EagerAdam(model.parameters(), lr=config.optimizer.lr,
                          weight_decay=config.optimizer.weight_decay, fused=True)
    grads = FlatGradients(model, placement.cuda_aware)
    embedding = embed_optimizer = None
    if config.input.embed_dim:
        embedding = DistEmbedding(graph.num_nodes, config.input.embed_dim, name=EMBEDDING_NAME, comm=comm,
                                  book=graph.book)
        embed_optimizer = SparseAdam([embedding], lr=config.input.embed_lr)
    seed_rank_streams(config.seed, comm.rank)
    loss = task.build_loss(model, graph, config, facts)
    if getattr(loss, "weight", None) is not None:  # class weights, indexed by the labels on the device
        loss.weight = loss.weight.to(placement.device)
    balancer = None
    if config.optimizer.step_balance == "speed":
        balancer = StepBalancer(getattr(loader, "plan", None), comm, lend=getattr(loader, "lends_seeds", False),
                                ahead=getattr(loader, "prefetch", 0))
    sync = build_sync(grads, comm, config.optimizer.grad_compress, config.optimizer.overlap,
                      config.optimizer.bucket_mb, config.optimizer.staleness, config.optimizer.average_every,
                      optimizer, config.optimizer.sync)
    return Session(comm, graph, loader, model, grads, optimizer, embedding, embed_optimizer, config, facts, task,
                   loss, control, sync, dataset_identity(graph),
                   dict(scaled, prefetch=prefetch, threads=threads, ranks=comm.size, device=str(placement.device),
                        gpus_shared_by=placement.sharing),
                   placement, staged(placement, loader, runtime.device_rows_mb),
                   balancer)


def staged(placement, loader, device_rows_mb) -> DeviceStage:
    """Local. The stage that moves ``loader``'s batches to the rank's device (the identity on the
    CPU), with the feature rows ``--device-rows-mb`` keeps there."""
    # matrices are built on first use, on the device by the stream that computes (no host work)
    stage = DeviceStage(placement.device, as_block_tensors)
    stage.prepare(loader, resident_bytes(placement, device_rows_mb))
    return stage


def use_kernels(model, kernels):
    """Local. Give ``model``'s layers the ``--kernels`` asked for (None: as built)."""
    if kernels is None:
        return
    from hpcgnn.nn.kernels import set_kernels  # deferred: only runs that choose their kernels need it

    set_kernels(model, kernels)


def thread_plan(prefetch, cores, gpu=False) -> tuple[int, int]:
    """Local. ``(prefetch depth, torch threads)`` for a rank with ``cores`` cores of its own.

    The prefetch thread needs a core of its own (else it only competes with the model, and its
    MPI waits spin): 2 batches ahead when the rank has a spare core, none otherwise. A rank whose
    model computes on a GPU (``gpu``) always prefetches: its own thread mostly waits for the
    GPU, blocked, and the sampling and gathering take that core meanwhile.
    ``prefetch`` >= 0 is the user's choice. Torch gets ``OMP_NUM_THREADS`` when it is set, else
    the cores left after the prefetch thread's.
    """
    depth = prefetch if prefetch >= 0 else (2 if cores > 1 or gpu else 0)
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        return depth, int(threads)
    return depth, max(1, cores - (1 if depth else 0))
