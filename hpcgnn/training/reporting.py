"""What a training run reports: the ``--metrics`` log's header (the run's settings and what every
field means), per-epoch records (loss, accuracy, time per phase and rank, load balance), the
final record (model selection on validation, training and evaluation time apart), the console
lines.

Records are plain dicts, so every key lands in ``--metrics`` as it is; :data:`EPOCH_FIELDS`
and :data:`FINAL_FIELDS` explain each one, in the log's header and in the README.

Load balance. A rank's *busy* time in an epoch is its epoch time minus its gradient Allreduce
time: the seconds it spent on its own batches (sampling, gathering, computing, or waiting for
its own prefetch thread). The Allreduce is where a rank waits for slower ranks, step by step,
and exchanges gradients. ``load_balance`` = mean / max of busy time over ranks (1.0: every rank
had the same work); ``efficiency`` = mean busy time / epoch time (1.0: no rank ever waited or
communicated), which also counts imbalance within the epoch that evens out over it.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import resource
import sys

import numpy as np
from tqdm import tqdm

from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.files import write_error
from hpcgnn.tasks.metrics import EXTRA_KEYS, LINK_METRICS, metric_key

#: where an epoch's time goes, per rank: the loader's phases, the device stage's (copy: staging each
#: batch for the GPU; 0 on the CPU), then the step's
PHASES = ("sample", "gather", "copy", "compute", "allreduce", "wait")
_METRICS_FORMAT = "hpcgnn-metrics"
_METRICS_VERSION = 1
#: what the dataset decides (hpcgnn.tasks.DatasetFacts), recorded apart from the run's settings
DATASET_KEYS = ("num_nodes", "feat_dim", "num_classes", "kind")

EPOCH_FIELDS = {
    "epoch": "epoch number, from 1",
    "loss": "mean training cross-entropy over the epoch's seed nodes, all ranks (sampled neighbourhoods); "
            "multi-label: binary cross-entropy per (node, label) entry; weighted under --class-weight balanced",
    "train_acc": "training accuracy over the epoch's mini-batches; on evaluated epochs the full-neighbourhood "
                 "accuracy on train_mask (multi-label: the share of (node, label) entries predicted right)",
    "steps": "batches each rank trained on this epoch (the same on every rank)",
    "staleness": "--staleness: steps between a gradient's computation and the optimizer step that applies it",
    "average_every": "--average-every: optimizer steps between two averagings of the parameters over the ranks",
    "train_seen": "training items the epoch's batches scored, summed over ranks: seed nodes (multi-label: "
                  "node-label entries; link prediction: positive and negative pairs)",
    "epoch_time_s": "seconds of the epoch's training on the slowest rank; evaluation excluded (eval_time_s)",
    "efficiency": "mean over ranks of busy time (epoch time minus gradient Allreduce) / epoch_time_s; "
                  "1.0 means no rank waited for another",
    "load_balance": "mean / max over ranks of busy time; 1.0 means every rank had the same work",
    "phases_s": "per phase (sample, gather, copy, compute, allreduce, wait): [min, max] seconds over ranks; copy is "
                "the trainer's time staging batches for the GPU (packing them into pinned memory and starting "
                "the copies, which then run beside the compute; 0 on the CPU); on a GPU compute waits for the "
                "device to finish each step's forward and backward",
    "gpu_memory_peak_MiB": "--device cuda: the most GPU memory torch's allocator held during the epoch, largest "
                           "over ranks (MiB)",
    "phases_mean_s": "per phase: mean seconds over ranks",
    "phase_imbalance": "per phase: max / mean over ranks (1.0 is perfect balance; null when no rank spent time)",
    "grad_bytes_per_step": "bytes of gradient each rank sends per optimizer step (--grad-compress; the "
                           "reduction's algorithmic volume, hpcgnn.training.gradsync)",
    "network_MB": "MiB read from ranks on other machines, all ranks",
    "remote_rows": "feature rows the batches needed from other machines, all ranks",
    "cache_hit_rate": "share of remote_rows served by the --cache-mb cache",
    "cache_saved_MB": "MiB the cache kept off the network",
    "{split}_acc": "evaluated epochs: full-neighbourhood accuracy on {split}_mask (split: train, val, test; "
                   "null without the mask)",
    "{split}_loss": "evaluated epochs: full-neighbourhood mean loss on {split}_mask",
    "{split}_{metric}": "evaluated epochs: the run's --metric other than acc (f1_macro, f1_micro, roc_auc) "
                        "on {split}_mask; --task link: every link metric (auc, ap, mrr, hits@10, hits@50, "
                        "hits@100; hpcgnn.tasks.link_metrics) on the {split} edge set (val, test)",
    "eval_time_s": "evaluated epochs: seconds of the evaluation after the epoch (inference over all nodes)",
    "constant_share": "evaluated epochs: share of the outputs (every node's logits; link: the validation scores) "
                      "equal to one value; near 1 the model has collapsed to a constant (hpcgnn.tasks.collapse)",
}
FINAL_FIELDS = {
    "final": "true: the run's summary record",
    "epochs": "epochs the run was asked for (--epochs)",
    "epochs_trained": "epochs trained, fewer than epochs when --early-stop ended the run (a resumed run counts "
                      "its earlier starts' epochs)",
    "ranks": "MPI ranks",
    "epoch_time_s": "median over epochs of epoch_time_s (training only)",
    "eval_time_s": "median seconds of one evaluation (null when none ran)",
    "evaluations": "number of evaluated epochs",
    "run_time_s": "wall seconds of this run (of this start, when resumed): set-up, training, evaluations, "
                  "checkpoints",
    "efficiency": "median over epochs of the epoch records' efficiency",
    "load_balance": "median over epochs of the epoch records' load_balance",
    "test_acc": "test accuracy at the last evaluation",
    "val_acc": "validation accuracy at the last evaluation",
    "best_val_acc": "highest validation accuracy of any evaluation",
    "test_acc_at_best_val": "test accuracy at that evaluation (model selection on val_acc)",
    "best_epoch": "epoch of that evaluation",
    "best_val_loss": "lowest validation loss of any evaluation",
    "test_acc_at_best_val_loss": "test accuracy at that evaluation (model selection on val_loss)",
    "best_loss_epoch": "epoch of that evaluation",
    "metric": "the run's --metric (model selection also by it when it is not acc)",
    "{split}_{metric}": "val and test value of --metric at the last evaluation (--task link: of every link "
                        "metric)",
    "best_val_{metric}": "best validation value of --metric of any evaluation",
    "test_{metric}_at_best_val": "--metric on the test split at that evaluation",
    "best_{metric}_epoch": "epoch of that evaluation",
    "phases_s": "per phase: median over epochs of the slowest rank's seconds",
    "network_MB": "median over epochs of network_MB (runs across machines)",
    "cache_hit_rate": "median over epochs of cache_hit_rate (runs across machines)",
    "cache_saved_MB": "median over epochs of cache_saved_MB (runs across machines)",
    "peak_rss_MiB": "peak resident memory of every rank, MiB",
    "gpu_memory_peak_MiB": "--device cuda: the largest epoch record's gpu_memory_peak_MiB",
    "selected_by": "the record key model selection uses (--select): val_<metric> or val_loss",
    "selected_epoch": "epoch of the best selected_by value: the selected model",
    "selected_{split}_{metric}": "that epoch's values; selected_test_* are the run's headline figures",
    "stopped_early": "true when --early-stop ended training before --epochs",
    "refit": "--refit-folds: folds, selected_by (the validation key), epochs (the count chosen, which this last run "
             "trained on every labelled node), mean_curve ([epoch, mean over the folds] of every epoch all folds "
             "evaluated), mean_loss_curve (the same of the validation loss, which breaks ties), fold_best_epochs, "
             "mean_<key> at the chosen count, predict (--refit-predict); with ensemble, averaged_models and "
             "last_run (the last run's own test figures: the record's test_* are those of the average)",
}
#: the --metric keys an epoch's console line shows, when evaluated (link: the ranking metrics but hits)
_METRIC_LINE_KEYS = tuple(f"{split}_{key}" for key in EXTRA_KEYS + ("auc", "ap", "mrr") for split in ("val", "test"))


def header_record(session, first_epoch) -> dict:
    """Local. The first record a run writes to ``--metrics``: its settings and what every field means.

    ``config`` is the run's config as checkpoints store it (:meth:`TrainConfig.as_dict`);
    ``settings`` holds every flag as the run resolved it, flat, plus what it decided (prefetch
    depth, torch threads, model input width, feature scaling, ranks); ``dataset`` the dataset's
    path and sizes;
    ``fields`` the meaning of every key of the epoch and final records. A resumed run appends
    a new header (``first_epoch`` > 1) before its records.
    """
    graph, facts = session.graph, session.facts.as_dict()
    counts = {}
    for split in ("train", "val", "test"):
        values = [part.get(split, 0) for part in graph.meta["parts"]]
        counts[f"{split}_nodes"] = sum(v for v in values if isinstance(v, int))
    link = graph.meta.get("link")
    if link:  # the held-out edge sets of a link-prediction dataset
        counts.update({f"{split}_edges": link.get(f"num_{split}") for split in ("train", "val", "test")})
    dataset = {"path": graph.path, "name": graph.name, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
               "num_parts": graph.meta["num_parts"], "task": facts["kind"],
               **{k: facts[k] for k in DATASET_KEYS if k not in ("num_nodes", "kind")},
               **counts}
    return {"header": True, "format": _METRICS_FORMAT, "version": _METRICS_VERSION,
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "first_epoch": first_epoch + 1,
            "config": session.config.as_dict(),
            "settings": dict(session.config.flat(), in_dim=facts["in_dim"], kind=facts["kind"], **session.decided,
                             device_rows=session.stage.resident_rows if session.stage is not None else 0),
            "dataset": dataset, "fields": {"epoch": EPOCH_FIELDS, "final": FINAL_FIELDS}}


def balance_record(comm, phases, epoch_time) -> dict:
    """Collective over comm. One epoch's time per phase over ranks and its load balance.

    ``phases`` is this rank's seconds by phase, ``epoch_time`` its epoch's seconds. Returns
    ``phases_s`` ``{phase: (min, max)}``, ``phases_mean_s``, ``phase_imbalance`` (max/mean),
    ``load_balance`` and ``efficiency`` (module docstring), and the slowest rank's epoch time.
    """
    MPI = mpi()
    busy = epoch_time - phases["allreduce"]
    values = np.array([phases[k] for k in PHASES] + [busy, epoch_time], dtype=np.float64)
    low, high, total = np.empty_like(values), np.empty_like(values), np.empty_like(values)
    comm.Allreduce(values, low, op=MPI.MIN)
    comm.Allreduce(values, high, op=MPI.MAX)
    comm.Allreduce(values, total, op=MPI.SUM)
    mean = total / comm.size
    n = len(PHASES)
    return {"epoch_time_s": float(high[n + 1]),
            "efficiency": _ratio(mean[n], high[n + 1]), "load_balance": _ratio(mean[n], high[n]),
            "phases_s": {k: (float(low[i]), float(high[i])) for i, k in enumerate(PHASES)},
            "phases_mean_s": {k: float(mean[i]) for i, k in enumerate(PHASES)},
            "phase_imbalance": {k: _ratio(high[i], mean[i]) for i, k in enumerate(PHASES)}}


def _ratio(numerator, denominator):
    return round(float(numerator / denominator), 4) if denominator > 0 else None


def epoch_record(comm, epoch, totals, epoch_time, phases, stats=None, steps=None) -> dict:
    """Collective over comm. The record of ``epoch`` (1-based) from this rank's sums.

    ``totals`` is ``[loss summed over seeds, correct predictions, seeds]``; ``phases`` this
    rank's seconds by phase; ``stats`` the loader's :class:`~hpcgnn.loading.LoaderStats`, whose
    traffic counters are summed over ranks. Rank 0's record also holds every rank's phases.
    """
    totals = np.asarray(totals, dtype=np.float64).copy()
    comm.Allreduce(mpi().IN_PLACE, totals, op=mpi().SUM)
    seen = max(totals[2], 1)
    record = {"epoch": epoch, "loss": totals[0] / seen, "train_acc": totals[1] / seen}
    if steps is not None:
        record.update(steps=int(steps), train_seen=int(totals[2]))
    record.update(balance_record(comm, phases, epoch_time))
    record["rank_phases_s"] = comm.gather(phases, root=0)
    if stats is not None:
        record.update(_traffic_record(comm, stats))
    return record


def _traffic_record(comm, stats) -> dict:
    """Collective over comm. The epoch's traffic between nodes, summed over ranks: MB read over the
    network, feature rows needed from other nodes, the cache's hit rate and MB it saved."""
    sums = np.array([stats.network_bytes, stats.remote_rows, stats.cache_hits, stats.cache_saved_bytes],
                    dtype=np.float64)
    comm.Allreduce(mpi().IN_PLACE, sums, op=mpi().SUM)
    return {"network_MB": sums[0] / 2**20, "remote_rows": int(sums[1]),
            "cache_hit_rate": sums[2] / sums[1] if sums[1] else 0.0, "cache_saved_MB": sums[3] / 2**20}


