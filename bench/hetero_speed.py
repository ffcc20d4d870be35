"""RGCN on a typed graph with IGBH's schema, hpcgnn and DGL 2.1 side by side in one run: training
seeds per second at equal accuracy, and per-relation sampling seeds per second.

    python bench/hetero_speed.py                 # the issue's graph: >= 2M nodes, >= 20M edges
    python bench/hetero_speed.py --quick         # a few thousand nodes: a smoke test of seconds
    python bench/hetero_speed.py --threads 2 --epochs 2 --fanouts 10,15 --batch-size 1000

Graph   IGBH's schema (paper, author, institute, fos; cites, written_by, affiliated_to, topic and
        their rev_ reverses), planted learnable labels on papers, features on every type, drawn
        once per size and seed (bench/work/hetero_*). hpcgnn gets it partitioned into
        ``--threads`` METIS parts (hpcgnn.prep.partition.partition_graph); DGL the same edges,
        features, labels and split as one npz (the typed exchange layout bench/dgl_hetero.py reads:
        per relation ``<src>__<rel>__<dst>__src``/``__dst`` in type-local ids, ``feat__<type>``,
        the labelled type's ``label`` and masks, ``schema`` as JSON).
Model   RGCN, 2 layers: per-type Linear input projection to ``--hidden``, per relation a weight
        and the mean over the relation's sampled in-neighbours, summed over relations, plus a
        self-loop weight and bias; ReLU and dropout between layers; Adam. hpcgnn:
        ``--model rgcn --sampler relational``; DGL: its rgcn-hetero example's RelGraphConvLayer
        (HeteroGraphConv of GraphConv per relation) on blocks of its heterogeneous NeighborSampler.
Batches ``--fanouts`` in-neighbours per node, layer AND relation, input layer first (both sides'
        order); ``--batch-size`` seeds per batch: hpcgnn's per rank and step, as in the other DGL
        comparisons (bench/samplers.py), so its ranks together take ``--threads`` times DGL's seeds
        per optimizer step, and half DGL's steps per epoch at 2 ranks.
Threads hpcgnn runs ``--threads`` MPI ranks of one thread each; DGL one process (its single-machine
        training; DistDGL needs a launcher and servers not set up here), once per
        ``--dgl-threads`` count (default ``--threads`` and 1), and the table takes DGL's faster
        run of each figure: OpenMP's parallel regions stall when other processes hold the cores,
        so on a shared machine either count can be DGL's best. DGL's OpenMP threads wait
        passively (``OMP_WAIT_POLICY=PASSIVE``): with other jobs on the cores, spinning threads
        made its 2-thread sampler 10x slower (1,000 against 10,000 seeds/s at a load average of
        7). The 1-minute load average before and after each side is printed and recorded.
Figures training seeds/s: training papers of an epoch / the median epoch's seconds (hpcgnn: the
        slowest rank's, from its metrics file; evaluation excluded on both sides). Sampling
        seeds/s: the samplers alone (hpcgnn: every rank sampling batches of its own share of the
        training papers, all ranks' seeds / the slowest rank's seconds; DGL: its DataLoader
        yielding blocks, no features, as many batches as all hpcgnn ranks), each side's best of
        ``--sample-rounds`` rounds: other jobs' load comes in bursts, and a round of a second
        or so lands in one or misses it (every round is recorded). Accuracy: both by
        layer-wise full-neighbourhood inference after ``--epochs`` epochs, on the papers of
        val_mask and test_mask, the same model-selection-free figure on both sides.
Time    the default graph is drawn and partitioned once (about a minute here) and reused from
        bench/work; a run then takes about 12 minutes on 2 cores, most of it the two sides'
        full-neighbourhood evaluations of all 2M nodes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = "__"
#: per size: nodes (all types together) and edges before reverses; papers carry the labels
SIZES = {"quick": {"nodes": 6_000, "edges": 30_000, "feat_dim": 32, "classes": 8},
         "full": {"nodes": 2_000_000, "edges": 10_000_000, "feat_dim": 128, "classes": 19}}


# ---------------------------------------------------------------------------------------------
# the graph

def _draw_graph(size, seed):
    """The IGBH-schema graph of ``size`` (:func:`hpcgnn.prep.generate_hetero.hetero_graph`, reverses added)."""
    from hpcgnn.prep.generate_hetero import hetero_graph

    return hetero_graph(num_nodes=size["nodes"], num_edges=size["edges"], feat_dim=size["feat_dim"],
                        num_classes=size["classes"], seed=seed, add_reverse=True)


def _limit_train(graph, train_papers, seed):
    """Keep ``train_papers`` of the training papers (seeded), so an epoch is a fixed number of
    batches whatever the generator's split; val and test stay."""
    mask = graph.ndata["train_mask"]
    ids = np.flatnonzero(mask)
    if train_papers and ids.shape[0] > train_papers:
        keep = np.random.default_rng(seed).choice(ids, train_papers, replace=False)
        mask[:] = False
        mask[keep] = True


