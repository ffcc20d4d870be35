"""What a run reports: the metrics log's header and field explanations, load balance over ranks,
training and evaluation time apart, the evaluation schedule, progress bars only on a terminal,
and plots whose axes hold what they draw."""
import io
import json
import os
import re

import numpy as np
import pytest


def test_the_metrics_log_records_settings_explains_fields_and_times_apart(tmp_path, capsys):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.runtime.comm import world
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run
    from hpcgnn.training.reporting import EPOCH_FIELDS, FINAL_FIELDS, explain

    graph = clustered_graph(num_nodes=300)
    partition_graph(graph, tmp_path / "d", 1, "metis")
    args = parse_train_config(["--data", str(tmp_path / "d"), "--hidden", "8", "--fanouts", "3,3", "--batch-size", "50",
                       "--no-progress", "--prefetch", "0", "--epochs", "4", "--eval-every", "2",
                       "--metrics", str(tmp_path / "m.jsonl")])
    run(args, world())
    header, *epochs, final = [json.loads(line) for line in open(tmp_path / "m.jsonl")]

    assert header["header"] and header["format"] == "hpcgnn-metrics" and header["first_epoch"] == 1
    assert set(args.flat()) <= set(header["settings"])
    assert header["config"] == json.loads(json.dumps(args.as_dict())) | {
        "evaluation": header["config"]["evaluation"]}  # the metric the dataset decided
    assert header["config"]["evaluation"]["metric"] == "acc"
    assert header["settings"]["eval_every"] == 2 and header["settings"]["fanouts"] == [3, 3]
    dataset = header["dataset"]
    assert (dataset["num_nodes"], dataset["num_edges"], dataset["feat_dim"], dataset["num_classes"]) == \
        (300, graph.num_edges, 8, 4)
    assert [dataset[f"{s}_nodes"] for s in ("train", "val", "test")] == \
        [int(graph.ndata[f"{s}_mask"].sum()) for s in ("train", "val", "test")]
    assert header["fields"] == {"epoch": EPOCH_FIELDS, "final": FINAL_FIELDS}
    unexplained = [k for r in epochs for k in r if explain(k, EPOCH_FIELDS) is None] + \
        [k for k in final if explain(k, FINAL_FIELDS) is None]
    assert not unexplained, unexplained

    assert [r["epoch"] for r in epochs] == [1, 2, 3, 4]
    evaluated = [r for r in epochs if "eval_time_s" in r]
    assert [r["epoch"] for r in evaluated] == [2, 4]
    assert final["epoch_time_s"] == pytest.approx(np.median([r["epoch_time_s"] for r in epochs]))
    assert final["eval_time_s"] == pytest.approx(np.median([r["eval_time_s"] for r in evaluated]))
    assert final["evaluations"] == 2
    spent = sum(r["epoch_time_s"] for r in epochs) + sum(r["eval_time_s"] for r in evaluated)
    assert spent <= final["run_time_s"] < spent + 60
    for r in epochs:
        assert 0 < r["efficiency"] <= 1 and r["load_balance"] == 1.0  # one rank: nothing to balance
        assert r["phases_mean_s"] == {k: lo for k, (lo, _) in r["phases_s"].items()}

    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert re.search(rf"training {final['epoch_time_s']:.2f}s/epoch, evaluation {final['eval_time_s']:.2f}s x 2, "
                     rf"run {final['run_time_s']:.1f}s, efficiency", last), last
    assert re.search(r"epoch   2 .* time \d+\.\d\ds eval \d+\.\d\ds eff \d\.\d\d \[", out), out


@pytest.mark.mpi(sizes=(2,))
def test_load_balance_over_ranks(nranks, comm, shared_tmp):
    from hpcgnn.training.reporting import PHASES, balance_record

    # rank 0 computes 1 s and waits 1 s in the Allreduce for rank 1, which computes 2 s
    phases = dict.fromkeys(PHASES, 0.0)
    phases.update(sample=0.5, compute=1.0 + comm.rank, allreduce=1.0 - comm.rank * 0.9)
    epoch_time = 2.5 + 0.1 * comm.rank
    record = balance_record(comm, phases, epoch_time)
    busy = [2.5 - 1.0, 2.6 - 0.1]
    assert record["epoch_time_s"] == pytest.approx(2.6)
    assert record["phases_s"]["compute"] == (1.0, 2.0) and record["phases_mean_s"]["compute"] == 1.5
    assert record["phase_imbalance"]["compute"] == pytest.approx(2.0 / 1.5, abs=1e-4)
    assert record["phase_imbalance"]["sample"] == 1.0 and record["phase_imbalance"]["wait"] is None
    assert record["load_balance"] == pytest.approx(np.mean(busy) / max(busy), abs=1e-4)
    assert record["efficiency"] == pytest.approx(np.mean(busy) / 2.6, abs=1e-4)


def evaluated_epochs(schedule, epochs, epoch_s, eval_s, comm):
    done = []
    for epoch in range(epochs):
        if schedule.due(epoch):
            done.append(epoch + 1)
            schedule.measured(comm, epoch, epoch_s, eval_s)
    return done