def _median(history, key):
    values = [r[key] for r in history if r.get(key) is not None]
    return float(np.median(values)) if values else None


def final_record(comm, history, epochs, run_time_s=None, metric="acc") -> dict:
    """Collective over comm. The run's summary: median training time per epoch, median time per
    evaluation and the run's wall time, the last accuracies, model selection (best validation
    accuracy and loss, and test accuracy there), load balance, peak memory."""
    final = {"final": True, "epochs": epochs, "epochs_trained": len(history), "ranks": comm.size,
             "epoch_time_s": _median(history, "epoch_time_s"), "eval_time_s": _median(history, "eval_time_s"),
             "evaluations": sum(1 for r in history if r.get("eval_time_s") is not None),
             "run_time_s": None if run_time_s is None else float(run_time_s),
             "efficiency": _median(history, "efficiency"), "load_balance": _median(history, "load_balance")}
    final.update(selection(history))
    final.update(_last_link_values(history))
    final.update(metric_selection(history, metric))
    if history:
        # records of earlier releases (a resumed run's history) have no copy phase
        final["phases_s"] = {k: float(np.median([r["phases_s"].get(k, (0.0, 0.0))[1] for r in history]))
                             for k in PHASES}
        if any(r.get("gpu_memory_peak_MiB") for r in history):
            final["gpu_memory_peak_MiB"] = max(r.get("gpu_memory_peak_MiB", 0.0) for r in history)
        if all(r.get("network_MB") for r in history):  # traffic between nodes: the job spans nodes
            for key in ("network_MB", "cache_hit_rate", "cache_saved_MB"):
                final[key] = float(np.median([r[key] for r in history]))
    final["peak_rss_MiB"] = comm.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, root=0)
    return final


