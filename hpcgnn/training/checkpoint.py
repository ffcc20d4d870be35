"""Checkpoints: everything a run needs to continue bit-exactly, and to rebuild its model.

Layout of a checkpoint directory::

    epoch-NNNN.pt                    model, optimizer, config, epoch, history, every rank's RNG
                                     states (written by rank 0)
    epoch-NNNN.rank-RRRRR.emb.npz    rank R's shard of the learnable node embedding (if any)
    epoch-NNNN.rank-RRRRR.opt.npz    its sparse optimizer state
    latest                           the name of the newest complete ``.pt`` file

The config stored in the ``.pt`` file is what :func:`hpcgnn.nn.build_model` needs, so
evaluation rebuilds the model from a checkpoint without the trainer.
"""
from __future__ import annotations

import os
import random

import numpy as np
import torch

from hpcgnn.nn.dropout import dropout_state, set_dropout_state
from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path


def checkpoint_name(epoch) -> str:
    """Local. The file name of the checkpoint taken after ``epoch`` epochs."""
    return f"epoch-{epoch:04d}.pt"


def embedding_shard_path(directory, epoch, rank) -> str:
    """Local. Path prefix of ``rank``'s node-embedding shard (and its optimizer state) at ``epoch``."""
    return os.path.join(directory, f"epoch-{epoch:04d}.rank-{rank:05d}")


def save_checkpoint(directory, state):
    """Local. Write ``state`` atomically to ``directory/epoch-NNNN.pt`` and point ``latest`` at it."""
    os.makedirs(directory, exist_ok=True)
    name = checkpoint_name(state["epoch"])
    with atomic_path(os.path.join(directory, name), suffix=".pt") as tmp:
        torch.save(state, tmp)
    with atomic_path(os.path.join(directory, "latest")) as tmp:
        with open(tmp, "w") as fh:
            fh.write(name + "\n")


def load_checkpoint(path) -> dict:
    """Local. A checkpoint file, or the latest one of a checkpoint directory."""
    if os.path.isdir(path):
        latest = os.path.join(path, "latest")
        if not os.path.exists(latest):
            raise InputError(path, "no checkpoint to resume from (missing 'latest')", "--checkpoint-dir")
        with open(latest) as fh:
            path = os.path.join(path, fh.read().strip())
    try:
        return torch.load(path, weights_only=False)
    except Exception as exc:
        raise InputError(path, f"unreadable checkpoint ({exc})") from None


def rng_state() -> dict:
    """Local. This process's torch, numpy, Python and dropout random states."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "dropout": dropout_state()}


def set_rng_state(state: dict):
    """Local. Continue every random stream from a state saved by :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    set_dropout_state(state["dropout"])


def save_session(session, directory, epoch, history):
    """Collective over session.comm. Checkpoint ``session`` after ``epoch`` epochs.

    The embedding shards are written first, so ``latest`` never names a checkpoint whose
    shards are missing.
    """
    comm = session.comm
    if session.embedding is not None:
        shard = embedding_shard_path(directory, epoch, comm.rank)
        os.makedirs(directory, exist_ok=True)
        session.embedding.save(shard + ".emb.npz")
        session.embed_optimizer.save(shard + ".opt.npz")
        comm.Barrier()
    rngs = comm.gather(rng_state(), root=0)
    if comm.rank == 0:
        save_checkpoint(directory, {"model": session.model.state_dict(), "optimizer": session.optimizer.state_dict(),
                                    "config": session.config, "epoch": epoch, "rng": rngs, "history": history})
    comm.Barrier()


def resume_session(session, directory):
    """Collective over session.comm. Restore ``session`` from the latest checkpoint in ``directory``.

    Returns ``(epochs_done, history)``.
    """
    comm = session.comm
    state = load_checkpoint(directory)
    session.model.load_state_dict(state["model"])
    session.optimizer.load_state_dict(state["optimizer"])
    if session.embedding is not None:
        shard = embedding_shard_path(directory, state["epoch"], comm.rank)
        session.embedding.load(shard + ".emb.npz")  # collective: fails on every rank alike
        error = None
        try:
            session.embed_optimizer.load(shard + ".opt.npz")
        except InputError as exc:
            error = exc
        fail_together(comm, error, directory)  # never leave the other ranks waiting
    set_rng_state(state["rng"][comm.rank])
    return state["epoch"], state["history"]