def test_the_evaluation_schedule():
    from hpcgnn.runtime.comm import world
    from hpcgnn.training.schedule import EvalSchedule, eval_period

    comm = world()
    assert evaluated_epochs(EvalSchedule(2, 5), 5, 1.0, 9.0, comm) == [2, 4, 5]
    assert evaluated_epochs(EvalSchedule(0, 5), 5, 1.0, 9.0, comm) == [5]
    # evaluation twice as long as an epoch: every 6 epochs, 2 s of every 8 (a quarter), and the last
    assert evaluated_epochs(EvalSchedule("auto", 20), 20, 1.0, 2.0, comm) == [1, 7, 13, 19, 20]
    assert evaluated_epochs(EvalSchedule("auto", 6), 6, 1.0, 0.1, comm) == [1, 2, 3, 4, 5, 6]  # cheap: every epoch
    assert evaluated_epochs(EvalSchedule("auto", 12, first_epoch=8), 12, 1.0, 2.0, comm)[0] == 9  # resumed
    assert evaluated_epochs(EvalSchedule("never", 5), 5, 1.0, 9.0, comm) == []  # not even the last
    assert [eval_period(x) for x in ("auto", "AUTO", "3", "0", "never")] == ["auto", "auto", 3, 0, "never"]
    with pytest.raises(ValueError):
        eval_period("-1")


def test_a_run_that_never_evaluates_says_so(tmp_path, capsys):
    from hpcgnn.prep.partition import partition_graph
    from hpcgnn.runtime.comm import world
    from hpcgnn.testing.graphs import clustered_graph
    from hpcgnn.training.config import parse_train_config
    from hpcgnn.training.loop import run

    partition_graph(clustered_graph(num_nodes=200), tmp_path / "d", 1, "metis")
    _, history = run(parse_train_config(["--data", str(tmp_path / "d"), "--hidden", "8", "--fanouts", "3,3",
                                         "--no-progress", "--prefetch", "0", "--epochs", "2", "--eval-every", "never",
                                         "--metrics-file", str(tmp_path / "m.jsonl")]), world())
    final = [json.loads(line) for line in open(tmp_path / "m.jsonl")][-1]
    assert all("test_acc" not in r and "eval_time_s" not in r for r in history)
    assert final["evaluations"] == 0 and "test_acc" not in final and "selected_epoch" not in final
    assert "final: not evaluated (--eval-every never) | training" in capsys.readouterr().out


def test_eval_every_defaults_to_auto_and_config_files_take_either(tmp_path):
    from hpcgnn.training.config import parse_train_config

    assert parse_train_config(["--data", str(tmp_path)]).evaluation.eval_every == "auto"
    for text, want in (('eval-every = "auto"\n', "auto"), ("eval-every = 3\n", 3)):
        (tmp_path / "run.toml").write_text(text)
        assert parse_train_config(["--config", str(tmp_path / "run.toml"), "--data",
                str(tmp_path)]).evaluation.eval_every == want


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_progress_bar_only_on_a_terminal(monkeypatch):
    from hpcgnn.training.reporting import progress

    batches = [1, 2, 3]
    monkeypatch.setattr("sys.stderr", io.StringIO())  # a batch log: plain epoch lines only
    assert progress(batches, 3, 0, enabled=True) is batches
    monkeypatch.setattr("sys.stderr", Terminal())
    assert list(progress(batches, 3, 0, enabled=True)) == batches and progress(batches, 3, 0, True) is not batches
    assert progress(batches, 3, 0, enabled=False) is batches


def test_plots_mark_the_best_epoch_and_hold_their_bars(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from hpcgnn.training.plots import plot_history
    from hpcgnn.training.reporting import PHASES

    figures = {}
    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, path, **kw: (figures.__setitem__(os.path.basename(path), fig),
                                                                      original(fig, path, **kw)))
    ranks = [dict(zip(PHASES, (0.2, 0.3, 2.0 + r, 0.4, 0.1))) for r in range(3)]
    # three epochs: without integer ticks the axis would read 1.00, 1.25, 1.50, ...
    history = [{"epoch": e, "loss": 2.0 / e, "train_acc": 0.1 * e, "rank_phases_s": ranks} for e in range(1, 4)]
    for e, val_acc in ((1, 0.5), (2, 0.7), (3, 0.6)):
        history[e - 1].update(val_acc=val_acc, test_acc=val_acc - 0.05, val_loss=1.0 / e)
    plot_history(history, tmp_path)

    loss_ax, acc_ax = figures["curves.png"].axes
    lines = {line.get_label(): line for line in loss_ax.get_lines()}
    assert list(lines["validation loss"].get_xdata()) == [1, 2, 3]
    assert "training loss" in lines
    for ax in (loss_ax, acc_ax):
        marks = [line for line in ax.get_lines() if line.get_label().startswith("best val_acc")]
        assert len(marks) == 1 and list(marks[0].get_xdata()) == [2, 2]  # the epoch val_acc selects
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks

    fig = figures["time_breakdown.png"]
    ax = fig.axes[0]
    tallest = max(sum(r.values()) for r in ranks)
    assert ax.get_ylim()[1] >= tallest
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    bars = [patch.get_window_extent() for patch in ax.patches]
    assert all(not legend.overlaps(bar) for bar in bars)  # the legend covers no bar