def selection(history) -> dict:
    """Local. Last evaluated accuracies and the epochs a validation protocol would select."""
    evaluated = [r for r in history if r.get("test_acc") is not None]
    if not evaluated:
        return {}
    last = evaluated[-1]
    chosen = {"test_acc": last["test_acc"], "val_acc": last["val_acc"]}
    if last.get("val_acc") is None:
        return chosen
    best = max(evaluated, key=lambda r: r["val_acc"])
    chosen.update(best_val_acc=best["val_acc"], test_acc_at_best_val=best["test_acc"], best_epoch=best["epoch"])
    with_loss = [r for r in evaluated if r.get("val_loss") is not None]  # older checkpoints lack it
    if with_loss:
        best = min(with_loss, key=lambda r: r["val_loss"])
        chosen.update(best_val_loss=best["val_loss"], test_acc_at_best_val_loss=best["test_acc"],
                      best_loss_epoch=best["epoch"])
    return chosen


def _last_link_values(history) -> dict:
    """Local. Every link metric's validation and test value at the last evaluation (empty for node tasks)."""
    evaluated = [r for r in history if r.get("val_auc") is not None or r.get("test_auc") is not None]
    if not evaluated:
        return {}
    return {f"{split}_{name}": evaluated[-1].get(f"{split}_{name}")
            for split in ("val", "test") for name in LINK_METRICS + ("loss",)}


