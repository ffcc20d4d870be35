import os
import subprocess
import sys

import pytest

from hpcgnn import cli

SUBCOMMANDS = ["generate", "convert", "partition", "inspect"]


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_has_help_both_ways(name):
    via_module = run("-m", f"hpcgnn.{name}", "--help")
    via_cli = run("-m", "hpcgnn.cli", name, "--help")
    assert via_module.returncode == 0 and via_cli.returncode == 0
    assert via_module.stdout == via_cli.stdout
    assert f"hpcgnn {name}" in via_module.stdout


def test_console_script_lists_subcommands(capsys):
    assert cli.main([]) == 2
    out = capsys.readouterr().out
    assert all(name in out for name in SUBCOMMANDS)


def test_unknown_subcommand_is_one_line_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["frobnicate"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "frobnicate" in err


def test_generate_partition_inspect_pipeline_under_mpirun(tmp_path):
    from tests.conftest import mpiexec_path

    graph = tmp_path / "g.npz"
    assert run("-m", "hpcgnn.generate", "sbm", "--nodes", "400", "--avg-degree", "6", "--classes", "4",
               "--feat-dim", "4", "--out", str(graph)).returncode == 0
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", "hpcgnn.partition", str(graph),
                           "--parts", "2", "--symmetrize", "--out", str(tmp_path / "parts")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("wrote") == 1  # rank 0 reports once
    check = run("-m", "hpcgnn.inspect", str(tmp_path / "parts"), "--verify")
    assert check.returncode == 0 and "verify: OK" in check.stdout


def test_bad_input_under_mpirun_aborts_every_rank_promptly(tmp_path):
    from tests.conftest import mpiexec_path

    bad = tmp_path / "bad.csv"
    bad.write_text("0,1\n1,-5\n")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", "hpcgnn.partition", str(bad),
                           "--parts", "2", "--out", str(tmp_path / "parts")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode != 0
    assert "bad.csv" in proc.stderr and "-5" in proc.stderr
    assert not (tmp_path / "parts").exists()


HELP_PROBE = """
import sys
from hpcgnn import cli
try:
    cli.main([{name!r}, "--help"])
except SystemExit:
    pass
print("HEAVY", sorted(m for m in ("torch", "mpi4py.MPI", "matplotlib") if m in sys.modules))
"""


@pytest.mark.parametrize("name", SUBCOMMANDS + ["train", "evaluate"])
def test_help_loads_no_heavy_module_and_shows_defaults(name):
    """--help answers before MPI or matplotlib are imported (seconds of start-up), and states defaults;
    the commands without a model answer before torch too (train's and evaluate's flags come from the
    registered models, samplers and tasks, whose modules are torch code)."""
    probe = run("-c", HELP_PROBE.format(name=name))
    assert probe.returncode == 0, probe.stderr
    assert ("HEAVY ['torch']" if name in ("train", "evaluate") else "HEAVY []") in probe.stdout, probe.stdout[-300:]
    if name in ("train", "partition"):
        assert "(default: " in probe.stdout


def test_output_to_a_reader_that_left_ends_quietly(tmp_path):
    """``hpcgnn ... | head``: the reader closes the pipe early; no traceback, SIGPIPE's status."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    proc = subprocess.run([sys.executable, "-m", "hpcgnn.cli", "--help"], stdout=write_end, stderr=subprocess.PIPE,
                          text=True, timeout=60)
    os.close(write_end)
    assert proc.stderr == "", proc.stderr
    assert proc.returncode == 141


@pytest.mark.parametrize("name, argv", [
    ("generate", ["rmat", "--nodes", "10"]),  # --edges and --out missing
    ("generate", ["lattice"]),
    ("convert", ["--frobnicate"]),
    ("partition", ["g.npz", "--parts", "2", "--out", "o", "--method", "spectral"]),
    ("partition", ["g.npz", "--out", "o"]),
    ("inspect", []),
    ("train", ["--norm", "group"]),
    ("train", ["--lr"]),
    ("evaluate", ["--data", "d"]),
])
def test_every_parse_error_is_one_line_without_usage(name, argv, capsys):
    """argparse's own refusals (missing, unknown, bad choice) are one line too, exit status 2."""
    with pytest.raises(SystemExit) as stop:
        cli.main([name, *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hpcgnn {name}") and ": error: " in err and err.count("\n") == 1, err
    assert "usage:" not in err


def test_a_parse_error_under_mpirun_is_one_line_for_the_job():
    from tests.conftest import mpiexec_path

    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([mpiexec_path(), "-n", "2", sys.executable, "-m", "hpcgnn.train", "--data", ".",
                           "--norm", "group"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["hpcgnn train: error: argument --norm: invalid choice: 'group' (choose from 'none', 'batch', "
                     "'layer')"], proc.stderr
