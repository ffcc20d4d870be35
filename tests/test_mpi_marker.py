"""The MPI test mechanism passes a test only when every rank of a world of the right size passed."""
import json
import os

import pytest
from _pytest.outcomes import Failed, Skipped

from tests.conftest import check_rank_results


def write(results, *reports):
    for rank, size, outcome in reports:
        (results / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "size": size, "outcome": outcome,
                                                               "reason": "no emulated machines"}))


def test_all_ranks_passed_passes(tmp_path):
    write(tmp_path, (0, 2, "passed"), (1, 2, "passed"))
    check_rank_results(str(tmp_path), 2, "")


@pytest.mark.parametrize("reports, needle", [
    ([(0, 2, "passed")], "never reported"),                             # rank 1 left early with exit 0
    ([(0, 1, "passed")], "world of size [1]"),                         # two 1-rank worlds, not one of 2
    ([(0, 2, "passed"), (1, 2, "skipped")], "did not all pass"),       # skipped on one rank only
    ([(0, 2, "passed"), (1, 2, "failed")], "did not all pass"),
], ids=["missing-rank", "wrong-size", "partly-skipped", "one-failed"])
def test_anything_else_fails(tmp_path, reports, needle):
    write(tmp_path, *reports)
    with pytest.raises(Failed, match=needle.replace("[", r"\[").replace("]", r"\]")):
        check_rank_results(str(tmp_path), 2, "")


def test_skipped_on_every_rank_is_skipped(tmp_path):
    write(tmp_path, (0, 2, "skipped"), (1, 2, "skipped"))
    with pytest.raises(Skipped, match="no emulated machines"):
        check_rank_results(str(tmp_path), 2, "")


@pytest.mark.mpi(sizes=(1, 2, 4))
def test_each_rank_has_its_own_tmp_path_inside_the_shared_directory(nranks, comm, shared_tmp, tmp_path):
    # ranks sharing pytest's temp root race on its links and cleanup; the parent's is untouched
    assert os.path.realpath(tmp_path).startswith(os.path.realpath(shared_tmp) + os.sep)
    assert len(set(comm.allgather(str(tmp_path)))) == comm.size
