"""A model whose outputs collapsed to one constant ends the run with one line saying what to try,
exit status 2, for node classification and link prediction alike."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import mpiexec_path


def test_two_collapsed_evaluations_in_a_row_end_the_run():
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.tasks.collapse import CollapseCheck

    check = CollapseCheck(0.003)
    check.update({"constant_share": 1.0}, 1)
    check.update({}, 2)  # not evaluated: neither counts nor resets
    check.update({"constant_share": 0.2}, 3)  # recovered: the count starts again
    check.update({"constant_share": 0.995}, 4)
    with pytest.raises(InputError, match=r"collapsed to a constant at epoch 5 \(99.9% of the nodes' logits equal, "
                                         r"at 2 evaluations in a row\).*--feature-scale standard.*--lr"):
        check.update({"constant_share": 0.9999}, 5)


def test_a_collapsed_last_evaluation_ends_the_run_alone():
    from hpcgnn.runtime.errors import InputError
    from hpcgnn.tasks.collapse import CollapseCheck

    CollapseCheck(0.003).update({"constant_share": float("nan")}, 1, last=True)  # no output at all: not a collapse
    with pytest.raises(InputError, match="at 1 evaluation in a row"):
        CollapseCheck(0.003).update({"constant_share": 1.0}, 1, last=True)


@pytest.mark.mpi(sizes=(1, 2))
def test_the_share_of_equal_rows_is_counted_over_every_rank(nranks, comm):
    from hpcgnn.tasks.collapse import constant_share

    rng = np.random.default_rng(comm.rank)
    dead = np.tile([0.25, -1.5, 3.0], (200, 1))
    dead[:2] = rng.normal(size=(2, 3))  # a few nodes whose features stand out
    assert constant_share(dead, comm) == pytest.approx(0.99)
    dead[0] = dead[5] * (1 + 1e-7)  # float32 rounding of the constant counts as the constant
    assert constant_share(dead, comm) == pytest.approx(0.995)
    assert constant_share(rng.normal(size=(200, 3)), comm) < 0.01
    assert constant_share(np.zeros((50, 4)), comm) == 1.0
    scores = np.full(100 if comm.rank == 0 else 0, 5.859)  # a rank may hold no validation edge
    assert constant_share(scores, comm) == 1.0
    assert np.isnan(constant_share(np.zeros((0, 3)), comm))


def constant_feature_dataset(path, link):
    """A graph whose every node has the same features: a mean-aggregating model's output is one
    constant from the first step (a forced collapse, as a dead network gives)."""
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.datasets import link_graph
    from hpcgnn.testing.graphs import clustered_graph

    graph = link_graph(num_nodes=300) if link else clustered_graph(num_nodes=300)
    graph.ndata["feat"][:] = 1.0
    if link:
        from hpcgnn.prep.edge_split import hold_out_edges

        graph = hold_out_edges(graph, (0.8, 0.1, 0.1), 10, seed=0)
    partition_graph(graph, path, 2, "metis")


@pytest.mark.parametrize("task", ["node", "link"])
def test_a_collapsed_model_stops_with_one_line(tmp_path, task):
    constant_feature_dataset(tmp_path / "d", link=task == "link")
    proc = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", "hpcgnn.train", "--data",
                           str(tmp_path / "d"), "--task", task, "--epochs", "4", "--eval-every", "1", "--hidden", "8",
                           "--fanouts", "3,3", "--batch-size", "64", "--no-progress", "--metrics-file",
                           str(tmp_path / "m.jsonl")],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hpcgnn train: error:")]
    what = "validation edges' scores" if task == "link" else "nodes' logits"
    assert len(lines) == 1, proc.stderr
    assert f"collapsed to a constant at epoch 2 (100% of the {what} equal" in lines[0], lines[0]
    assert "try --feature-scale standard, a lower --lr, or --norm layer" in lines[0], lines[0]
