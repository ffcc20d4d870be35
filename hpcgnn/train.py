"""``mpirun -np P python -m hpcgnn.train --data DIR ...``: synchronous data-parallel GNN training.

Every rank runs this file top to bottom on its own partition: sample mini-batches of its
training nodes, forward and backward on blocks, one Allreduce of a flat gradient buffer,
Adam step, identical parameters everywhere. Validation and test accuracy come from a
full-neighbourhood distributed inference, not a sampled estimate.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import numpy as np
import torch
from torch.nn import functional as F

from hpcgnn.cli import entry_point
from hpcgnn.errors import InputError

PHASES = ("sample", "gather", "compute", "allreduce", "wait")


def build_parser():
    p = argparse.ArgumentParser(prog="hpcgnn train", description="Train a GNN on a partitioned dataset, "
                                "one MPI rank per part: mpirun -np P python -m hpcgnn.train --data DIR ...")
    p.add_argument("--config", help="TOML or YAML file whose keys mirror these flags (flags win)")
    p.add_argument("--data", required=True, help="dataset directory written by 'hpcgnn partition'")
    p.add_argument("--model", choices=("sage", "gcn", "gat"), default="sage")
    p.add_argument("--aggregator", choices=("mean", "gcn"), default="mean", help="GraphSAGE aggregator")
    p.add_argument("--fanouts", default="10,25",
                   help="per layer, input layer first; 'all' (or --fanouts=-1,...) takes every neighbour")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=None, help="default: number of fanouts")
    p.add_argument("--heads", type=int, default=4, help="GAT attention heads")
    p.add_argument("--dropout", type=float, default=0.5, help="between layers")
    p.add_argument("--input-dropout", type=float, default=0.0, help="on the input features")
    p.add_argument("--embed-dim", type=int, default=0,
                   help="learn a per-node embedding of this width (a DistEmbedding, sharded like the nodes), "
                        "appended to the features, or the only input of a dataset without 'feat'")
    p.add_argument("--embed-lr", type=float, default=0.01, help="SparseAdam learning rate of the node embedding")
    p.add_argument("--norm", choices=("none", "batch", "layer"), default="none")
    p.add_argument("--batch-size", type=int, default=1000, help="seeds per rank per step")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefetch", type=int, default=-1,
                   help="batches sampled ahead on a background thread (0: none; default: 2 when each rank has "
                        "a spare core, else 0, since the thread then only competes with the model)")
    p.add_argument("--eval-every", type=int, default=1, help="epochs between evaluations (0: only at the end)")
    p.add_argument("--eval-batch-size", type=int, default=10_000)
    p.add_argument("--checkpoint-dir", help="where checkpoints go")
    p.add_argument("--checkpoint-every", type=int, default=0, help="epochs between checkpoints (0: none)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --checkpoint-dir")
    p.add_argument("--metrics", help="JSON-lines file: one record per epoch and a final one")
    p.add_argument("--plot", help="directory for PNG curves and the per-rank time breakdown")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def parse_args(argv=None):
    """Local. Flags, with defaults taken from ``--config`` when given."""
    parser = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.config:
        parser.set_defaults(**read_config(known.config, parser))
    args = parser.parse_args(argv)
    try:
        args.fanouts = [-1 if x.strip() == "all" else int(x) for x in str(args.fanouts).split(",")]
    except ValueError:
        raise InputError(None, "must be comma-separated integers", "--fanouts", args.fanouts) from None
    if any(f == 0 or f < -1 for f in args.fanouts):
        raise InputError(None, "fanouts must be positive or -1", "--fanouts", args.fanouts)
    args.layers = args.layers or len(args.fanouts)
    if args.layers != len(args.fanouts):
        raise InputError(None, f"needs one fanout per layer ({args.layers} layers)", "--fanouts", args.fanouts)
    if args.embed_dim < 0:
        raise InputError(None, "must be 0 (none) or positive", "--embed-dim", args.embed_dim)
    for flag in ("hidden", "batch_size", "epochs", "eval_batch_size"):
        if getattr(args, flag) <= 0:
            raise InputError(None, "must be positive", "--" + flag.replace("_", "-"), getattr(args, flag))
    if (args.resume or args.checkpoint_every) and not args.checkpoint_dir:
        raise InputError(None, "--resume and --checkpoint-every need --checkpoint-dir", "--checkpoint-dir")
    if not os.path.isdir(args.data):
        raise InputError(args.data, "dataset directory not found", "--data")
    return args


def read_config(path, parser):
    """Local. Keys of a TOML/YAML file as argparse defaults (dashes or underscores)."""
    if not os.path.exists(path):
        raise InputError(path, "config file not found", "--config")
    try:
        if path.endswith((".yaml", ".yml")):
            import yaml

            with open(path) as fh:
                values = yaml.safe_load(fh) or {}
        else:
            import tomllib

            with open(path, "rb") as fh:
                values = tomllib.load(fh)
    except Exception as exc:  # any parse error becomes one line naming the file
        raise InputError(path, f"unreadable config ({exc})", "--config") from None
    known = {a.dest for a in parser._actions}
    defaults = {}
    for key, value in values.items():
        dest = key.replace("-", "_")
        if dest not in known or dest == "config":
            raise InputError(path, "unknown key", key, value)
        defaults[dest] = ",".join(map(str, value)) if isinstance(value, list) else value
    return defaults


def build_model(config, graph):
    """Local. The model named in ``config`` sized for ``graph``'s features and classes."""
    from hpcgnn.nn import GAT, GCN, SAGE

    in_dim = (graph.ndata["feat"].shape[1] if "feat" in graph.ndata else 0) + config.get("embed_dim", 0)
    num_classes = config["num_classes"]
    norm = None if config["norm"] == "none" else config["norm"]
    drop_in = config.get("input_dropout", 0.0)
    if config["model"] == "sage":
        return SAGE(in_dim, config["hidden"], num_classes, config["layers"], config["aggregator"],
                    config["dropout"], norm, drop_in)
    if config["model"] == "gcn":
        return GCN(in_dim, config["hidden"], num_classes, config["layers"], config["dropout"], norm, drop_in)
    return GAT(in_dim, config["hidden"], num_classes, config["layers"], config["heads"], config["dropout"],
               norm=norm, input_dropout=drop_in)


