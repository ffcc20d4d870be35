"""The epoch count chosen by cross-validation, then one run on every labelled node (``--refit-folds K``).

Some splits have no validation part: R-GCN's benchmarks give a training file and a test file,
and HGB's labels are split the same way. Holding out a fifth of such a training set costs
accuracy (AIFB trains on 140 entities) and leaves a validation set too small to choose by (28
entities: one is 3.6 points), yet the number of epochs must be chosen somewhere, and a count
that suits one dataset overfits another. R-GCN's authors chose on a held-out fifth, then trained
on the whole training set; this module does that with every labelled node validated once:

1. the training and validation nodes are dealt into K folds, stratified by label, the same at
   every rank count (:func:`hpcgnn.graph.fold_of_nodes`);
2. K runs each train on K - 1 folds for ``--epochs`` epochs (or until ``--early-stop``),
   validating on the fold left out at the epochs the schedule evaluates;
3. the epoch count whose validation value (``--select``), averaged over the folds, is best wins;
   among equal best values the lowest mean validation loss, then the fewest epochs;
4. a last run trains that many epochs on every training and validation node, and its last epoch
   is the run's result. Its records, its checkpoints and its final line are the run's own; the
   final record adds ``refit``: the folds, the chosen count and the mean validation curve.

Every run starts from the run seed, so the last run's first E epochs are those of any other run
of E epochs on the same nodes. The cost is K + 1 runs: a protocol for labelled sets too small to
spare a validation split, not for a giant graph's millions of training nodes.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from hpcgnn.training.early_stop import LOSS_KEY


def fold_config(config):
    """Local. The config of one cross-validation run: no metrics file, checkpoints or plots (its
    console says one line; the last run writes what the user asked for)."""
    output = replace(config.output, metrics_file=None, checkpoint_dir=None, checkpoint_every=0, plot=None,
                     no_progress=True)
    return replace(config, output=output)


def mean_curve(histories, key) -> list:
    """Local. ``[[epoch, mean value of key], ...]`` over the epochs every fold evaluated (one
    history, a list of epoch records, per fold); ValueError when there is none."""
    per_fold = [{r["epoch"]: r[key] for r in history if r.get(key) is not None} for history in histories]
    common = sorted(set.intersection(*(set(values) for values in per_fold)))
    if not common:
        raise ValueError(f"no epoch has {key} in every fold")
    return [[epoch, float(np.mean([values[epoch] for values in per_fold]))] for epoch in common]


def choose_epochs(histories, key) -> tuple[int, list, list]:
    """Local. The epoch count whose mean value of ``key`` over the folds' ``histories`` is best
    (lowest for the loss, else highest), the mean curve of ``key`` and that of the validation loss.

    An accuracy over a few hundred validation nodes moves in steps of one node, so a flat stretch
    of equal best values is common (AIFB's 140 labelled entities tie over dozens of epochs): among
    equal best values the lowest mean validation loss wins, the continuous figure that still
    tells them apart, then the fewest epochs. Raises ValueError when no epoch was evaluated in
    every fold."""
    curve = mean_curve(histories, key)
    sign = 1.0 if key == LOSS_KEY else -1.0
    best = min(sign * value for _, value in curve)
    tied = [epoch for epoch, value in curve if sign * value == best]
    losses = {}
    if key != LOSS_KEY and all(any(r.get(LOSS_KEY) is not None for r in h) for h in histories):
        losses = dict(mean_curve(histories, LOSS_KEY))
    loss_curve = [[epoch, losses[epoch]] for epoch, _ in curve if epoch in losses]
    chosen = min(tied, key=lambda epoch: (losses.get(epoch, 0.0), epoch))
    return int(chosen), curve, loss_curve


def refit_line(refit) -> str:
    """Local. The console line of the last run: the chosen count and how it was chosen."""
    key = refit["selected_by"]
    return (f"refit: {refit['epochs']} epochs chosen by {refit['folds']}-fold cross-validation (mean {key} "
            f"{refit[f'mean_{key}']:.4f}); trained on every labelled node")


def run_refit(config, comm, train):
    """Collective over comm. ``--refit-folds``: the K cross-validation runs, then the last run on
    every labelled node for the chosen epoch count; returns the last run's ``(model, history)``.

    ``train(config, comm, fold=..., refit=...)`` is the loop's one run (:func:`hpcgnn.training.loop.run`
    less its checkpoint lock): ``fold`` is the held-out fold (None: the last run), ``refit`` what
    the last run's final record adds.
    """
    folds = config.evaluation.refit_folds
    histories, fold_best, key = [], [], None
    for fold in range(folds):
        _, history, key = train(fold_config(config), comm, fold=fold)
        histories.append(history)
        best, value, _ = choose_epochs([history], key)
        fold_best.append(best)
        if comm.rank == 0:
            print(f"fold {fold + 1}/{folds}: best {key} {dict(value)[best]:.4f} at epoch {best}", flush=True)
    epochs, curve, loss_curve = choose_epochs(histories, key)
    summary = {"folds": folds, "selected_by": key, "epochs": epochs, "mean_curve": curve,
               "mean_loss_curve": loss_curve, "fold_best_epochs": fold_best, f"mean_{key}": dict(curve)[epochs]}
    last = replace(config, optimizer=replace(config.optimizer, epochs=epochs))
    model, history, _ = train(last, comm, fold=None, refit=summary)
    return model, history
