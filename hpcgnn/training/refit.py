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
3. the counts whose validation value (``--select``), averaged over the folds, is within one
   standard error of the best are those the folds cannot tell apart; the median of them wins
   (:func:`choose_epochs`);
4. a last run trains that many epochs on every training and validation node, and its last epoch
   is the run's result. Its records, its checkpoints and its final line are the run's own; the
   final record adds ``refit``: the folds, the chosen count and the mean validation curve;
5. with ``--refit-predict ensemble`` (the default) the run's test figures score the average of
   K + 1 models' class probabilities: each fold's model after the chosen count of epochs and the
   last run's model (the last run's own figures stay in its epoch records and under
   ``refit.last_run``).

Why average: the folds already trained K models of that count, each on (K - 1) / K of the
labelled nodes, and one model's test accuracy over a small test set moves by whole nodes with
the seed (AIFB: one of 36 entities is 2.8 points); the average of several models' probabilities
is what any of them would predict where they agree and settles the nodes they dispute by their
confidence, at no extra training. The folds' probabilities of this rank's test nodes are kept
at every evaluated epoch (the count is chosen after the last fold), float32, bounded by
:data:`VOTES_LIMIT_BYTES` per rank.

Every run starts from the run seed, so the last run's first E epochs are those of any other run
of E epochs on the same nodes. The cost is K + 1 runs: a protocol for labelled sets too small to
spare a validation split, not for a giant graph's millions of training nodes.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from hpcgnn.runtime.errors import InputError
from hpcgnn.tasks.metrics import class_probabilities, logits_of, split_metrics
from hpcgnn.training.early_stop import LOSS_KEY

#: what the folds' kept test probabilities may take on one rank
VOTES_LIMIT_BYTES = 2 << 30


def fold_config(config):
    """Local. The config of one cross-validation run: no metrics file, checkpoints or plots (its
    console says one line; the last run writes what the user asked for)."""
    output = replace(config.output, metrics_file=None, checkpoint_dir=None, checkpoint_every=0, plot=None,
                     no_progress=True)
    return replace(config, output=output)


RULE = "centre of the counts within one standard error of the best"


def fold_values(histories, key) -> dict:
    """Local. ``{epoch: [value in each fold]}`` over the epochs every fold evaluated (one history,
    a list of epoch records, per fold); ValueError when there is none."""
    per_fold = [{r["epoch"]: r[key] for r in history if r.get(key) is not None} for history in histories]
    common = sorted(set.intersection(*(set(values) for values in per_fold)))
    if not common:
        raise ValueError(f"no epoch has {key} in every fold")
    return {epoch: [values[epoch] for values in per_fold] for epoch in common}


def mean_curve(histories, key) -> list:
    """Local. ``[[epoch, mean value of key], ...]`` over the epochs every fold evaluated."""
    return [[epoch, float(np.mean(values))] for epoch, values in fold_values(histories, key).items()]


