"""What a training run reports: per-epoch records (loss, accuracy, time per phase and rank),
the final record with model selection on validation, the console lines, the JSON-lines log.

Records are plain dicts, so every key lands in ``--metrics`` as it is; the README lists them.
"""
from __future__ import annotations

import json
import resource

import numpy as np
from tqdm import tqdm

from hpcgnn.runtime.comm import mpi

#: where an epoch's time goes, per rank: the loader's phases, then the step's
PHASES = ("sample", "gather", "compute", "allreduce", "wait")


def phase_extremes(comm, phases) -> dict:
    """Collective over comm. ``{phase: (min, max)}`` over ranks of per-epoch seconds."""
    MPI = mpi()
    values = np.array([phases[k] for k in PHASES], dtype=np.float64)
    low, high = np.empty_like(values), np.empty_like(values)
    comm.Allreduce(values, low, op=MPI.MIN)
    comm.Allreduce(values, high, op=MPI.MAX)
    return {k: (float(a), float(b)) for k, a, b in zip(PHASES, low, high)}


def epoch_record(comm, epoch, totals, epoch_time, phases, stats=None) -> dict:
    """Collective over comm. The record of ``epoch`` (1-based) from this rank's sums.

    ``totals`` is ``[loss summed over seeds, correct predictions, seeds]``; ``phases`` this
    rank's seconds by phase; ``stats`` the loader's :class:`~hpcgnn.loading.LoaderStats`, whose
    traffic counters are summed over ranks. Rank 0's record also holds every rank's phases.
    """
    totals = np.asarray(totals, dtype=np.float64).copy()
    comm.Allreduce(mpi().IN_PLACE, totals, op=mpi().SUM)
    seen = max(totals[2], 1)
    record = {"epoch": epoch, "loss": totals[0] / seen, "train_acc": totals[1] / seen,
              "epoch_time_s": comm.allreduce(epoch_time, op=mpi().MAX), "phases_s": phase_extremes(comm, phases),
              "rank_phases_s": comm.gather(phases, root=0)}
    if stats is not None:
        record.update(traffic_record(comm, stats))
    return record


def traffic_record(comm, stats) -> dict:
    """Collective over comm. The epoch's traffic between nodes, summed over ranks: MB read over the
    network, feature rows needed from other nodes, the cache's hit rate and MB it saved."""
    sums = np.array([stats.network_bytes, stats.remote_rows, stats.cache_hits, stats.cache_saved_bytes],
                    dtype=np.float64)
    comm.Allreduce(mpi().IN_PLACE, sums, op=mpi().SUM)
    return {"network_MB": sums[0] / 2**20, "remote_rows": int(sums[1]),
            "cache_hit_rate": sums[2] / sums[1] if sums[1] else 0.0, "cache_saved_MB": sums[3] / 2**20}


def final_record(comm, history, epochs) -> dict:
    """Collective over comm. The run's summary: median epoch time and phases, the last accuracies,
    model selection (best validation accuracy and loss, and test accuracy there), peak memory."""
    final = {"final": True, "epochs": epochs, "ranks": comm.size,
             "epoch_time_s": float(np.median([r["epoch_time_s"] for r in history])) if history else None}
    final.update(selection(history))
    if history:
        final["phases_s"] = {k: float(np.median([r["phases_s"][k][1] for r in history])) for k in PHASES}
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


def epoch_line(record) -> str:
    """Local. One console line: loss, accuracies, epoch time, min/max seconds of each phase."""
    ph = record["phases_s"]
    parts = " ".join(f"{k} {ph[k][0]:.2f}/{ph[k][1]:.2f}" for k in PHASES)
    acc = "".join(f" {k} {record[k]:.4f}" for k in ("val_acc", "test_acc") if record.get(k) is not None)
    net = ""
    if record.get("network_MB"):
        net = f" network {record['network_MB']:.1f}MB"
        if record.get("cache_saved_MB"):
            net += f" cache hit {record['cache_hit_rate']:.2f} saved {record['cache_saved_MB']:.1f}MB"
    return (f"epoch {record['epoch']:3d} loss {record['loss']:.4f} train_acc {record['train_acc']:.4f}{acc} "
            f"time {record['epoch_time_s']:.2f}s [min/max s: {parts}]{net}")


def final_line(final) -> str:
    """Local. The console line of the final record (its float fields)."""
    return "final: " + " ".join(f"{k} {v:.4f}" for k, v in final.items() if isinstance(v, float))


class Reporter:
    """Local. Rank 0's console lines and ``--metrics`` log; other ranks' calls do nothing.

    Parameters
    ----------
    rank : int
    metrics_path : str or None
        JSON-lines file: one record per epoch, then the final one.
    append : bool
        Continue an existing log (a resumed run).
    """

    def __init__(self, rank, metrics_path=None, append=False):
        self.active = rank == 0
        self.log = open(metrics_path, "a" if append else "w") if metrics_path and self.active else None

    def say(self, line):
        """Local. Print ``line`` on rank 0."""
        if self.active:
            print(line, flush=True)

    def epoch(self, record):
        """Local. Print and log one epoch's record (without the per-rank phases)."""
        self.say(epoch_line(record))
        self._write({k: v for k, v in record.items() if k != "rank_phases_s"})

    def final(self, final):
        """Local. Print and log the final record, then close the log."""
        self.say(final_line(final))
        self._write(final)
        self.close()

    def close(self):
        """Local. Close the log file."""
        if self.log is not None:
            self.log.close()
            self.log = None

    def _write(self, record):
        if self.log is not None:
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()


def progress(iterable, total, epoch, enabled):
    """Local. ``iterable`` behind a progress bar when ``enabled`` (rank 0, a terminal user)."""
    if not enabled:
        return iterable
    return tqdm(iterable, total=total, desc=f"epoch {epoch + 1}", leave=False, dynamic_ncols=True)
