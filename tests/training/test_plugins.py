"""A sampler and a task are each one module and one registration: a module written by the test,
outside the package, adds both (with their flags) through ``--plugin``, and ``hpcgnn train``
trains with them. Nothing else in the package names them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

from hpcgnn.testing.graphs import clustered_graph

PLUGIN = textwrap.dedent('''
    """A toy sampler (the same fanout in every layer, drawn with replacement) and a toy task
    (node classification whose loss smooths its targets)."""
    from dataclasses import dataclass

    from torch.nn import functional as F

    from hpcgnn.runtime.flags import Domain
    from hpcgnn.runtime.options import option
    from hpcgnn.sampling import NeighborSampler
    from hpcgnn.sampling.registry import SamplerSpec, register_sampler
    from hpcgnn.tasks.node import NodeClassification, NodeOptions
    from hpcgnn.tasks.registry import register_task

    BUILT = []


    @dataclass(frozen=True)
    class EvenOptions:
        even_fanout: int = option(3, "neighbours drawn with replacement in every layer", type=Domain(int, ge=1))


    def build(graph, options, run):
        BUILT.append(run.layers)
        return NeighborSampler([options.even_fanout] * run.layers, replace=True, input_degrees=run.input_degrees)


    register_sampler(SamplerSpec("even", EvenOptions, build=build, summary="--even-fanout neighbours per layer",
                                 describe=lambda options: f"even fanout {options.even_fanout}"))


    @dataclass(frozen=True)
    class SmoothOptions(NodeOptions):
        smoothing: float = option(0.1, "label smoothing of the cross-entropy", type=Domain(float, ge=0, lt=1))


    class SmoothLoss:
        def __init__(self, smoothing):
            self.smoothing = smoothing

        def batch(self, logits, batch):
            labels = batch.label.long()
            if not labels.numel():
                return logits.sum() * 0.0, 0.0, 0
            loss = F.cross_entropy(logits, labels, label_smoothing=self.smoothing)
            return loss, float((logits.argmax(1) == labels).sum()), labels.numel()


    class SmoothClassification(NodeClassification):
        name = "smooth-node"
        options = SmoothOptions
        summary = "classify nodes with label smoothing"

        def build_loss(self, model, graph, config, facts):
            return SmoothLoss(config.task.options.smoothing)


    register_task(SmoothClassification())
''')


def write_plugin(tmp_path):
    (tmp_path / "toy_plugin.py").write_text(PLUGIN)
    return dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                OMP_NUM_THREADS="1")


def test_a_plugin_adds_a_sampler_and_a_task_with_their_flags(tmp_path):
    env = write_plugin(tmp_path)
    help_text = subprocess.run([sys.executable, "-m", "hpcgnn.train", "--plugin", "toy_plugin", "--help"],
                               capture_output=True, text=True, env=env, timeout=120)
    assert help_text.returncode == 0, help_text.stderr
    assert "--even-fanout" in help_text.stdout and "--smoothing" in help_text.stdout
    assert "even: --even-fanout neighbours per layer" in " ".join(help_text.stdout.split())
    without = subprocess.run([sys.executable, "-m", "hpcgnn.train", "--data", str(tmp_path), "--sampler", "even"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert without.returncode == 2 and "--sampler" in without.stderr  # only the plugin registers it
    refused = subprocess.run([sys.executable, "-m", "hpcgnn.train", "--plugin", "toy_plugin", "--data",
                              str(tmp_path), "--even-fanout", "4"], capture_output=True, text=True, env=env,
                             timeout=120)
    assert refused.returncode == 2 and "'--even-fanout': applies to --sampler even only" in refused.stderr


def test_training_with_the_plugins_sampler_and_task(tmp_path, monkeypatch):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.runtime.comm import world
    from hpcgnn.training.config import parse_train_config, stored_config
    from hpcgnn.training.loop import run

    write_plugin(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    partition_graph(clustered_graph(num_nodes=400), tmp_path / "d", 1, "metis")
    metrics = tmp_path / "m.jsonl"
    config = parse_train_config(["--plugin", "toy_plugin", "--data", str(tmp_path / "d"), "--sampler", "even",
                                 "--even-fanout", "4", "--task", "smooth-node", "--smoothing", "0.2", "--hidden", "16",
                                 "--batch-size", "50", "--epochs", "8", "--lr", "0.02", "--no-progress",
                                 "--prefetch", "0", "--eval-every", "8", "--metrics-file", str(metrics)])
    assert config.sampler.options.even_fanout == 4 and config.task.options.smoothing == 0.2
    assert config.model.layers == 2  # the toy sampler implies no depth: --layers' default
    _, history = run(config, world())
    import toy_plugin

    assert toy_plugin.BUILT == [2]
    assert history[0]["loss"] > history[-1]["loss"]
    assert history[-1]["test_acc"] > 0.5  # 4 classes: chance is 0.25
    header = json.loads(metrics.read_text().splitlines()[0])
    assert header["config"]["sampler"] == {"name": "even", "even_fanout": 4}
    assert header["config"]["task"] == {"name": "smooth-node", "class_weight": "none", "cache_mb": 0,
                                        "smoothing": 0.2}
    assert header["config"]["runtime"]["plugins"] == ["toy_plugin"]
    stored = stored_config(header["config"])  # the config as a checkpoint reads it back
    assert stored == replace(config, evaluation=replace(config.evaluation, metric="acc"))


@pytest.mark.parametrize("flags, needle", [
    (["--plugin", "no_such_module_here"], "'--plugin': cannot import the plugin module"),
])
def test_a_missing_plugin_is_one_line(tmp_path, flags, needle):
    proc = subprocess.run([sys.executable, "-m", "hpcgnn.train", "--data", str(tmp_path), *flags],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
