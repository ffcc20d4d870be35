"""Every partition writer stores exactly the cleaned input's edges, edge for edge in the input's
ids, and records the digest of them that ``inspect --verify`` checks the part files against."""
import argparse
import os
import subprocess
import sys

import numpy as np
import pytest

from hpcgnn.format import ondisk
from hpcgnn.format.fields import ORIG_ID
from hpcgnn.prep import edge_digest, transform
from hpcgnn.prep.edge_digest import EdgeDigest, csc_digest, graph_digest, pairs_digest
from hpcgnn.prep.generate import rmat_graph
from hpcgnn.prep.graph import Graph
from hpcgnn.prep.inspection import check_against_input, verify
from hpcgnn.prep.partition import partition_graph
from hpcgnn.prep.read import write_npz
from hpcgnn.testing.datasets import oracle


def messy_graph(num_nodes=1500, num_edges=9000) -> Graph:
    """An RMAT graph with what clean-up changes: self loops, parallel edges (kept unless dedup or
    symmetrize removes them) and nodes outside the largest component."""
    graph = rmat_graph(num_nodes, num_edges, feat_dim=2, seed=5)
    rng = np.random.default_rng(1)
    repeats = rng.choice(graph.num_edges, 300)
    loops = rng.choice(num_nodes, 40)
    src = np.concatenate([graph.src, graph.src[repeats], graph.src[repeats[:50]], loops, [num_nodes - 1]])
    dst = np.concatenate([graph.dst, graph.dst[repeats], graph.dst[repeats[:50]], loops, [num_nodes - 2]])
    return Graph(num_nodes, src, dst, graph.ndata, {}, "messy")


def sorted_pairs(src, dst) -> np.ndarray:
    pairs = np.stack([np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)], axis=1)
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


def stored_edges(path) -> np.ndarray:
    """Every stored edge of a dataset as (orig src, orig dst), sorted: a multiset, read from the files."""
    orig, indptr, indices = oracle(path)
    dst = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    return sorted_pairs(orig[indices], orig[dst])


def cleaned_edges(graph, **options) -> np.ndarray:
    """The serial clean-up's edges in the input's ids, sorted (what every writer must store)."""
    cleaned = transform.prepare(graph, **options)
    orig = cleaned.ndata.get(ORIG_ID, np.arange(cleaned.num_nodes))
    return sorted_pairs(orig[cleaned.src], orig[cleaned.dst])


def check_dataset(path, want):
    """meta.json's digest is ``want``'s, verify finds the part files agree with it, and they hold
    exactly ``want`` (with multiplicity)."""
    meta = ondisk.read_meta(path)
    assert meta["edge_digest"] == pairs_digest(want[:, 0], want[:, 1]).to_meta()
    notes = []
    assert verify(path, meta, notes) == [] and notes == []
    got = stored_edges(path)
    assert got.shape == want.shape and np.array_equal(got, want)


# ------------------------------------------------------------------ the digest
def test_digest_ignores_order_and_counts_repeats():
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 50, 400), rng.integers(0, 50, 400)
    whole = pairs_digest(src, dst)
    order = rng.permutation(400)
    assert pairs_digest(src[order], dst[order]) == whole
    assert pairs_digest(src[:150], dst[:150]) + pairs_digest(src[150:], dst[150:]) == whole
    assert EdgeDigest.from_meta(whole.to_meta()) == whole
    changed = {
        "repeat": (np.append(src, src[0]), np.append(dst, dst[0])),
        "reverse": (np.append(src[1:], dst[0]), np.append(dst[1:], src[0])),
        "source": (np.roll(src, 1), dst),
        "one source": (np.where(np.arange(400) == 7, src + 1, src), dst),
    }
    for name, (s, d) in changed.items():
        assert pairs_digest(s, d).value != whole.value, name
    # the pair hash is not a sum of per-id parts: swapping two edges' sources changes it
    a, b = np.flatnonzero((src[:-1] != src[1:]) & (dst[:-1] != dst[1:]))[0] + np.array([0, 1])
    swapped = src.copy()
    swapped[[a, b]] = swapped[[b, a]]
    assert pairs_digest(swapped, dst) != whole


def test_blocks_and_id_maps_give_the_same_digest(monkeypatch):
    rng = np.random.default_rng(3)
    num_nodes = 300
    orig = rng.choice(10**12, num_nodes, replace=False)  # input ids far beyond the node count
    src, dst = rng.integers(0, num_nodes, 5000), rng.integers(0, num_nodes, 5000)
    want = pairs_digest(orig[src], orig[dst])
    # a CSC of the same edges, read in runs and blocks smaller than one node's row
    order = np.argsort(dst, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=num_nodes))])
    monkeypatch.setattr(edge_digest, "BLOCK_EDGES", 7)
    monkeypatch.setattr(edge_digest, "RUN_EDGES", 11)
    assert pairs_digest(orig[src], orig[dst]) == want
    assert graph_digest(src, dst, orig) == want
    assert csc_digest(indptr, src[order], orig, orig) == want


