"""The shipped recipes (configs/*.toml) read as `hpcgnn train --config` reads them, and are the
benchmarks' own runs: a recipe that drifted from what the published figures were measured with
would promise figures it does not give."""
import ast
import glob
import os
import subprocess
import sys

import pytest

from hpcgnn.training.config import build_parser, parse_train_config, read_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.toml")))
#: set per run on the command line, not by a recipe
PER_RUN = {"config", "plugins", "data", "seed", "metrics", "metrics_file", "no_progress", "prefetch", "plot"}


def config_settings(path):
    """The run settings a config file gives, every other flag at its default."""
    parser = build_parser()
    parser.set_defaults(**read_config(path, parser))
    return {k: v for k, v in vars(parser.parse_args([])).items() if k not in PER_RUN}


def command_settings(argv):
    return {k: v for k, v in vars(build_parser().parse_args(argv)).items() if k not in PER_RUN}


def test_there_are_recipes():
    names = {os.path.basename(p) for p in CONFIGS}
    assert {"planetoid-gcn.toml", "shchur-sage.toml", "gae-link.toml", "typed-rgcn.toml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_every_config_reads_and_passes_trains_checks(path, tmp_path):
    values = read_config(path, build_parser())
    assert values, f"{path} sets nothing"
    config = parse_train_config(["--config", path, "--data", str(tmp_path)])  # every cross-flag check too
    assert config.input.data == str(tmp_path)


def accuracy_commands(*datasets):
    """bench/accuracy.py's training commands (of its default datasets, or of ``datasets``):
    (model, argv after the module name)."""
    chosen = ["--datasets", ",".join(datasets)] if datasets else []
    printed = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "accuracy.py"), "--commands", *chosen],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    commands = []
    for line in printed.split("\n"):
        words = line.split()
        if "hpcgnn.train" in words:
            argv = words[words.index("hpcgnn.train") + 1:]
            commands.append((argv[argv.index("--model") + 1], argv))
    return commands


def test_node_recipes_are_the_accuracy_benchmarks_runs():
    commands = accuracy_commands()
    assert len(commands) == 4  # cora, citeseer (gcn); amazon_computers, coauthor_cs (sage)
    recipe = {"gcn": "planetoid-gcn.toml", "sage": "shchur-sage.toml"}
    for model, argv in commands:
        assert config_settings(os.path.join(ROOT, "configs", recipe[model])) == command_settings(argv), argv


def test_typed_recipe_is_the_accuracy_benchmarks_runs_on_both_typed_sets():
    commands = accuracy_commands("aifb", "dblp")
    assert [model for model, _ in commands] == ["rgcn", "rgcn"]
    # one recipe: the same training flags for both sets (beside their data and metrics files)
    assert command_settings(commands[0][1]) == command_settings(commands[1][1])
    assert config_settings(os.path.join(ROOT, "configs", "typed-rgcn.toml")) == command_settings(commands[0][1])


def test_link_recipe_is_the_link_benchmarks_run():
    with open(os.path.join(ROOT, "bench", "link.py")) as fh:
        tree = ast.parse(fh.read())
    argv = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "ACCURACY_TRAIN" for t in node.targets))
    assert config_settings(os.path.join(ROOT, "configs", "gae-link.toml")) == command_settings(argv)