def write_exchange(graph, path):
    """The typed exchange npz DGL's side reads (module docstring), written through a temporary file."""
    from hpcgnn.format.schema import ETYPE
    from hpcgnn.runtime.files import atomic_path

    schema, offsets = graph.schema, graph.type_offsets
    arrays = {"schema": np.array(json.dumps({"node_types": list(schema.node_types),
                                             "relations": [list(r) for r in schema.relations],
                                             "target": schema.target}))}
    for t, name in enumerate(schema.node_types):
        arrays[f"num_nodes{SEP}{name}"] = np.int64(offsets[t + 1] - offsets[t])
        feat = graph.typed_fields.get(name, {}).get("feat")
        if feat is not None:
            arrays[f"feat{SEP}{name}"] = np.asarray(feat, dtype=np.float32)
    etype = graph.edata[ETYPE]
    for r, (src_type, rel, dst_type) in enumerate(schema.relations):
        pick = np.flatnonzero(etype == r)
        key = SEP.join((src_type, rel, dst_type))
        arrays[key + SEP + "src"] = graph.src[pick] - offsets[schema.type_index(src_type)]
        arrays[key + SEP + "dst"] = graph.dst[pick] - offsets[schema.type_index(dst_type)]
    t = schema.type_index(schema.target)
    lo, hi = offsets[t], offsets[t + 1]
    for name in ("label", "train_mask", "val_mask", "test_mask"):
        if name in graph.ndata:
            arrays[name] = graph.ndata[name][lo:hi]
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def ensure_inputs(args):
    """Draw (once per size, seed and training count) the graph, its exchange npz and its parts;
    return ``(npz path, parts directory, graph facts)``."""
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.runtime.files import atomic_path

    tag = f"hetero_{args.size}_s{args.seed}_t{args.train_papers}"
    npz = os.path.join(common.WORK, tag + ".npz")
    facts_path = os.path.join(common.WORK, tag + ".json")
    parts = os.path.join(common.WORK, f"{tag}_p{args.threads}")
    os.makedirs(common.WORK, exist_ok=True)
    have = os.path.exists(npz) and os.path.exists(facts_path) and os.path.exists(os.path.join(parts, "meta.json"))
    if have and not args.fresh:
        with open(facts_path) as fh:
            return npz, parts, json.load(fh)
    t0 = time.perf_counter()
    graph = _draw_graph(SIZES[args.size], args.seed)
    _limit_train(graph, args.train_papers, args.seed)
    t_draw = time.perf_counter() - t0
    write_exchange(graph, npz)
    t0 = time.perf_counter()
    partition_graph(graph, parts, args.threads, method="metis", seed=args.seed)
    t_part = time.perf_counter() - t0
    offsets = graph.type_offsets
    counts = np.bincount(graph.edata["etype"], minlength=graph.schema.num_relations)
    facts = {"name": graph.name, "nodes": int(graph.num_nodes), "edges": int(graph.src.shape[0]),
             "nodes_by_type": {t: int(offsets[i + 1] - offsets[i]) for i, t in enumerate(graph.schema.node_types)},
             "edges_by_relation": {r: int(c) for r, c in zip(graph.schema.relation_names, counts)},
             "train_papers": int(graph.ndata["train_mask"].sum()), "val_papers": int(graph.ndata["val_mask"].sum()),
             "test_papers": int(graph.ndata["test_mask"].sum()),
             "classes": int(graph.ndata["label"].max()) + 1, "draw_s": round(t_draw, 1),
             "partition_s": round(t_part, 1)}
    with atomic_path(facts_path) as tmp, open(tmp, "w") as fh:
        json.dump(facts, fh)
    return npz, parts, facts


