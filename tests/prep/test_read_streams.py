"""Edge lists as users hand them over: with a byte-order mark, compressed under any name,
through a pipe or a process substitution, with 1-based ids under a count header. Every edge
is read, or the input is refused in one line that names the fix."""
from __future__ import annotations

import bz2
import gzip
import lzma
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from hpcgnn.prep.dist.edgelist import read_edgelist_spread, splittable
from hpcgnn.prep.dist.ingest import NpzArrays, read_h5graph_spread
from hpcgnn.prep.read import detect_format, read_graph
from hpcgnn.prep.read.edgelist import read_edgelist
from hpcgnn.prep.read.nodetable import read_node_table
from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.datasets import oracle
from tests.conftest import mpiexec_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = np.array([0, 1, 2, 3, 4, 0], dtype=np.int64)
DST = np.array([1, 2, 3, 4, 0, 2], dtype=np.int64)
UTF8_BOM = b"\xef\xbb\xbf"


def edge_bytes(src=SRC, dst=DST, sep=" ", header=None, base=0):
    lines = ([header] if header else []) + [f"{s + base}{sep}{d + base}" for s, d in zip(src, dst)]
    return ("\n".join(lines) + "\n").encode()


def assert_edges(graph, src=SRC, dst=DST, num_nodes=5):
    assert graph.num_nodes == num_nodes
    np.testing.assert_array_equal(graph.src, src)
    np.testing.assert_array_equal(graph.dst, dst)


def big_edges(count=30_000, nodes=4_000, seed=3):
    """More than the 64 KiB a format detection looks at, and than a pipe's buffer."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, nodes, count), rng.integers(0, nodes, count)
    src[-1] = dst[-1] = nodes - 1  # the largest id in the last line: a lost tail shows in num_nodes too
    return src, dst, edge_bytes(src, dst)


def run(args, **kwargs):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, timeout=300, **kwargs)


def assert_dataset_holds(path, src, dst):
    """The partitioned dataset's edges are exactly ``src -> dst`` (as a multiset, by input ids)."""
    orig, indptr, indices = oracle(path)
    stored_dst = np.repeat(orig, np.diff(indptr))
    stored = sorted(zip(orig[indices].tolist(), stored_dst.tolist()))
    assert stored == sorted(zip(src.tolist(), dst.tolist()))


# --- byte-order marks ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, content, compress", [
    ("bom.txt", UTF8_BOM + edge_bytes(), None),
    ("bom_header.csv", UTF8_BOM + edge_bytes(sep=",", header="src,dst"), None),
    ("bom_count.txt", UTF8_BOM + b"5 6\n" + edge_bytes(), None),
    ("bom.txt.gz", UTF8_BOM + edge_bytes(), gzip.compress),
])
def test_a_utf8_byte_order_mark_is_skipped(tmp_path, name, content, compress):
    path = tmp_path / name
    path.write_bytes(compress(content) if compress else content)
    assert_edges(read_graph(path))  # the first edge is not taken for a header


def test_a_node_table_with_a_byte_order_mark_keeps_its_header(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_bytes(UTF8_BOM + b"id,label\n0,1\n1,0\n")
    table = read_node_table(path)
    assert table.label_column == "label" and table.ids.tolist() == [0, 1]


@pytest.mark.parametrize("encoding, shown", [("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE"),
                                             ("utf-32-le", "UTF-32LE")])
def test_utf16_and_utf32_text_is_refused_in_one_line(tmp_path, encoding, shown):
    path = tmp_path / "wide.txt"
    path.write_bytes(("\ufeff" + edge_bytes().decode()).encode(encoding))
    with pytest.raises(InputError) as exc:
        read_graph(path)
    message = str(exc.value)
    assert "\n" not in message and str(path) in message and shown in message and "iconv" in message, message


# --- compression told by magic bytes --------------------------------------------------------------

@pytest.mark.parametrize("name, compress", [("g.txt", gzip.compress), ("graph", gzip.compress),
                                            ("g.gzip", gzip.compress), ("g.txt", bz2.compress),
                                            ("g.edges", lzma.compress), ("g.dat", bz2.compress)])
def test_a_compressed_edge_list_is_read_whatever_its_name(tmp_path, name, compress):
    path = tmp_path / name
    path.write_bytes(compress(b"src dst\n" + edge_bytes()))
    assert detect_format(path) == "edgelist"
    assert_edges(read_graph(path))
    assert not splittable(path)  # compressed: read by rank 0, never by byte ranges


def test_a_compression_the_readers_do_not_decompress_is_named(tmp_path):
    path = tmp_path / "g.txt"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(40))  # zstd's magic
    with pytest.raises(InputError, match=r"g\.txt: field 'compression': is zstd-compressed.*decompress it first"):
        read_graph(path)


# --- pipes and process substitution ------------------------------------------------------------

def test_an_edge_list_on_stdin_is_partitioned_whole(tmp_path):
    src, dst, text = big_edges()
    out = tmp_path / "d"
    done = run(["-m", "hpcgnn.partition", "/dev/stdin", "--parts", "2", "--out", str(out)], input=text)
    assert done.returncode == 0, done.stderr.decode()
    assert_dataset_holds(out, src, dst)


