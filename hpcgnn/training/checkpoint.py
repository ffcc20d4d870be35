"""Checkpoints: everything a run needs to continue bit-exactly, and to rebuild its model.

Layout of a checkpoint directory::

    epoch-NNNN.pt                    model, optimizer, config, epoch, history, every rank's RNG
                                     states (written by rank 0)
    epoch-NNNN.rank-RRRRR.emb.npz    rank R's shard of the learnable node embedding (if any)
    epoch-NNNN.rank-RRRRR.opt.npz    its sparse optimizer state
    latest                           the name of the newest complete ``.pt`` file

The config stored in the ``.pt`` file is what :func:`hpcgnn.nn.build_model` needs, so
evaluation rebuilds the model from a checkpoint without the trainer.

A checkpoint is data, never code: the ``.pt`` file holds only tensors and plain Python values
(numbers, strings, lists, tuples, dicts) and is read with ``torch.load(weights_only=True)``,
whose unpickler refuses to build any other object, so a crafted file cannot run code in
``hpcgnn evaluate`` or ``hpcgnn train --resume``. ``latest`` may only name an
``epoch-NNNN.pt`` file of its own directory, and a checkpoint whose model or dataset differs
from the run's is refused before any work, naming each differing config key.
"""
from __future__ import annotations

import json
import os
import random
import re

import numpy as np
import torch

from hpcgnn.nn.dropout import dropout_state, set_dropout_state
from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path


def checkpoint_name(epoch) -> str:
    """Local. The file name of the checkpoint taken after ``epoch`` epochs."""
    return f"epoch-{epoch:04d}.pt"


def rank_shard_path(directory, epoch, rank) -> str:
    """Local. Path prefix of ``rank``'s shards at ``epoch``: node embedding, its optimizer state, VR-GCN's histories."""
    return os.path.join(directory, f"epoch-{epoch:04d}.rank-{rank:05d}")


#: what ``latest`` may name: a checkpoint file of its own directory
LATEST_NAME = re.compile(r"epoch-[0-9]{4,}\.pt")
#: config keys that decide the shapes of every model's parameters
SHAPE_KEYS = ("model", "hidden", "layers", "norm", "embed_dim")
#: further keys that decide them, by model
MODEL_SHAPE_KEYS = {"sage": ("aggregator",), "gat": ("heads",)}
#: config keys the dataset decides
DATASET_KEYS = ("num_nodes", "feat_dim", "num_classes")
#: what a loaded checkpoint must hold, and of which type
STATE_TYPES = {"model": dict, "optimizer": dict, "config": dict, "epoch": int, "rng": list, "history": list}


def shape_keys(model) -> tuple:
    """Local. The config keys on which a checkpoint of ``model`` must agree with a run to fit it."""
    return SHAPE_KEYS + MODEL_SHAPE_KEYS.get(model, ())


def plain(value):
    """Local. ``value`` as plain Python data: numpy scalars and arrays become numbers and lists.

    History records and the config go into checkpoints this way, because the loader accepts
    nothing else besides tensors.
    """
    return json.loads(json.dumps(value, default=_plain_number))


def _plain_number(value):
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not plain data")


def save_checkpoint(directory, state):
    """Local. Write ``state`` atomically to ``directory/epoch-NNNN.pt`` and point ``latest`` at it."""
    os.makedirs(directory, exist_ok=True)
    name = checkpoint_name(state["epoch"])
    with atomic_path(os.path.join(directory, name), suffix=".pt") as tmp:
        torch.save(state, tmp)
    with atomic_path(os.path.join(directory, "latest")) as tmp:
        with open(tmp, "w") as fh:
            fh.write(name + "\n")