def metric_selection(history, metric) -> dict:
    """Local. ``metric`` (``--metric``) and, unless it is acc (:func:`selection`), its last
    validation and test values and the evaluation with the best validation value."""
    key = metric_key(metric)
    evaluated = [r for r in history if f"val_{key}" in r or f"test_{key}" in r]
    if key == "acc" or not evaluated:
        return {"metric": metric}
    chosen = {"metric": metric, f"test_{key}": evaluated[-1].get(f"test_{key}"),
              f"val_{key}": evaluated[-1].get(f"val_{key}")}
    scored = [r for r in evaluated if r.get(f"val_{key}") is not None]
    if scored:
        best = max(scored, key=lambda r: r[f"val_{key}"])
        chosen.update({f"best_val_{key}": best[f"val_{key}"], f"test_{key}_at_best_val": best.get(f"test_{key}"),
                       f"best_{key}_epoch": best["epoch"]})
    return chosen


def explain(key, fields) -> str | None:
    """Local. The explanation of record key ``key`` in ``fields`` (:data:`EPOCH_FIELDS` or
    :data:`FINAL_FIELDS`), whose ``{split}`` (train, val, test) and ``{metric}`` entries stand
    for families of keys; None if it has none."""
    if key in fields:
        return fields[key]
    for pattern, text in fields.items():
        for split in ("train", "val", "test"):
            head, _, tail = pattern.replace("{split}", split).partition("{metric}")
            if "{metric}" in pattern and key.startswith(head) and key.endswith(tail) \
                    and len(key) > len(head) + len(tail):
                return text
            if "{metric}" not in pattern and key == head:
                return text
    return None