# ---------------------------------------------------------------------------------------------
# hpcgnn's side

def _mpiexec(ranks, argv, what):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    done = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, *argv], capture_output=True, text=True,
                          env=dict(common.serial_env(), OMP_NUM_THREADS="1"))
    if done.returncode:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise RuntimeError(f"{what} failed: {' '.join(argv)}")
    return done.stdout


def model_flags(args) -> list:
    return ["--model", "rgcn", "--sampler", "relational", "--fanouts", args.fanouts, "--batch-size",
            str(args.batch_size), "--hidden", str(args.hidden), "--lr", str(args.lr), "--dropout", str(args.dropout),
            "--feature-scale", "none", "--seed", str(args.seed)]


def hpcgnn_training(args, parts) -> dict:
    """``--epochs`` epochs of hpcgnn.train, evaluated after the last; figures from its metrics file."""
    metrics = os.path.join(common.WORK, f"hetero_speed_{args.size}_p{args.threads}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    _mpiexec(args.threads, ["-m", "hpcgnn.train", "--data", parts, *model_flags(args), "--epochs", str(args.epochs),
                            "--eval-every", "0", "--metrics-file", metrics, "--no-progress"], "hpcgnn.train")
    with open(metrics) as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    epochs = [r for r in records if "epoch" in r and not r.get("final") and "epoch_time_s" in r]
    final = records[-1]
    times = [r["epoch_time_s"] for r in epochs]
    # every epoch scores every training paper once; the median epoch as DGL's side takes it
    return {"epoch_time_s": times, "loss": [r.get("loss") for r in epochs], "steps": epochs[-1]["steps"],
            "seeds_per_s": epochs[-1]["train_seen"] / float(np.median(times)), "phases_s": final.get("phases_s"),
            "val_acc": epochs[-1].get("val_acc", final.get("val_acc")),
            "test_acc": epochs[-1].get("test_acc", final.get("test_acc")),
            "eval_time_s": final.get("eval_time_s")}


def hpcgnn_sampling(args, parts) -> dict:
    out = _mpiexec(args.threads, [os.path.abspath(__file__), "sample-worker", parts, "--fanouts", args.fanouts,
                                  "--batch-size", str(args.batch_size), "--sample-batches", str(args.sample_batches),
                                  "--sample-rounds", str(args.sample_rounds), "--seed", str(args.seed)],
                   "the sampling worker")
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def sample_worker(argv):
    """One rank of the sampler-alone measurement (run under mpiexec by :func:`hpcgnn_sampling`):
    the relational sampler on batches of this rank's training papers, ``--sample-rounds`` rounds
    of ``--sample-batches`` timed batches after 3 warm-up ones; rank 0 prints, per round, seeds of
    all ranks / the slowest rank's seconds, and the best round's figure."""
    parser = argparse.ArgumentParser()
    parser.add_argument("parts")
    parser.add_argument("--fanouts")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--sample-batches", type=int)
    parser.add_argument("--sample-rounds", type=int, default=1)
    parser.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    from hpcgnn import DistGraph, node_split
    from hpcgnn.runtime.abort import install_abort_hook
    from hpcgnn.runtime.allocator import keep_heap_memory
    from hpcgnn.runtime.comm import mpi, world
    from hpcgnn.sampling.relational import RelationalSampler, layer_fanouts

    keep_heap_memory()  # as hpcgnn.train does
    MPI = mpi()
    install_abort_hook()
    comm = world()
    graph = DistGraph(args.parts, comm)
    train = node_split("train_mask", graph, seed=args.seed)
    sampler = RelationalSampler(layer_fanouts(graph.schema, [int(f) for f in args.fanouts.split(",")], ""),
                                seed=args.seed)
    rng = np.random.default_rng(args.seed + comm.rank)
    warmup = 3
    batches = [rng.choice(train, min(args.batch_size, train.shape[0]), replace=False)
               for _ in range(warmup + args.sample_batches)]
    for i in range(warmup):
        sampler.sample(graph, batches[i], seed=i)
    rounds, edges, nodes = [], [], []
    for _ in range(args.sample_rounds):
        comm.Barrier()
        t0 = time.perf_counter()
        for i in range(warmup, warmup + args.sample_batches):
            batch = sampler.sample(graph, batches[i], seed=i)
            if not rounds:
                edges.append([b.num_edges for b in batch.blocks])
                nodes.append([b.num_src for b in batch.blocks] + [batch.blocks[-1].num_dst])
        slowest = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        total = comm.allreduce(args.sample_batches * batches[warmup].shape[0], op=MPI.SUM)
        rounds.append(total / slowest)
    if comm.rank == 0:
        best = max(rounds)
        row = {"seconds": total / best, "seeds_per_s": best, "rounds_seeds_per_s": rounds,
               "batches_per_rank": args.sample_batches}
        # rank 0's batches: the blocks' sizes beside DGL's
        row["edges_per_block"] = np.mean(edges, axis=0).round().astype(int).tolist()
        row["nodes_per_layer"] = np.mean(nodes, axis=0).round().astype(int).tolist()
        print(json.dumps(row), flush=True)