def latest_checkpoint(directory) -> str:
    """Local. The path of the checkpoint file ``directory/latest`` names.

    Raises
    ------
    InputError
        ``latest`` is missing, or names anything but an ``epoch-NNNN.pt`` file inside
        ``directory`` (a path, ``..``, or a link that leaves the directory).
    """
    latest = os.path.join(directory, "latest")
    if not os.path.exists(latest):
        raise InputError(directory, "no checkpoint to resume from (missing 'latest')", "--checkpoint-dir")
    try:
        with open(latest, "rb") as fh:
            name = fh.read(4096).decode("utf-8", errors="replace").strip()
    except OSError as exc:
        raise InputError(latest, f"unreadable ({exc.strerror})") from None
    if not LATEST_NAME.fullmatch(name):
        raise InputError(latest, "must name a checkpoint file epoch-NNNN.pt of its own directory", "latest", name)
    path = os.path.join(directory, name)
    target = os.path.realpath(path)
    if os.path.dirname(target) != os.path.realpath(directory):
        raise InputError(latest, f"names a link that leaves the checkpoint directory (to {target!r})", "latest", name)
    return path


def load_checkpoint(path, current=None, keys=()) -> dict:
    """Local. A checkpoint file, or the latest one of a checkpoint directory.

    Parameters
    ----------
    path : str
        A ``.pt`` file, or a checkpoint directory (its ``latest``).
    current : dict, optional
        The config of the run that will use the checkpoint: the checkpoint is refused unless
        its config agrees with ``current`` on each of ``keys``.
    keys : sequence of str

    Raises
    ------
    InputError
        One line naming the file: unreadable, not plain data (a pickled object, which would
        have run code), malformed, or made for another model or dataset (each differing key
        with both values).
    """
    if os.path.isdir(path):
        path = latest_checkpoint(path)
    try:
        state = torch.load(path, weights_only=True)
    except Exception as exc:
        raise InputError(path, refusal(exc)) from None
    for key, kind in STATE_TYPES.items():
        if not isinstance(state, dict) or not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise InputError(path, "malformed checkpoint (missing or mistyped entry)", "entry", key)
    if state["epoch"] < 0:
        raise InputError(path, "malformed checkpoint", "epoch", state["epoch"])
    refuse_non_finite(path, state)
    if current is not None:
        check_fits(path, state["config"], current, keys)
    return state


def refuse_non_finite(path, state):
    """Local. Refuse a checkpoint whose parameters or optimizer state hold NaN or infinity, naming
    the first such tensor: a model saved after it diverged scores every node alike, and a run
    resumed from it diverges again."""
    pending = [("model", state["model"], 0), ("optimizer", state["optimizer"], 0)]
    while pending:
        name, value, depth = pending.pop(0)
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                bad = value[~torch.isfinite(value)].reshape(-1)[0].item()
                raise InputError(path, "non-finite values (the run that wrote it had diverged): resume or evaluate "
                                 "an earlier epoch-NNNN.pt", name, bad)
        elif isinstance(value, dict) and depth < 4:
            pending.extend((f"{name}.{key}", item, depth + 1) for key, item in value.items())
        elif isinstance(value, (list, tuple)) and depth < 4:
            pending.extend((f"{name}.{i}", item, depth + 1) for i, item in enumerate(value))


def refusal(exc) -> str:
    """Local. One line saying why ``torch.load`` refused a checkpoint.

    Torch's own message spans lines and advises loading with ``weights_only=False``, the
    very thing that would let the file run code, so it is never passed on whole.
    """
    text = " ".join(str(exc).split())
    forbidden = re.search(r"GLOBAL (\S+)", text)
    if forbidden:
        return (f"refused: not a plain-data checkpoint (it asks to build the Python object {forbidden.group(1)}; "
                "a crafted file, or one written by an older hpcgnn)")
    if "Weights only load failed" in text:
        return "refused: not a plain-data checkpoint (it holds pickled objects other than tensors and plain values)"
    first = re.split(r"(?<=[.:])\s", text, maxsplit=1)[0]
    return f"unreadable checkpoint ({first[:200]})"


def check_fits(path, saved: dict, current: dict, keys):
    """Local. Refuse a checkpoint whose config ``saved`` differs from ``current`` on any of ``keys``.

    Raises
    ------
    InputError
        Naming every differing key with the checkpoint's value and the run's.
    """
    differing = [f"{key} {saved[key]!r} in the checkpoint, {current.get(key)!r} here" if key in saved
                 else f"{key} missing from the checkpoint, {current.get(key)!r} here"
                 for key in keys if key not in saved or saved[key] != current.get(key)]
    if differing:
        raise InputError(path, "checkpoint made for another model or dataset: " + "; ".join(differing))


