"""An error is reported once per job: one line when every rank fails with it, no MPI abort
banner; a rank failing alone still ends the job at once with its own line."""
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from hpcgnn.runtime.failure_report import summary
from tests.conftest import kill_tree, mpiexec_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_job(nranks, *args, timeout=120):
    cmd = [mpiexec_path(), "-n", str(nranks), sys.executable, *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        pytest.fail(f"hang: the job did not end within {timeout}s")
    return proc.returncode, out, err


def test_summary_keeps_distinct_lines_and_drops_quotes_of_another_rank():
    same = {0: "p: error: bad x", 1: "p: error: bad x", 2: "p: error: bad x"}
    assert summary(same) == ["p: error: bad x"]
    quoted = {0: "p: error: rank 1 failed: f.h5: broken", 1: "p: error: f.h5: broken"}
    assert summary(quoted) == ["p: error: f.h5: broken"]
    differ = {0: "p: error: a", 1: "p: error: b", 2: "p: error: a"}
    assert summary(differ) == ["p: error: [ranks 0,2] a", "p: error: [rank 1] b"]


@pytest.mark.parametrize("nranks", [2, 4])
def test_a_flag_every_rank_refuses_is_one_line_without_a_banner(nranks):
    code, _, err = run_job(nranks, "-m", "hpcgnn.train", "--data", ROOT, "--hidden", "-3")
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == ["hpcgnn train: error: field '--hidden': must be an integer in [1, 16384] (value -3)"], err


def test_a_dataset_every_rank_refuses_is_one_line(tmp_path):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.testing.graphs import clustered_graph

    partition_graph(clustered_graph(num_nodes=200), str(tmp_path / "ds"), 2, "random")
    meta_path = tmp_path / "ds" / "meta.json"
    meta_path.write_text(meta_path.read_text().replace('"num_parts": 2', '"num_parts": "two"'))
    code, _, err = run_job(3, "-m", "hpcgnn.train", "--data", str(tmp_path / "ds"), "--epochs", "1")
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "field 'num_parts': must be a positive integer" in lines[0], err


def entry_script(tmp_path, prog, body):
    """A script whose ``main`` (``body``, given ``comm``) runs through the entry-point wrapper."""
    script = tmp_path / f"{prog}.py"
    script.write_text(textwrap.dedent(f"""
        from hpcgnn.runtime.abort import entry_point, run_program
        from hpcgnn.runtime.comm import world
        from hpcgnn.runtime.errors import InputError

        @entry_point("{prog}")
        def main(argv=None):
            comm = world()
{textwrap.indent(textwrap.dedent(body), " " * 12)}
        run_program(main)
    """))
    return str(script)


def test_one_rank_failing_alone_ends_the_job_with_its_line(tmp_path):
    """Rank 1 fails while rank 0 waits in a barrier: rank 1's line, exit 2, within the grace period."""
    script = entry_script(tmp_path, "alone", """
        if comm.rank == 1:
            raise InputError("input.txt", "broken on rank 1 only", "field", 7)
        comm.barrier()
        return 0
    """)
    start = time.monotonic()
    code, _, err = run_job(2, script)
    assert code == 2, err
    assert "alone: error: input.txt: field 'field': broken on rank 1 only (value 7)" in err, err
    assert time.monotonic() - start < 30


def test_different_lines_on_different_ranks_are_each_shown_once(tmp_path):
    script = entry_script(tmp_path, "differ", """
        raise InputError(f"part{comm.rank % 2}.h5", "unreadable")
    """)
    code, _, err = run_job(4, script)
    assert code == 2, err
    lines = sorted(line for line in err.splitlines() if line.strip())
    assert lines == ["differ: error: [ranks 0,2] part0.h5: unreadable",
                     "differ: error: [ranks 1,3] part1.h5: unreadable"], err
    assert np.all(["Abort" not in line for line in lines])
