"""PNG curves of a training run: loss and accuracy per epoch, with the epoch model selection
picks marked, and each rank's time breakdown."""
from __future__ import annotations

import os

from hpcgnn.training.reporting import PHASES, selection


def plot_history(history, directory):
    """Local. Write ``curves.png`` and ``time_breakdown.png`` into ``directory``.

    ``curves.png``: training loss per epoch and validation loss on evaluated epochs (left),
    accuracies (right), a dashed vertical line at the epoch of best validation accuracy in
    both (link prediction: training pair accuracy, validation and test AUC and MRR on the right).
    ``time_breakdown.png``: the last epoch's seconds per phase of every rank, stacked.
    """
    import matplotlib  # deferred: matplotlib is slow to import and only --plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: as above
    from matplotlib.ticker import MaxNLocator  # deferred: as above

    os.makedirs(directory, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    _curves(left, history, ("loss", "val_loss"), {"loss": "training loss", "val_loss": "validation loss"})
    left.set(xlabel="epoch", ylabel="loss", title="loss")
    # link prediction has no node accuracy: its ranking figures take the panel
    _curves(right, history, ("train_acc", "val_acc", "test_acc", "val_auc", "test_auc", "val_mrr", "test_mrr"), {})
    right.set(xlabel="epoch", ylabel="accuracy / ranking", title="accuracy and ranking metrics")
    best = selection(history).get("best_epoch")
    for ax in (left, right):
        if best is not None:
            ax.axvline(best, color="grey", linestyle="--", linewidth=1, label=f"best val_acc (epoch {best})")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "curves.png"), dpi=100)
    plt.close(fig)

    per_rank = history[-1]["rank_phases_s"]
    fig, ax = plt.subplots(figsize=(6, 4))
    bottom = [0.0] * len(per_rank)
    for phase in PHASES:
        values = [p.get(phase, 0.0) for p in per_rank]
        ax.bar(range(len(per_rank)), values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values)]
    # room above the tallest stack for the legend, which would otherwise cover it
    ax.set_ylim(0, 1.35 * max(max(bottom), 1e-9))
    ax.set(xlabel="rank", ylabel="seconds (last epoch)", title="time per phase and rank")
    ax.set_xticks(range(len(per_rank)))
    ax.legend(loc="upper center", ncol=len(PHASES), fontsize="small")
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "time_breakdown.png"), dpi=100)
    plt.close(fig)


def _curves(ax, history, keys, labels):
    """One line per key over the epochs that have it (evaluated epochs for validation keys)."""
    for key in keys:
        points = [(r["epoch"], r[key]) for r in history if r.get(key) is not None]
        if points:
            ax.plot(*zip(*points), marker="o", label=labels.get(key, key))