class FlatGradients:
    """Every parameter's ``.grad`` is a view into one buffer, so a step needs one Allreduce."""

    def __init__(self, model):
        params = [p for p in model.parameters() if p.requires_grad]
        self.buffer = torch.zeros(sum(p.numel() for p in params))
        offset = 0
        for p in params:
            p.grad = self.buffer[offset:offset + p.numel()].view_as(p)
            offset += p.numel()

    def zero(self):
        self.buffer.zero_()


def save_checkpoint(directory, state):
    """Local. Write ``state`` atomically to ``directory/epoch-NNNN.pt`` and point ``latest`` at it."""
    from hpcgnn.atomic import atomic_path

    os.makedirs(directory, exist_ok=True)
    name = f"epoch-{state['epoch']:04d}.pt"
    with atomic_path(os.path.join(directory, name), suffix=".pt") as tmp:
        torch.save(state, tmp)
    with atomic_path(os.path.join(directory, "latest")) as tmp:
        with open(tmp, "w") as fh:
            fh.write(name + "\n")


def embedding_shard_path(directory, epoch, rank):
    """Local. Path prefix of ``rank``'s node-embedding shard (and its optimizer state) at ``epoch``."""
    return os.path.join(directory, f"epoch-{epoch:04d}.rank-{rank:05d}")


def model_inputs(feat, embedding, input_gids):
    """Local. The first layer's input rows: features, then the learnable embedding if any."""
    if embedding is None:
        return feat
    rows = embedding(input_gids)
    return rows if feat is None else torch.cat([feat, rows], dim=1)


def input_rows(graph, embedding):
    """Local. ``gids -> first-layer input rows`` for layer-wise inference."""
    feat = graph.ndata.get("feat")

    def rows(gids):
        x = torch.from_numpy(feat.gather(gids)).to(torch.float32) if feat is not None else None
        return model_inputs(x, embedding, gids)

    return rows


def load_checkpoint(path):
    """Local. A checkpoint file, or the latest one of a checkpoint directory."""
    if os.path.isdir(path):
        latest = os.path.join(path, "latest")
        if not os.path.exists(latest):
            raise InputError(path, "no checkpoint to resume from (missing 'latest')", "--checkpoint-dir")
        with open(latest) as fh:
            path = os.path.join(path, fh.read().strip())
    try:
        return torch.load(path, weights_only=False)
    except Exception as exc:
        raise InputError(path, f"unreadable checkpoint ({exc})") from None


def rng_state():
    from hpcgnn import nn

    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "dropout": nn.dropout_rng.bit_generator.state}


def set_rng_state(state):
    from hpcgnn import nn

    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    nn.dropout_rng.bit_generator.state = state["dropout"]


def phase_extremes(comm, phases):
    """Collective over comm. ``{phase: (min, max)}`` over ranks of per-epoch seconds."""
    from hpcgnn.comm import mpi

    MPI = mpi()
    values = np.array([phases[k] for k in PHASES], dtype=np.float64)
    low, high = np.empty_like(values), np.empty_like(values)
    comm.Allreduce(values, low, op=MPI.MIN)
    comm.Allreduce(values, high, op=MPI.MAX)
    return {k: (float(a), float(b)) for k, a, b in zip(PHASES, low, high)}


