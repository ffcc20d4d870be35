"""The README's runnable examples run: the API example on 2 ranks, the accuracy recipes' flags parse."""
import os
import re
import subprocess
import sys

from tests.conftest import kill_tree, mpiexec_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_api_example_trains_on_two_ranks(tmp_path):
    cmd = [mpiexec_path(), "-n", "2", sys.executable, os.path.join(ROOT, "docs", "api_example.py"), str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise AssertionError("the API example did not finish within 180 s") from None
    assert proc.returncode == 0, err[-2000:]
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", out).group(1))
    assert accuracy > 0.4, out  # 4 planted classes: chance is 0.25


def test_readme_accuracy_recipes_are_the_benchmarks_commands():
    """The recipes in the README are what bench/accuracy.py runs (printed by --commands)."""
    printed = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "accuracy.py"), "--commands"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    with open(os.path.join(ROOT, "README.md")) as fh:
        readme = fh.read()
    commands = [line for line in printed.splitlines() if line.startswith(("hpcgnn ", "mpirun "))]
    assert len(commands) == 8
    for line in commands:
        assert line in readme, line
