"""Model selection on validation, and early stopping when it stops improving.

A run's headline figure is the test value at the epoch the validation protocol selects (the
best validation value of ``--select``), not the last epoch's: the last epoch of a run that has
begun to overfit reads lower, and which epoch that is depends on the dataset. With
``--early-stop PATIENCE`` the run also ends once the selected value has not improved for
``PATIENCE`` epochs, as Shchur et al.'s protocol does with validation loss, so the number of
epochs need not be tuned per dataset either.

Every rank sees the same reduced validation values, so every rank takes the same decision at
the same epoch: stopping needs no extra communication.
"""
from __future__ import annotations

#: what ``--select`` may name besides ``val_<metric>`` of the run's ``--metric``
LOSS_KEY = "val_loss"


def selection_key(select, metric_key) -> str:
    """Local. The record key a run selects on: ``val_loss``, ``val_acc``, or ``val_<metric>``.

    Parameters
    ----------
    select : str or None
        ``--select``: ``loss``, ``metric`` (the run's ``--metric``) or None (the same).
    metric_key : str
        The run's metric as a record key (``acc``, ``roc_auc``, ``f1_micro``, ...).
    """
    if select == "loss":
        return LOSS_KEY
    return f"val_{metric_key}"


def better(key, value, best) -> bool:
    """Local. Whether ``value`` of record key ``key`` improves on ``best`` (None: nothing yet)."""
    if value is None:
        return False
    if best is None:
        return True
    return value < best if key == LOSS_KEY else value > best


class EarlyStopping:
    """Local. Follows the selected validation value epoch by epoch.

    Parameters
    ----------
    key : str
        Record key selected on (:func:`selection_key`).
    patience : int
        Epochs without improvement after which :meth:`update` says stop (0: never).
    history : list of dict, optional
        Records of epochs already trained (a resumed run), replayed so the count carries over.
    """

    def __init__(self, key, patience=0, history=()):
        self.key = key
        self.patience = patience
        self.best = None
        self.best_epoch = None
        self.stopped = False  # a resumed run whose history already ended early trains no more
        for record in history:
            self.update(record)

    def update(self, record) -> bool:
        """Local. Take an epoch's record; True when the run should stop after it."""
        value = record.get(self.key)
        if better(self.key, value, self.best):
            self.best, self.best_epoch = value, record["epoch"]
        if self.patience and self.best_epoch is not None and value is not None:
            self.stopped = self.stopped or record["epoch"] - self.best_epoch >= self.patience
        return self.stopped

    def reason(self) -> str:
        """Local. The console line of an early stop."""
        return (f"early stop: {self.key} has not improved for {self.patience} epochs "
                f"(best {self.best:.4f} at epoch {self.best_epoch})")


def selected(history, key) -> dict:
    """Local. The selected epoch's figures: ``selected_by``, ``selected_epoch`` and every test
    value of that epoch as ``selected_test_<name>`` (empty when no epoch has ``key``)."""
    best = None
    for record in history:
        if better(key, record.get(key), None if best is None else best[key]):
            best = record
    if best is None:
        return {}
    figures = {f"selected_{k}": v for k, v in best.items() if k.startswith("test_") and v is not None}
    return {"selected_by": key, "selected_epoch": best["epoch"], f"selected_{key}": best[key], **figures}