@entry_point("hpcgnn train")
def main(argv=None):
    """Collective over MPI.COMM_WORLD. Parse the flags, then :func:`run`."""
    from hpcgnn.allocator import keep_heap_memory
    from hpcgnn.comm import install_abort_hook, world

    args = parse_args(argv)
    comm = world()
    install_abort_hook(comm)
    keep_heap_memory()
    model, _ = run(args, comm)
    return 0


def run(args, comm):
    """Collective over comm. Train as ``args`` say; return ``(model, history)`` (history: per-epoch records)."""
    from hpcgnn import DistGraph, NeighborSampler, NodeDataLoader, node_split
    from hpcgnn.comm import allreduce_, broadcast_module, cores_per_rank, mpi
    from hpcgnn.evaluate import layerwise_inference, split_accuracy

    MPI = mpi()
    rank = comm.rank
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    # ---- data
    graph = DistGraph(args.data, comm)
    for field in (("feat",) if not args.embed_dim else ()) + ("label", "train_mask"):
        if field not in graph.ndata:
            raise InputError(os.path.join(args.data, "meta.json"), "dataset lacks a node field", "node_fields", field)
    num_classes = int(comm.allreduce(int(graph.ndata["label"].local.max(initial=-1)), op=MPI.MAX)) + 1
    config = dict(vars(args), num_classes=num_classes, ranks=comm.size)
    train_ids = node_split("train_mask", graph, seed=args.seed)
    sampler = NeighborSampler(args.fanouts, input_degrees=args.model == "gcn")
    prefetch = args.prefetch if args.prefetch >= 0 else (2 if cores_per_rank(comm) > 1 else 0)
    loader = NodeDataLoader(graph, train_ids, sampler, args.batch_size, prefetch=prefetch, seed=args.seed,
                            feature="feat" if "feat" in graph.ndata else None)

    # ---- model: same initial parameters everywhere, dropout streams differ per rank
    torch.manual_seed(args.seed)
    model = build_model(config, graph)
    broadcast_module(model, comm)
    grads = FlatGradients(model)
    # the fused CPU kernel: one pass over all parameters, a third of the foreach version's time
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay, fused=True)
    embedding = embed_optimizer = None
    if args.embed_dim:
        from hpcgnn.embedding import DistEmbedding, SparseAdam

        embedding = DistEmbedding(graph.num_nodes, args.embed_dim, name="node_embedding", comm=comm,
                                  book=graph.book)
        embed_optimizer = SparseAdam([embedding], lr=args.embed_lr)
    from hpcgnn.nn import seed_dropout

    torch.manual_seed(args.seed * 1000 + rank)
    np.random.seed((args.seed * 1000 + rank) % 2**32)
    random.seed(args.seed * 1000 + rank)
    seed_dropout([args.seed, rank])

    first_epoch, history = 0, []
    if args.resume:
        state = load_checkpoint(args.checkpoint_dir)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if embedding is not None:
            shard = embedding_shard_path(args.checkpoint_dir, state["epoch"], rank)
            embedding.load(shard + ".emb.npz")  # collective: fails on every rank alike
            error = None
            try:
                embed_optimizer.load(shard + ".opt.npz")
            except InputError as exc:
                error = exc
            if comm.allreduce(error is not None, op=MPI.LOR):  # never leave the other ranks waiting
                raise error or InputError(args.checkpoint_dir, "another rank could not load its embedding shard")
        set_rng_state(state["rng"][rank])
        first_epoch, history = state["epoch"], state["history"]
    loader.epoch = first_epoch
    metrics = open(args.metrics, "a" if args.resume else "w") if args.metrics and rank == 0 else None
    if rank == 0:
        print(f"hpcgnn train: {graph.name} {graph.num_nodes:,} nodes {graph.num_edges:,} edges, {comm.size} ranks, "
              f"{args.model} {args.layers}x{args.hidden}, fanouts {args.fanouts}, {len(loader)} steps/epoch, "
              f"{num_classes} classes", flush=True)

    # ---- train
    for epoch in range(first_epoch, args.epochs):
        model.train()
        phases = dict.fromkeys(PHASES, 0.0)
        loss_sum = correct = seen = 0.0
        t_epoch = time.perf_counter()
        batches = iter(loader)
        progress = _progress(batches, len(loader), epoch, rank == 0 and not args.no_progress)
        for batch in progress:
            t0 = time.perf_counter()
            grads.zero()
            logits = model(batch.blocks, model_inputs(batch.feat, embedding, batch.input_gids), batch.input_degree)
            labels = batch.label.long()
            loss = F.cross_entropy(logits, labels) if labels.numel() else logits.sum() * 0.0
            loss.backward()
            t1 = time.perf_counter()
            allreduce_(grads.buffer, comm)
            t2 = time.perf_counter()
            optimizer.step()
            if embed_optimizer is not None:
                embed_optimizer.step()  # collective: every rank takes the same number of steps
            phases["compute"] += (t1 - t0) + (time.perf_counter() - t2)
            phases["allreduce"] += t2 - t1
            loss_sum += float(loss.detach()) * labels.numel()
            correct += float((logits.argmax(1) == labels).sum())
            seen += labels.numel()
        epoch_time = time.perf_counter() - t_epoch
        phases["sample"], phases["gather"] = loader.timings["sample_s"], loader.timings["gather_s"]
        phases["wait"] = getattr(batches, "wait_s", 0.0)
        totals = np.array([loss_sum, correct, seen], dtype=np.float64)
        comm.Allreduce(MPI.IN_PLACE, totals, op=MPI.SUM)
        record = {"epoch": epoch + 1, "loss": totals[0] / max(totals[2], 1), "train_acc": totals[1] / max(totals[2], 1),
                  "epoch_time_s": comm.allreduce(epoch_time, op=MPI.MAX), "phases_s": phase_extremes(comm, phases)}
        if (args.eval_every and (epoch + 1) % args.eval_every == 0) or epoch + 1 == args.epochs:
            t0 = time.perf_counter()
            logits = layerwise_inference(model, graph, args.eval_batch_size, needs_degrees=args.model == "gcn",
                                         inputs=input_rows(graph, embedding))
            record.update(split_accuracy(logits, graph), eval_time_s=time.perf_counter() - t0)
        record["rank_phases_s"] = comm.gather(phases, root=0)
        history.append(record)
        if rank == 0:
            _report(record)
            if metrics:
                metrics.write(json.dumps({k: v for k, v in record.items() if k != "rank_phases_s"}) + "\n")
                metrics.flush()
        if args.checkpoint_every and (epoch + 1) % args.checkpoint_every == 0:
            if embedding is not None:  # shards first: 'latest' never points at a checkpoint without them
                shard = embedding_shard_path(args.checkpoint_dir, epoch + 1, rank)
                os.makedirs(args.checkpoint_dir, exist_ok=True)
                embedding.save(shard + ".emb.npz")
                embed_optimizer.save(shard + ".opt.npz")
                comm.Barrier()
            rngs = comm.gather(rng_state(), root=0)
            if rank == 0:
                save_checkpoint(args.checkpoint_dir, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                                      "config": config, "epoch": epoch + 1, "rng": rngs,
                                                      "history": history})
            comm.Barrier()

    # ---- final record
    final = {"final": True, "epochs": args.epochs, "ranks": comm.size,
             "epoch_time_s": float(np.median([r["epoch_time_s"] for r in history])) if history else None}
    evaluated = [r for r in history if r.get("test_acc") is not None]
    if evaluated:
        final.update(test_acc=evaluated[-1]["test_acc"], val_acc=evaluated[-1]["val_acc"])
        if evaluated[-1].get("val_acc") is not None:  # model selection on validation accuracy, or loss
            best = max(evaluated, key=lambda r: r["val_acc"])
            final.update(best_val_acc=best["val_acc"], test_acc_at_best_val=best["test_acc"], best_epoch=best["epoch"])
            with_loss = [r for r in evaluated if r.get("val_loss") is not None]  # older checkpoints lack it
            if with_loss:
                best = min(with_loss, key=lambda r: r["val_loss"])
                final.update(best_val_loss=best["val_loss"], test_acc_at_best_val_loss=best["test_acc"],
                             best_loss_epoch=best["epoch"])
    if history:
        final["phases_s"] = {k: float(np.median([r["phases_s"][k][1] for r in history])) for k in PHASES}
    import resource

    final["peak_rss_MiB"] = comm.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, root=0)
    if rank == 0:
        print("final: " + " ".join(f"{k} {v:.4f}" for k, v in final.items() if isinstance(v, float)), flush=True)
        if metrics:
            metrics.write(json.dumps(final) + "\n")
            metrics.close()
        if args.plot:
            from hpcgnn.plots import plot_history

            plot_history(history, args.plot)
    if embedding is not None:
        embedding.close()
    graph.close()
    return model, history


def _progress(iterable, total, epoch, enabled):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=f"epoch {epoch + 1}", leave=False, dynamic_ncols=True)


def _report(record):
    ph = record["phases_s"]
    parts = " ".join(f"{k} {ph[k][0]:.2f}/{ph[k][1]:.2f}" for k in PHASES)
    acc = "".join(f" {k} {record[k]:.4f}" for k in ("val_acc", "test_acc") if record.get(k) is not None)
    print(f"epoch {record['epoch']:3d} loss {record['loss']:.4f} train_acc {record['train_acc']:.4f}{acc} "
          f"time {record['epoch_time_s']:.2f}s [min/max s: {parts}]", flush=True)


if __name__ == "__main__":
    sys.exit(main())