# ---------------------------------------------------------------------------------------------
# DGL's side

def dgl_runs(args, npz, threads) -> dict:
    """bench/dgl_hetero.py in DGL's virtualenv with ``threads`` threads: ``{"load"|"sampling"|"training":
    its JSON line}``."""
    python = common.dgl_python()
    if python is None:
        sys.exit("hetero_speed.py: error: DGL 2.1's virtualenv is missing: build it with "
                 "bash ../shared/anchor_dgl/setup.sh (or set DGLENV), or run with --no-dgl")
    before = os.getloadavg()[0]
    done = subprocess.run([python, os.path.join(HERE, "dgl_hetero.py"), npz, "--fanouts", args.fanouts,
                           "--batch-size", str(args.batch_size), "--hidden", str(args.hidden), "--lr", str(args.lr),
                           "--dropout", str(args.dropout), "--epochs", str(args.epochs), "--threads", str(threads),
                           "--sample-batches", str(args.sample_batches * args.threads),
                           "--sample-rounds", str(args.sample_rounds), "--seed", str(args.seed)],
                          capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE"))
    if done.returncode:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise RuntimeError("dgl_hetero.py failed")
    rows = {row["what"]: row for row in (json.loads(x) for x in done.stdout.splitlines() if x.startswith("{"))}
    rows["load_average"] = [before, os.getloadavg()[0]]
    return rows


# ---------------------------------------------------------------------------------------------

def _ratio(a, b):
    return a / b if a is not None and b else float("nan")


def _best(runs, what, key):
    """``(threads, row)`` of the DGL run with the highest ``key`` of ``what`` ((None, {}) without runs)."""
    scored = [(row[what][key], threads, row[what]) for threads, row in runs.items() if row.get(what, {}).get(key)]
    if not scored:
        return None, {}
    _, threads, row = max(scored, key=lambda item: item[0])
    return threads, row


def comparison_rows(ours, runs) -> list:
    """The table: seeds/s of training and of sampling against DGL's best thread count, accuracy of
    both (DGL's from its fastest training run)."""
    mine_t, mine_s = ours["training"], ours["sampling"]
    t_threads, dgl_t = _best(runs, "training", "epoch_seeds_per_s")
    s_threads, dgl_s = _best(runs, "sampling", "seeds_per_s")
    rows = [{"what": "training seeds/s", "hpcgnn": mine_t["seeds_per_s"], "DGL 2.1": dgl_t.get("epoch_seeds_per_s"),
             "DGL threads": t_threads, "ratio": _ratio(mine_t["seeds_per_s"], dgl_t.get("epoch_seeds_per_s"))},
            {"what": "sampling seeds/s (per relation)", "hpcgnn": mine_s["seeds_per_s"],
             "DGL 2.1": dgl_s.get("seeds_per_s"), "DGL threads": s_threads,
             "ratio": _ratio(mine_s["seeds_per_s"], dgl_s.get("seeds_per_s"))}]
    for split in ("val_acc", "test_acc"):
        a, b = mine_t.get(split), dgl_t.get(split)
        rows.append({"what": f"{split.replace('_acc', '')} accuracy %", "hpcgnn": None if a is None else 100 * a,
                     "DGL 2.1": None if b is None else 100 * b, "DGL threads": t_threads,
                     "difference": None if a is None or b is None else 100 * (a - b)})
    return rows


def print_table(rows, ranks):
    print(f"\n| | hpcgnn ({ranks} ranks) | DGL 2.1 | DGL threads | hpcgnn / DGL |\n|---|---|---|---|---|")
    for row in rows:
        threads = row["DGL threads"] if row["DGL threads"] is not None else "-"
        if "ratio" in row:
            theirs = f"{row['DGL 2.1']:,.0f}" if row["DGL 2.1"] else "-"
            print(f"| {row['what']} | {row['hpcgnn']:,.0f} | {theirs} | {threads} | {row['ratio']:.2f}x |")
        else:
            diff = f"{row['difference']:+.1f} points" if row["difference"] is not None else "-"
            print(f"| {row['what']} | {_fmt(row['hpcgnn'])} | {_fmt(row['DGL 2.1'])} | {threads} | {diff} |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "sample-worker":
        return sample_worker(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a graph of a few thousand nodes: a smoke test")
    parser.add_argument("--threads", type=int, default=2, help="hpcgnn's ranks of one thread each")
    parser.add_argument("--dgl-threads", default=None,
                        help="comma-separated thread counts DGL runs with, the table taking its fastest "
                             "(default: --threads, then 1 when that differs)")
    parser.add_argument("--fanouts", default="10,15", help="per layer (input layer first) and relation")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-papers", type=int, default=None,
                        help="keep this many training papers (default: 20,000; --quick: all)")
    parser.add_argument("--sample-batches", type=int, default=40, help="timed sampler batches per hpcgnn rank "
                        "and round (DGL: as many in all)")
    parser.add_argument("--sample-rounds", type=int, default=3,
                        help="sampler rounds on each side, each side's best round taken (other jobs' load comes "
                             "in bursts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fresh", action="store_true", help="draw and partition the graph again")
    parser.add_argument("--no-dgl", action="store_true", help="hpcgnn's side only")
    parser.add_argument("--json", help="append this run's record here instead of bench/results/hetero_speed.json")
    args = parser.parse_args()
    args.size = "quick" if args.quick else "full"
    if args.train_papers is None:
        args.train_papers = 0 if args.quick else 20_000
    if args.quick:
        args.batch_size = min(args.batch_size, 200)
    dgl_threads = [int(t) for t in (args.dgl_threads or f"{args.threads},1").split(",")]
    dgl_threads = list(dict.fromkeys(dgl_threads))
    common.print_header("RGCN on an IGBH-schema typed graph: hpcgnn and DGL 2.1 side by side")
    t0 = time.perf_counter()
    npz, parts, facts = ensure_inputs(args)
    print(f"# graph: {facts['nodes']:,} nodes {facts['nodes_by_type']}, {facts['edges']:,} edges "
          f"{facts['edges_by_relation']}; {facts['train_papers']:,} training papers, {facts['classes']} classes "
          f"(ready in {time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"# recipe: RGCN 2 x {args.hidden}, fanouts {args.fanouts} per relation, batch {args.batch_size}, "
          f"{args.epochs} epochs; hpcgnn {args.threads} ranks of 1 thread, DGL {dgl_threads} threads", flush=True)
    before = os.getloadavg()[0]
    ours = {"training": hpcgnn_training(args, parts), "sampling": hpcgnn_sampling(args, parts),
            "load_average": [before, os.getloadavg()[0]]}
    print("# hpcgnn: " + json.dumps(ours), flush=True)
    runs = {}
    for threads in [] if args.no_dgl else dgl_threads:
        runs[threads] = dgl_runs(args, npz, threads)
        print(f"# DGL, {threads} threads: " + json.dumps(runs[threads]), flush=True)
    rows = comparison_rows(ours, runs)
    print("# load average (1 min) before and after each side: hpcgnn "
          + ", ".join(f"{x:.1f}" for x in ours["load_average"])
          + "".join(f"; DGL {t} threads " + ", ".join(f"{x:.1f}" for x in r["load_average"]) for t, r in runs.items()))
    print_table(rows, args.threads)
    common.record(rows, path=args.json, title="RGCN on an IGBH-schema typed graph, hpcgnn vs DGL 2.1",
                  graph=facts, recipe={k: getattr(args, k) for k in ("size", "threads", "fanouts", "batch_size",
                                                                     "hidden", "lr", "dropout", "epochs", "seed")},
                  hpcgnn=ours, dgl={str(t): r for t, r in runs.items()})


def _fmt(x):
    return f"{x:.1f}" if x is not None else "-"


if __name__ == "__main__":
    main()
