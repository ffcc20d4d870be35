"""``hpcgnn train --config``: TOML and YAML files give the same arguments as flags; bad files are one line."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hpcgnn.runtime.errors import InputError
from hpcgnn.training.config import parse_train_config

FLAGS = ["--model", "gat", "--fanouts", "5,7", "--batch-size", "64", "--hidden", "32", "--lr", "0.01",
         "--no-progress", "--norm", "layer"]
TOML = 'model = "gat"\nfanouts = [5, 7]\nbatch-size = 64\nhidden = 32\nlr = 0.01\nno_progress = true\nnorm = "layer"\n'
YAML = ("# same run as FLAGS\nmodel: gat\nfanouts: [5, 7]\nbatch-size: 64\nhidden: 32\nlr: 0.01\n"
        "no_progress: true\nnorm: layer\n")


def parsed(argv):
    return parse_train_config(argv).flat()


@pytest.mark.parametrize("name, text", [("run.toml", TOML), ("run.yaml", YAML), ("run.yml", YAML)])
def test_config_file_gives_the_same_args_as_flags(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    data = ["--data", str(tmp_path)]
    from_file = parsed(["--config", str(tmp_path / name), *data])
    assert from_file == parsed([*FLAGS, *data])
    assert from_file["fanouts"] == [5, 7] and from_file["model"] == "gat"
    # a flag on the command line wins over the file
    assert parsed(["--config", str(tmp_path / name), *data, "--hidden", "48"])["hidden"] == 48


def test_empty_yaml_config_sets_nothing(tmp_path):
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    data = ["--data", str(tmp_path)]
    assert parsed(["--config", str(tmp_path / "empty.yaml"), *data]) == parsed(data)


@pytest.mark.parametrize("name, text, pattern", [
    ("list.yaml", "- model\n- gat\n", r"list\.yaml: field '--config': config must be a mapping .*\(value list\)"),
    ("scalar.yaml", "gat\n", r"scalar\.yaml: field '--config': config must be a mapping .*\(value str\)"),
    ("unknown.yaml", "model: gat\ncolour: 3\n", r"unknown\.yaml: field 'colour': unknown key \(value 3\)"),
    ("nested.yaml", "model:\n  name: gat\n", r"nested\.yaml: field 'model': must be a single value or a list"),
    ("broken.yaml", "model: gat\nfanouts: [5, 7\nhidden: 3\n", r"broken\.yaml: field '--config': unreadable config \("),
    ("tabs.yaml", "model: gat\n\thidden: 3\n", r"tabs\.yaml: field '--config': unreadable config \("),
    ("object.yaml", "model: !!python/object/apply:os.getcwd []\n",  # safe_load builds no objects
     r"object\.yaml: field '--config': unreadable config"),
    ("type.yaml", "hidden: abc\n", r"type\.yaml: field 'hidden': must be an integer in \[1, 16384\] \(value abc\)"),
    ("float.yaml", "hidden: 3.5\n", r"float\.yaml: field 'hidden': must be an integer in .* \(value 3\.5\)"),
    ("nan.yaml", "lr: .nan\n", r"nan\.yaml: field 'lr': must be a finite number > 0 \(value nan\)"),
    ("negative.toml", "embed-lr = -0.5\n", r"negative\.toml: field 'embed-lr': must be a finite number > 0"),
    ("deep.yaml", "fanouts: [[5, 7], 3]\n", r"deep\.yaml: field 'fanouts': must be a single value or a list"),
    ("anchor.yaml", "model: &m gat\n", r"anchor\.yaml: field '--config': YAML anchors and aliases .* \(line 1\)"),
    ("alias.yaml", "hidden: &h 16\nlayers: *h\n", r"alias\.yaml: field '--config': YAML anchors and aliases"),
    ("choice.yaml", "norm: group\n", r"choice\.yaml: field 'norm': must be one of none, batch, layer \(value group\)"),
    ("flag.yaml", "resume: 3\n", r"flag\.yaml: field 'resume': must be true or false \(value 3\)"),
    ("unknown.toml", "colour = 3\n", r"unknown\.toml: field 'colour': unknown key \(value 3\)"),
    ("broken.toml", "model = \n", r"broken\.toml: field '--config': unreadable config \("),
])
def test_bad_config_is_one_line_naming_file_and_key(tmp_path, name, text, pattern):
    (tmp_path / name).write_text(text)
    with pytest.raises(InputError, match=pattern) as caught:
        parse_train_config(["--config", str(tmp_path / name), "--data", str(tmp_path)])
    assert "\n" not in str(caught.value) and str(tmp_path / name) in str(caught.value)


def run_train(*args):
    return subprocess.run([sys.executable, "-m", "hpcgnn.train", *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_a_fifo_as_config_is_refused_without_waiting_for_a_writer(tmp_path):
    """Opening a FIFO for reading blocks until a writer comes: the config reader must not open it so."""
    os.mkfifo(tmp_path / "run.toml")
    proc = run_train("--config", str(tmp_path / "run.toml"), "--data", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    expected = f"hpcgnn train: error: {tmp_path / 'run.toml'}: field '--config': not a regular file (a FIFO)\n"
    assert proc.stderr == expected


def test_a_directory_or_an_oversized_file_as_config_is_refused(tmp_path):
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(InputError, match=r"dir\.toml: field '--config': not a regular file \(a directory\)"):
        parse_train_config(["--config", str(tmp_path / "dir.toml"), "--data", str(tmp_path)])
    (tmp_path / "big.toml").write_text("# padding\n" * 200_000)
    with pytest.raises(InputError, match=r"big\.toml: field '--config': larger than 1048576 bytes"):
        parse_train_config(["--config", str(tmp_path / "big.toml"), "--data", str(tmp_path)])


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)) + "fanouts: *i\n"


def test_nested_yaml_aliases_are_refused_at_once(tmp_path):
    """9 levels of 9 aliases expand to 9**9 strings when the value is used: refused before any expansion
    (in a process of its own: the expansion would hold the interpreter lock past SIGTERM)."""
    (tmp_path / "laughs.yaml").write_text(BILLION_LAUGHS)
    proc = run_train("--config", str(tmp_path / "laughs.yaml"), "--data", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "laughs.yaml: field '--config': YAML anchors and aliases" in lines[0], proc.stderr


def test_the_old_metrics_spelling_still_works_with_a_note(tmp_path, capsys):
    """``--metrics`` (and the config key ``metrics``) is the deprecated spelling of ``--metrics-file``."""
    data = ["--data", str(tmp_path)]
    assert parse_train_config([*data, "--metrics", "m.jsonl"]).output.metrics_file == "m.jsonl"
    assert "--metrics is deprecated and will be removed; use --metrics-file" in capsys.readouterr().err
    (tmp_path / "old.toml").write_text('metrics = "k.jsonl"\n')
    assert parse_train_config(["--config", str(tmp_path / "old.toml"), *data]).output.metrics_file == "k.jsonl"
    assert "config key 'metrics' is deprecated" in capsys.readouterr().err
    assert parse_train_config([*data, "--metrics-file", "n.jsonl"]).output.metrics_file == "n.jsonl"
    assert capsys.readouterr().err == ""


def test_plot_without_matplotlib_is_refused_before_training(tmp_path, monkeypatch):
    """A wheel installed without the plot extra: --plot is refused at start, not after the run."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    with pytest.raises(InputError, match=r"field '--plot': needs matplotlib \(pip install 'hpcgnn\[plot\]'\)"):
        parse_train_config(["--data", str(tmp_path), "--plot", str(tmp_path / "plots")])
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert parse_train_config(["--data", str(tmp_path), "--plot", "p"]).output.plot == "p"
