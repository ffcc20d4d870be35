"""``hpcgnn train --config``: TOML and YAML files give the same arguments as flags; bad files are one line."""
from __future__ import annotations

import pytest

from hpcgnn.runtime.errors import InputError
from hpcgnn.training.config import parse_args

FLAGS = ["--model", "gat", "--fanouts", "5,7", "--batch-size", "64", "--hidden", "32", "--lr", "0.01",
         "--no-progress", "--norm", "layer"]
TOML = 'model = "gat"\nfanouts = [5, 7]\nbatch-size = 64\nhidden = 32\nlr = 0.01\nno_progress = true\nnorm = "layer"\n'
YAML = ("# same run as FLAGS\nmodel: gat\nfanouts: [5, 7]\nbatch-size: 64\nhidden: 32\nlr: 0.01\n"
        "no_progress: true\nnorm: layer\n")


def parsed(argv):
    args = vars(parse_args(argv))
    args.pop("config")
    return args


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
    ("type.yaml", "hidden: abc\n", r"type\.yaml: field 'hidden': not a valid int \(value abc\)"),
    ("float.yaml", "hidden: 3.5\n", r"float\.yaml: field 'hidden': not a valid int \(value 3\.5\)"),
    ("choice.yaml", "norm: group\n", r"choice\.yaml: field 'norm': must be one of none, batch, layer \(value group\)"),
    ("flag.yaml", "resume: 3\n", r"flag\.yaml: field 'resume': must be true or false \(value 3\)"),
    ("unknown.toml", "colour = 3\n", r"unknown\.toml: field 'colour': unknown key \(value 3\)"),
    ("broken.toml", "model = \n", r"broken\.toml: field '--config': unreadable config \("),
])
def test_bad_config_is_one_line_naming_file_and_key(tmp_path, name, text, pattern):
    (tmp_path / name).write_text(text)
    with pytest.raises(InputError, match=pattern) as caught:
        parse_args(["--config", str(tmp_path / name), "--data", str(tmp_path)])
    assert "\n" not in str(caught.value) and str(tmp_path / name) in str(caught.value)
