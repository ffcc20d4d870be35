"""PNG curves of a training run: loss/accuracy per epoch and each rank's time breakdown."""
from __future__ import annotations

import os

from hpcgnn.training.reporting import PHASES


def plot_history(history, directory):
    """Local. Write ``curves.png`` and ``time_breakdown.png`` into ``directory``."""
    import matplotlib  # deferred: matplotlib is slow to import and only --plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: as above

    os.makedirs(directory, exist_ok=True)
    epochs = [r["epoch"] for r in history]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(epochs, [r["loss"] for r in history], marker="o")
    left.set(xlabel="epoch", ylabel="training loss", title="loss")
    for key in ("train_acc", "val_acc", "test_acc"):
        points = [(r["epoch"], r[key]) for r in history if r.get(key) is not None]
        if points:
            right.plot(*zip(*points), marker="o", label=key)
    right.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    right.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "curves.png"), dpi=100)
    plt.close(fig)

    per_rank = history[-1]["rank_phases_s"]
    fig, ax = plt.subplots(figsize=(6, 4))
    bottom = [0.0] * len(per_rank)
    for phase in PHASES:
        values = [p[phase] for p in per_rank]
        ax.bar(range(len(per_rank)), values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set(xlabel="rank", ylabel="seconds (last epoch)", title="time per phase and rank")
    ax.set_xticks(range(len(per_rank)))
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "time_breakdown.png"), dpi=100)
    plt.close(fig)