def _epoch_line(record) -> str:
    """Local. One console line: loss, accuracies, training time, evaluation time, parallel
    efficiency, min/max seconds of each phase."""
    ph = record["phases_s"]
    parts = " ".join(f"{k} {ph[k][0]:.2f}/{ph[k][1]:.2f}" for k in PHASES if k != "copy" or ph[k][1] > 0)
    acc = "".join(f" {k} {record[k]:.4f}" for k in ("val_acc", "test_acc") + _METRIC_LINE_KEYS
                  if record.get(k) is not None)
    evaluation = f" eval {record['eval_time_s']:.2f}s" if record.get("eval_time_s") is not None else ""
    efficiency = f" eff {record['efficiency']:.2f}" if record.get("efficiency") is not None else ""
    net = ""
    if record.get("network_MB"):
        net = f" network {record['network_MB']:.1f}MB"
        if record.get("cache_saved_MB"):
            net += f" cache hit {record['cache_hit_rate']:.2f} saved {record['cache_saved_MB']:.1f}MB"
    return (f"epoch {record['epoch']:3d} loss {record['loss']:.4f} train_acc {record['train_acc']:.4f}{acc} "
            f"time {record['epoch_time_s']:.2f}s{evaluation}{efficiency} [min/max s: {parts}]{net}")