def rng_state() -> dict:
    """Local. This process's torch, numpy, Python and dropout random states, as tensors and plain values."""
    numpy_state = np.random.get_state(legacy=False)
    return {"torch": torch.get_rng_state(),
            "numpy": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
                      "pos": int(numpy_state["state"]["pos"]), "has_gauss": int(numpy_state["has_gauss"]),
                      "gauss": float(numpy_state["gauss"])},
            "python": random.getstate(), "dropout": plain(dropout_state())}


def set_rng_state(state: dict):
    """Local. Continue every random stream from a state saved by :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    saved = state["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": saved["key"].numpy().astype(np.uint32), "pos": saved["pos"]},
                         "has_gauss": saved["has_gauss"], "gauss": saved["gauss"]})
    random.setstate(state["python"])
    set_dropout_state(state["dropout"])


def save_session(session, directory, epoch, history):
    """Collective over session.comm. Checkpoint ``session`` after ``epoch`` epochs.

    The embedding shards are written first, so ``latest`` never names a checkpoint whose
    shards are missing.
    """
    comm = session.comm
    shard = rank_shard_path(directory, epoch, comm.rank)
    if session.embedding is not None:
        os.makedirs(directory, exist_ok=True)
        session.embedding.save(shard + ".emb.npz")
        session.embed_optimizer.save(shard + ".opt.npz")
    if session.control is not None:
        os.makedirs(directory, exist_ok=True)
        session.control.save(shard + ".vr.npz")
    if session.embedding is not None or session.control is not None:
        comm.Barrier()
    rngs = comm.gather(rng_state(), root=0)
    residuals = comm.gather(session.sync.state(), root=0)  # error feedback of --grad-compress, per rank
    if comm.rank == 0:
        save_checkpoint(directory, {"model": session.model.state_dict(), "optimizer": session.optimizer.state_dict(),
                                    "config": plain(session.config), "epoch": int(epoch), "rng": rngs,
                                    "grad_residual": residuals, "history": plain(history)})
    comm.Barrier()


def resume_session(session, directory):
    """Collective over session.comm. Restore ``session`` from the latest checkpoint in ``directory``.

    A directory without a checkpoint (no ``latest``: the first start of a job that resumes
    whenever it is started, as a requeued SLURM job is) leaves ``session`` as it is.

    Returns ``(epochs_done, history)``: ``(0, [])`` when there was nothing to resume.
    """
    comm = session.comm
    config = session.config
    # rank 0 decides, so that ranks never disagree on whether the run starts over
    if not comm.bcast(os.path.exists(os.path.join(directory, "latest")) if comm.rank == 0 else None, root=0):
        return 0, []
    # the same file on every rank, so a refusal here is raised by every rank alike
    path = latest_checkpoint(directory)
    link_keys = ("task", "predictor") if config.get("task") == "link" else ()
    state = load_checkpoint(path, config, shape_keys(config["model"]) + DATASET_KEYS + ("ranks",) + link_keys)
    try:
        session.model.load_state_dict(state["model"])
        session.optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise InputError(path, f"checkpoint does not fit the model ({type(exc).__name__})") from None
    if session.embedding is not None:
        shard = rank_shard_path(directory, state["epoch"], comm.rank)
        session.embedding.load(shard + ".emb.npz")  # collective: fails on every rank alike
        error = None
        try:
            session.embed_optimizer.load(shard + ".opt.npz")
        except InputError as exc:
            error = exc
        fail_together(comm, error, directory)  # never leave the other ranks waiting
    if session.control is not None:
        session.control.load(rank_shard_path(directory, state["epoch"], comm.rank) + ".vr.npz")
    error = None
    try:  # each rank reads its own entry, so only some ranks may find theirs malformed
        set_rng_state(state["rng"][comm.rank])
        session.sync.load_state((state.get("grad_residual") or [None] * comm.size)[comm.rank])
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        error = InputError(path, f"malformed random state of rank {comm.rank} ({type(exc).__name__})")
    fail_together(comm, error, directory)
    return state["epoch"], state["history"]