def test_a_process_substitution_of_a_compressed_list_is_partitioned_whole(tmp_path):
    # bash's <(zcat graph.gz) hands the command /dev/fd/N, the read end of a pipe
    src, dst, text = big_edges(seed=4)
    read_end, write_end = os.pipe()

    def feed():
        with os.fdopen(write_end, "wb") as fh:
            fh.write(gzip.compress(text))

    feeder = threading.Thread(target=feed)
    feeder.start()
    out = tmp_path / "d"
    try:
        done = run(["-m", "hpcgnn.partition", f"/dev/fd/{read_end}", "--parts", "1", "--out", str(out)],
                   pass_fds=(read_end,))
    finally:
        os.close(read_end)
        feeder.join()
    assert done.returncode == 0, done.stderr.decode()
    assert_dataset_holds(out, src, dst)


def fifo_with(tmp_path, name, payload):
    """A named pipe fed ``payload`` by a thread (the open blocks until the reader opens it)."""
    path = tmp_path / name
    os.mkfifo(path)

    def feed():
        try:
            with open(path, "wb") as fh:
                fh.write(payload)
        except BrokenPipeError:  # the reader refused it early
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    return path, feeder


def test_a_pipe_is_read_once_and_a_second_read_is_refused(tmp_path):
    src, dst, text = big_edges(seed=5)
    path, feeder = fifo_with(tmp_path, "graph", text)
    assert detect_format(path) == "edgelist"  # its first lines were looked at ...
    graph = read_graph(path)  # ... and are still read
    feeder.join()
    assert graph.num_nodes == 4_000 and graph.num_edges == src.shape[0]
    np.testing.assert_array_equal(graph.src, src)
    np.testing.assert_array_equal(graph.dst, dst)
    with pytest.raises(InputError) as exc:
        read_edgelist(path)
    assert "read once already" in str(exc.value) and "write it to a regular file first" in str(exc.value)


@pytest.mark.parametrize("name, options", [("g.npz", {}), ("g.h5", {}), ("g.bin", {"format": "npz"})])
def test_a_pipe_where_a_seeking_reader_is_needed_is_refused_without_reading_it(tmp_path, name, options):
    path = tmp_path / name
    os.mkfifo(path)  # no writer: opening it would block, so the refusal must come without opening it
    with pytest.raises(InputError) as exc:
        read_graph(path, **options)
    message = str(exc.value)
    assert "\n" not in message and str(path) in message and "is a pipe" in message, message
    assert "write it to a regular file first" in message, message


@pytest.mark.parametrize("read", [lambda path: NpzArrays(path), lambda path: read_h5graph_spread(None, path),
                                  lambda path: read_edgelist_spread(None, path)], ids=["npz", "h5graph", "edgelist"])
def test_the_readers_by_rows_and_byte_ranges_refuse_a_pipe_without_opening_it(tmp_path, read):
    path = tmp_path / "g"
    os.mkfifo(path)  # no writer: an open would block
    with pytest.raises(InputError, match="is a pipe.*write it to a regular file first"):
        read(path)


def test_the_parallel_reader_refuses_a_pipe(tmp_path):
    _, _, text = big_edges(count=200, nodes=50)
    done = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", "hpcgnn.partition", "/dev/stdin",
                           "--parts", "2", "--method", "ldg", "--out", str(tmp_path / "d")], cwd=ROOT, input=text,
                          capture_output=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    err = done.stderr.decode()
    assert done.returncode == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "/dev/stdin" in lines[0] and "write it to a regular file first" in lines[0], err
    assert not (tmp_path / "d").exists()


# --- 1-based ids under a count header -----------------------------------------------------------

@pytest.mark.parametrize("header, sep", [("5 6", " "), ("5 6 0", " "), ("5\t6", "\t"), ("5,6,1", ",")])
def test_one_based_ids_under_a_count_header_name_id_base(tmp_path, header, sep):
    path = tmp_path / "g.txt"
    path.write_bytes(header.encode() + b"\n" + edge_bytes(sep=sep, base=1))
    with pytest.raises(InputError) as exc:
        read_graph(path)
    message = str(exc.value)
    assert "\n" not in message and "--id-base 1" in message and "ids run from 1 to 5" in message, message
    assert "--num-nodes" not in message
    graph = read_graph(path, id_base=1)
    assert_edges(graph)
    assert graph.ndata["orig_id"].tolist() == [1, 2, 3, 4, 5]


def test_id_base_is_suggested_only_where_the_data_say_so(tmp_path):
    zero_based = tmp_path / "zero.txt"  # a count header over 0-based ids: read as it is
    zero_based.write_bytes(b"5 6\n" + edge_bytes())
    assert_edges(read_graph(zero_based))
    too_few = tmp_path / "few.txt"  # ids 1..5 under a header of 4 nodes: not 1-based counting
    too_few.write_bytes(b"4 6 0\n" + edge_bytes(base=1))
    with pytest.raises(InputError) as exc:
        read_graph(too_few)
    assert "--id-base" not in str(exc.value) and "--num-nodes" in str(exc.value)
    edge_first = tmp_path / "edge.txt"  # a first line that does not count the lines after it is an edge
    edge_first.write_bytes(b"5 6\n" + edge_bytes(base=1)[:-4] + b"\n")
    graph = read_graph(edge_first)
    assert graph.src[0] == 5 and graph.dst[0] == 6


@pytest.mark.mpi(sizes=(2,))
def test_the_parallel_reader_names_id_base_too(nranks, comm, shared_tmp):
    path = os.path.join(shared_tmp, "one_based.txt")
    if comm.rank == 0:
        with open(path, "wb") as fh:
            fh.write(b"5 6\n" + edge_bytes(base=1))
    comm.barrier()
    with pytest.raises(InputError, match="--id-base 1"):
        read_edgelist_spread(comm, path)
    graph = read_edgelist_spread(comm, path, id_base=1)
    assert graph.num_nodes == 5 and graph.num_edges(comm) == 6
