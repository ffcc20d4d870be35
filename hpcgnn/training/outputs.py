"""What ``hpcgnn evaluate --save-embeddings DIR`` writes: every node's output, keyed by the
node's id in the input file.

Each rank writes its own nodes to ``DIR/embeddings-RANK.h5`` (atomically):

``orig_id``      int64 [n]       the node's id in the input file (the part files' ``orig_id``)
``gid``          int64 [n]       its id in the partitioned dataset
``embedding``    float32 [n, d]  output of layer ``--embedding-layer`` (default -1: the last
                                 layer, the logits; a hidden layer's output is taken after its
                                 normalisation and activation, as the next layer receives it)
``prediction``   [n]             with ``--save-predictions``: the arg-max class (int64); for a
                                 multi-label task int8 [n, C], 1 where the label's logit is > 0
``probability``  float32 [n, C]  with ``--save-predictions``: softmax of the logits (sigmoid per
                                 label for a multi-label task)

Attributes: ``layer`` (1-based) and ``num_layers``, ``task``. Row ``i`` of every dataset
belongs to node ``orig_id[i]``; concatenating the files of all ranks covers every node once.

``DIR/embeddings.json`` names the files of the set and what made them (``files``, ``ranks``,
``num_nodes``, ``layer``, ``checkpoint``, ``epoch``, ``data``); it is written last.

The files are written as one set: every rank writes a temporary file, and only when every
rank's write succeeded are they renamed into place (a full disk on one rank leaves nothing new,
and the earlier set untouched). The set then replaces an earlier one whole: files
``embeddings-RANK.h5`` of an earlier run with more ranks are removed, and nothing else in
``DIR`` is touched.
"""
from __future__ import annotations

import contextlib
import json
import os
import re

import h5py
import numpy as np

from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path, collective_atomic_path
from hpcgnn.runtime.stages import silent

MANIFEST = "embeddings.json"
_MANIFEST_FORMAT = "hpcgnn-embeddings"
#: the files of a set (group 1: the rank); nothing else in the directory is ever removed
_RANK_FILE = re.compile(r"embeddings-([0-9]{5,})\.h5")


def _rank_file(rank) -> str:
    """Local. The name of rank ``rank``'s file of a set."""
    return f"embeddings-{rank:05d}.h5"


def output_layer(layer: int, num_layers: int) -> int:
    """Local. The 0-based index of ``--embedding-layer`` ``layer``: 1..L, or -1..-L from the end."""
    if not (1 <= layer <= num_layers or -num_layers <= layer <= -1):
        raise InputError(None, f"the model has {num_layers} layers: choose 1..{num_layers}, or -1 (the last) "
                         f"to -{num_layers}", "--embedding-layer", layer)
    return layer - 1 if layer > 0 else num_layers + layer


def predictions(logits: np.ndarray, task: str) -> tuple[np.ndarray, np.ndarray]:
    """Local. ``(prediction, probability)`` of every row of ``logits`` (see module docstring)."""
    scores = logits.astype(np.float64)
    if task == "multilabel":
        return (scores > 0).astype(np.int8), (1.0 / (1.0 + np.exp(-scores))).astype(np.float32)
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True)) if scores.size else scores
    probability = shifted / shifted.sum(axis=1, keepdims=True) if scores.size else shifted
    return scores.argmax(axis=1).astype(np.int64), probability.astype(np.float32)