def choose_epochs(histories, key) -> tuple[int, list, list, float]:
    """Local. The epoch count chosen from the folds' ``histories`` by ``key`` (lowest for the loss,
    else highest), the mean curve of ``key``, that of the validation loss, and the standard error
    that admitted the counts the choice was made among.

    The counts whose mean value is within one standard error of the best mean (the spread of the
    folds' values at the best count, over the square root of the fold count) are the ones the
    folds cannot tell apart, and the median of them is chosen. An accuracy over a few hundred
    validation nodes moves in steps of one node, and past a few epochs it is often flat for most
    of the range (AIFB's 140 labelled entities: 94 to 96% from epoch 8 to 100): the argmax of such
    a curve is any point of the plateau, and moves with the order of float sums, so with the rank
    count. The plateau's centre is the count farthest from both of its edges, where training on
    every labelled node (a fifth more than each fold) is least likely to leave it. A curve with a
    clear peak has a narrow set around it. Raises ValueError when no epoch was evaluated in every
    fold."""
    values = fold_values(histories, key)
    sign = 1.0 if key == LOSS_KEY else -1.0
    means = {epoch: sign * float(np.mean(v)) for epoch, v in values.items()}
    best = min(means, key=lambda epoch: (means[epoch], epoch))
    spread = values[best]
    error = float(np.std(spread, ddof=1) / np.sqrt(len(spread))) if len(spread) > 1 else 0.0
    near = [epoch for epoch, mean in means.items() if mean <= means[best] + error]
    chosen = near[(len(near) - 1) // 2]
    curve = [[epoch, sign * mean] for epoch, mean in means.items()]
    loss_curve = []
    if key != LOSS_KEY and all(any(r.get(LOSS_KEY) is not None for r in h) for h in histories):
        loss_curve = mean_curve(histories, LOSS_KEY)
    return int(chosen), curve, loss_curve, error


def refit_line(refit) -> str:
    """Local. The console line of the last run: the chosen count and how it was chosen."""
    key = refit["selected_by"]
    line = (f"refit: {refit['epochs']} epochs chosen by {refit['folds']}-fold cross-validation (mean {key} "
            f"{refit[f'mean_{key}']:.4f}); trained on every labelled node")
    alone = refit.get("last_run", {}).get("test_acc")
    if alone is not None:
        line += (f"; test figures average the {refit['folds']} fold models and this run's (this run alone: "
                 f"test_acc {alone:.4f})")
    return line


def owned_test_mask(graph) -> np.ndarray:
    """Local. Which of this rank's nodes (of the labelled type) are test nodes."""
    if "test_mask" in graph.ndata:
        return graph.ndata["test_mask"].local.astype(bool)
    return np.zeros(len(graph.ndata["label"].local), bool)


def test_probabilities(rows, session) -> np.ndarray:
    """Local. Class probabilities of this rank's test nodes from the evaluation's output ``rows``."""
    return class_probabilities(np.asarray(rows)[owned_test_mask(session.graph)], session.facts.kind)


class FoldVotes:
    """Local. A cross-validation run's class probabilities of this rank's test nodes at every
    evaluated epoch (:meth:`keep`, called by the loop after each evaluation), for the ensemble."""

    def __init__(self, epochs):
        self.epochs, self.by_epoch = int(epochs), {}

    def check(self, session):
        """Local. Before training: refuse in one line a run whose kept probabilities would pass
        :data:`VOTES_LIMIT_BYTES` on this rank (float32, every test node it owns, every output,
        every epoch)."""
        tests, outputs = int(owned_test_mask(session.graph).sum()), int(session.facts.num_classes)
        needed = 4 * tests * outputs * self.epochs
        if needed > VOTES_LIMIT_BYTES:
            raise InputError(None, f"keeping the fold models' test predictions would take {needed / 2**30:.1f} GiB "
                             f"on rank {session.comm.rank} ({tests:,} test nodes x {outputs} outputs x "
                             f"{self.epochs} epochs); pass --refit-predict last", "--refit-predict", "ensemble")

    def keep(self, epoch, rows, session):
        """Local. This evaluation's probabilities of the test nodes, by epoch."""
        self.by_epoch[epoch] = test_probabilities(rows, session).astype(np.float32)

    def final(self, session, record) -> dict:
        """Local. A fold's final record is not reported: as it is."""
        return record


class EnsembleVotes:
    """Local. The last run's side of ``--refit-predict ensemble``: ``fold_sum``, the folds' summed
    probabilities of this rank's test nodes at the chosen count, joined by the last run's own."""

    def __init__(self, fold_sum, folds):
        self.fold_sum, self.folds, self.rows = fold_sum, int(folds), None

    def check(self, session):
        """Local. Nothing to refuse: the folds' sum is already held."""

    def keep(self, epoch, rows, session):
        """Local. The latest evaluation's output rows (the last epoch's, once the run ends; read
        only then)."""
        self.rows = rows

    def final(self, session, record) -> dict:
        """Collective over session.comm. ``record`` (the last run's final record) with its test
        figures those of the average, and the last run's own under ``refit.last_run``."""
        last = test_probabilities(self.rows, session)
        mean = (self.fold_sum + last) / (self.folds + 1)
        ensemble, alone = (self._test_figures(session, probabilities) for probabilities in (mean, last))
        refit = dict(record["refit"], last_run=alone, averaged_models=self.folds + 1)
        return dict(record, **ensemble, refit=refit)

    @staticmethod
    def _test_figures(session, probabilities) -> dict:
        """Collective over session.comm. ``test_<key>`` of every figure of the test split, scored
        from this rank's test nodes' ``probabilities``."""
        graph, kind = session.graph, session.facts.kind
        labels = graph.ndata["label"].local[owned_test_mask(graph)]
        figures = split_metrics(logits_of(probabilities, kind), labels, kind, session.config.evaluation.metric,
                                session.comm)
        return {f"test_{key}": value for key, value in figures.items()}


def run_refit(config, comm, train):
    """Collective over comm. ``--refit-folds``: the K cross-validation runs, then the last run on
    every labelled node for the chosen epoch count; returns the last run's ``(model, history)``.

    ``train(config, comm, fold=..., refit=..., votes=...)`` is the loop's one run
    (:func:`hpcgnn.training.loop.run` less its checkpoint lock): ``fold`` is the held-out fold
    (None: the last run), ``refit`` what the last run's final record adds, ``votes`` what keeps
    each evaluation's test probabilities and may rewrite the final record (:class:`FoldVotes`,
    :class:`EnsembleVotes`; None with ``--refit-predict last``).
    """
    folds = config.evaluation.refit_folds
    ensemble = config.evaluation.refit_predict == "ensemble"
    histories, fold_best, key, fold_votes = [], [], None, []
    for fold in range(folds):
        votes = FoldVotes(config.optimizer.epochs) if ensemble else None
        _, history, key = train(fold_config(config), comm, fold=fold, votes=votes)
        histories.append(history)
        fold_votes.append(votes)
        best, value, _, _ = choose_epochs([history], key)
        fold_best.append(best)
        if comm.rank == 0:
            print(f"fold {fold + 1}/{folds}: best {key} {dict(value)[best]:.4f} at epoch {best}", flush=True)
    epochs, curve, loss_curve, error = choose_epochs(histories, key)
    summary = {"folds": folds, "selected_by": key, "rule": RULE, "epochs": epochs, "mean_curve": curve,
               "mean_loss_curve": loss_curve, "standard_error": error, "fold_best_epochs": fold_best,
               f"mean_{key}": dict(curve)[epochs], "predict": config.evaluation.refit_predict}
    last = replace(config, optimizer=replace(config.optimizer, epochs=epochs))
    votes = EnsembleVotes(sum(v.by_epoch[epochs] for v in fold_votes), folds) if ensemble else None
    del fold_votes  # the other epochs' probabilities
    model, history, _ = train(last, comm, fold=None, refit=summary, votes=votes)
    return model, history
