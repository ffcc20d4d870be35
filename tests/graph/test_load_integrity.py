"""A bad part fails the load on every rank at once, with one line naming the file and dataset."""
import json
import os

import pytest

from hpcgnn.format import ondisk
from hpcgnn.graph import DistGraph
from hpcgnn.runtime.errors import InputError
from hpcgnn.testing.datasets import corrupt_bytes, make_dataset


@pytest.mark.mpi(sizes=(2, 4))
def test_corrupt_feature_bytes_fail_every_rank(nranks, comm, shared_tmp):
    path, _ = make_dataset(comm, shared_tmp, comm.size, name="corrupt")
    bad = comm.size - 1
    part_file = os.path.join(path, ondisk.part_file_name(bad))
    if comm.rank == 0:
        corrupt_bytes(part_file)
    comm.barrier()
    with pytest.raises(InputError) as err:
        DistGraph(path, comm)
    text = str(err.value)
    assert "\n" not in text and f"{part_file}: field 'feat': corrupt data" in text, text
    if comm.rank != bad:  # the others are told, instead of waiting in the next collective
        assert f"rank {bad} failed" in text, text


@pytest.mark.mpi(sizes=(2,))
def test_starts_that_disagree_with_the_parts_fail_every_rank(nranks, comm, shared_tmp):
    path, _ = make_dataset(comm, shared_tmp, comm.size, name="shifted")
    if comm.rank == 0:  # a self-consistent meta.json whose first boundary the part files contradict
        with open(os.path.join(path, "meta.json")) as fh:
            meta = json.load(fh)
        meta["node_starts"][1] += 1
        meta["parts"][0]["num_nodes"] += 1
        meta["parts"][1]["num_nodes"] -= 1
        with open(os.path.join(path, "meta.json"), "w") as fh:
            json.dump(meta, fh)
    comm.barrier()
    with pytest.raises(InputError) as err:
        DistGraph(path, comm)
    text = str(err.value)
    part0 = os.path.join(path, ondisk.part_file_name(0))
    assert "\n" not in text, text
    if comm.rank == 0:
        assert f"{part0}: field 'indptr': shape differs from meta.json's" in text, text
    elif comm.rank == 1:
        assert os.path.join(path, ondisk.part_file_name(1)) in text, text
    else:
        assert f"rank 0 failed: {part0}" in text, text