class InferenceOutputs:
    """Local. What ``hpcgnn evaluate`` keeps of an inference and writes with ``--save-embeddings``.

    :meth:`on_layer` is the ``on_layer`` hook of
    :func:`~hpcgnn.tasks.inference.layerwise_inference`: it logs each layer's end and keeps
    the chosen hidden layer's rows; :meth:`save` writes this rank's file.

    Parameters
    ----------
    directory : str or None
        ``--save-embeddings``: where the files go (None: nothing is saved).
    layer : int
        ``--embedding-layer``.
    with_predictions : bool
        ``--save-predictions``.
    num_layers : int
    task : str
        ``multiclass``, ``binary`` or ``multilabel`` (:func:`hpcgnn.tasks.metrics.task_of`).
    log : callable
        ``log(line)`` after each layer (a :class:`~hpcgnn.runtime.stages.StageLog`).
    """

    def __init__(self, directory, layer, with_predictions, num_layers, task, log=silent):
        if with_predictions and not directory:
            raise InputError(None, "needs --save-embeddings DIR, the files it adds to", "--save-predictions", True)
        self.directory = directory
        self.layer = output_layer(layer, num_layers)
        self.with_predictions = with_predictions
        self.num_layers = num_layers
        self.task = task
        self.log = log
        self.hidden = None

    def on_layer(self, i, rows) -> None:
        """Local. Layer ``i`` (0-based) is done: log it, keep its rows if they are the output."""
        if self.directory and i == self.layer and i < self.num_layers - 1:
            self.hidden = rows.copy()
        self.log(f"inference layer {i + 1}/{self.num_layers}")

    def save(self, graph, logits, source=None) -> str | None:
        """Collective over graph.comm. Write every rank's file as one set (module docstring);
        this rank's path, or None without a directory.

        ``source`` (plain values: the checkpoint and its epoch) goes into the manifest.

        Raises
        ------
        InputError
            On every rank when any rank's write fails (the failed rank names its file); no
            file of the new set is left, and an earlier set is left as it was.
        """
        if not self.directory:
            return None
        comm = graph.comm
        path = os.path.join(self.directory, _rank_file(comm.rank))
        logits = np.asarray(logits)
        manifest = os.path.join(self.directory, MANIFEST)

        def forget_old_set():  # before any file of the new set appears: no manifest names a mixed set
            if comm.rank == 0:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(manifest)

        with collective_atomic_path(path, comm, suffix=".h5", committing=forget_old_set) as tmp:
            with h5py.File(tmp, "w") as h5:
                h5.attrs.update(layer=self.layer + 1, num_layers=self.num_layers, task=self.task)
                h5.create_dataset("orig_id", data=graph.orig_id)
                h5.create_dataset("gid", data=graph.local_node_ids())
                h5.create_dataset("embedding", data=logits if self.hidden is None else self.hidden)
                if self.with_predictions:
                    prediction, probability = predictions(logits, self.task)
                    h5.create_dataset("prediction", data=prediction)
                    h5.create_dataset("probability", data=probability)
        comm.Barrier()  # every file of the set is in place
        error = None
        if comm.rank == 0:
            try:
                _remove_stale_files(self.directory, comm.size)
                with atomic_path(manifest) as tmp:
                    with open(tmp, "w") as fh:
                        json.dump({"format": _MANIFEST_FORMAT, "version": 1,
                                   "files": [_rank_file(r) for r in range(comm.size)], "ranks": comm.size,
                                   "num_nodes": int(graph.num_nodes), "layer": self.layer + 1,
                                   "num_layers": self.num_layers, "task": self.task,
                                   "data": os.path.abspath(graph.path),
                                   **(source or {})}, fh, indent=1)
                        fh.write("\n")
            except InputError as exc:
                error = exc
        fail_together(comm, error, manifest)
        return path


def _remove_stale_files(directory, ranks) -> list[str]:
    """Local. Remove the files ``embeddings-RANK.h5`` of ``directory`` with ``RANK`` >= ``ranks``
    (an earlier set written by more ranks); the names removed. Nothing else is touched."""
    removed = []
    for name in sorted(os.listdir(directory)):
        match = _RANK_FILE.fullmatch(name)
        if match and int(match.group(1)) >= ranks and os.path.isfile(os.path.join(directory, name)):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise InputError(os.path.join(directory, name), f"cannot remove a file of an earlier set "
                                 f"({exc.strerror})") from None
            removed.append(name)
    return removed