#: final-record floats the console line shows after its metrics, apart from them
_RUN_KEYS = ("epoch_time_s", "eval_time_s", "run_time_s", "efficiency", "load_balance")


def _final_line(final) -> str:
    """Local. The console line of the final record: its metrics, then training time per epoch,
    time per evaluation (and how many ran), the run's wall time and the parallel efficiency."""
    lead = ""
    if final.get("selected_epoch") is not None:  # the selected model's figures come first
        tests = " ".join(f"{k[len('selected_'):]} {v:.4f}" for k, v in final.items()
                         if k.startswith("selected_test_") and isinstance(v, float))
        lead = f"selected epoch {final['selected_epoch']} (best {final['selected_by']}): {tests} | "
    metrics = lead + " ".join(f"{k} {v:.4f}" for k, v in final.items()
                              if isinstance(v, float) and k not in _RUN_KEYS and not k.startswith("selected_"))
    run = []
    if final.get("epoch_time_s") is not None:
        run.append(f"training {final['epoch_time_s']:.2f}s/epoch")
    if final.get("eval_time_s") is not None:
        run.append(f"evaluation {final['eval_time_s']:.2f}s x {final['evaluations']}")
    if final.get("run_time_s") is not None:
        run.append(f"run {final['run_time_s']:.1f}s")
    if final.get("efficiency") is not None:
        run.append(f"efficiency {final['efficiency']:.2f}")
    if final.get("evaluations") == 0:
        metrics = "not evaluated (--eval-every never)"
    return "final: " + metrics + (" | " + ", ".join(run) if run else "")


class Reporter:
    """Local. Rank 0's console lines and ``--metrics`` log; other ranks' calls do nothing.

    Parameters
    ----------
    rank : int
    metrics_path : str or None
        JSON-lines file: a header record, one record per epoch, then the final one.
    append : bool
        Continue an existing log (a resumed run).
    """

    def __init__(self, rank, metrics_path=None, append=False):
        self.active = rank == 0
        self.path = metrics_path
        self.log = None
        if metrics_path and self.active:
            try:
                self.log = open(metrics_path, "a" if append else "w")
            except OSError as exc:
                raise write_error(metrics_path, exc) from None

    def say(self, line):
        """Local. Print ``line`` on rank 0."""
        if self.active:
            print(line, flush=True)

    def header(self, record):
        """Local. Log the run's header record (:func:`header_record`); nothing is printed."""
        self._write(record)

    def epoch(self, record):
        """Local. Print and log one epoch's record (without the per-rank phases)."""
        self.say(_epoch_line(record))
        self._write({k: v for k, v in record.items() if k != "rank_phases_s"})

    def final(self, final):
        """Local. Print and log the final record, then close the log."""
        self.say(_final_line(final))
        self._write(final)
        self.close()

    def close(self):
        """Local. Close the log file."""
        if self.log is not None:
            self.log.close()
            self.log = None

    def _write(self, record):
        if self.log is not None:
            try:  # a log streams record by record (a reader may follow it), so each is flushed as written
                self.log.write(json.dumps(record, default=str) + "\n")
                self.log.flush()
            except OSError as exc:  # a full disk or a file-size limit: one line naming the log
                log, self.log = self.log, None
                with contextlib.suppress(OSError):
                    log.close()
                raise write_error(self.path, exc) from None


def progress(iterable, total, epoch, enabled):
    """Local. ``iterable`` behind a progress bar when ``enabled`` (rank 0, no ``--no-progress``)
    and stderr is a terminal: a batch log gets only the plain epoch lines, no carriage returns."""
    if not (enabled and sys.stderr.isatty()):
        return iterable
    return tqdm(iterable, total=total, desc=f"epoch {epoch + 1}", leave=False, dynamic_ncols=True)