# ------------------------------------------------------------------ the serial writer
@pytest.mark.parametrize("options", [{"drop_self_loops": True},
                                     {"drop_self_loops": True, "symmetrize_edges": True, "largest_cc": True}],
                         ids=["parallel-edges", "symmetric-component"])
def test_serial_writer_stores_the_cleaned_edges(tmp_path, options):
    graph = messy_graph()
    want = cleaned_edges(graph, **options)
    partition_graph(transform.prepare(graph, **options), tmp_path / "d", 3, "metis")
    check_dataset(tmp_path / "d", want)


# ------------------------------------------------------------------ the distributed writers
@pytest.mark.mpi(sizes=(1, 2))
def test_distributed_writers_store_the_cleaned_edges(nranks, comm, shared_tmp):
    from hpcgnn.prep.dist.pipeline import partition_distributed
    from hpcgnn.prep.partition import build_parser

    graph = messy_graph()
    path = os.path.join(shared_tmp, "messy.npz")
    if comm.rank == 0:
        write_npz(graph, path)
    comm.barrier()
    cases = {  # multilevel keeps parallel edges; ldg writes a symmetric graph's component
        "multilevel": (["--remove-self-loops", "--largest-component", "--coarse-nodes", "200"],
                       {"drop_self_loops": True, "largest_cc": True}),
        "ldg": (["--remove-self-loops", "--symmetrize", "--largest-component"],
                {"drop_self_loops": True, "symmetrize_edges": True, "largest_cc": True}),
    }
    for method, (flags, options) in cases.items():
        out = os.path.join(shared_tmp, method)
        args = build_parser().parse_args([path, "--parts", "3", "--out", out, "--method", method,
                                          "--balance", "nodes,in_degree", *flags])
        partition_distributed(comm, args, out)
        if comm.rank == 0:
            check_dataset(out, cleaned_edges(graph, **options))
        comm.barrier()


# ------------------------------------------------------------------ inspect --verify --against INPUT
def run(module, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120)


def write_edge_list(path, src, dst):
    path.write_text("".join(f"{s} {d}\n" for s, d in zip(src, dst)))


@pytest.fixture(scope="module")
def edge_list_dataset(tmp_path_factory):
    """An edge list with sparse ids (self loops, parallel edges, a stray component) partitioned by
    the command with --relabel and clean-up, and the same edge list held out for link prediction."""
    root = tmp_path_factory.mktemp("against")
    graph = messy_graph(num_nodes=400, num_edges=2400)
    ids = np.sort(np.random.default_rng(2).choice(10**9, graph.num_nodes, replace=False))  # the file's own ids
    write_edge_list(root / "g.txt", ids[graph.src], ids[graph.dst])
    for name, flags in (("plain", ["--remove-self-loops", "--largest-component"]),
                        ("link", ["--symmetrize", "--edge-split", "0.8,0.1,0.1", "--eval-negatives", "5"])):
        proc = run("hpcgnn.partition", root / "g.txt", "--relabel", "--parts", "2", "--out", root / name, *flags)
        assert proc.returncode == 0, proc.stderr
    return root


def test_verify_against_the_input_reads_and_cleans_it_again(edge_list_dataset):
    root = edge_list_dataset
    reader = argparse.Namespace(relabel=True)
    for name in ("plain", "link"):  # the link dataset's held-out edges are drawn again from the seed
        meta = ondisk.read_meta(root / name)
        problems = []
        check_against_input(root / name, meta, root / "g.txt", problems, reader)
        assert problems == [], (name, problems)
    proc = run("hpcgnn.inspect", root / "plain", "--verify", "--against", root / "g.txt", "--relabel")
    assert proc.returncode == 0 and "verify: OK" in proc.stdout and "note" not in proc.stdout, proc.stdout
    # an input that differs in one edge's source is named in one line, with and without a recorded digest
    lines = (root / "g.txt").read_text().splitlines()
    first = lines[0].split()
    other = next(line.split()[0] for line in lines if line.split()[0] != first[0])
    lines[0] = f"{other} {first[1]}"
    changed = root / "changed.txt"
    changed.write_text("\n".join(lines) + "\n")
    meta = ondisk.read_meta(root / "plain")
    for recorded in (True, False):
        if not recorded:
            meta.pop("edge_digest")
        problems = []
        check_against_input(root / "plain", meta, changed, problems, reader)
        assert len(problems) == 1 and problems[0].startswith(f"{changed}: field 'edges': its edges"), problems
    proc = run("hpcgnn.inspect", root / "plain", "--against", root / "g.txt")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "'--against'" in proc.stderr, proc.stderr
