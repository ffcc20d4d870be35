"""Checkpoints: everything a run needs to continue bit-exactly, and to rebuild its model.

Layout of a checkpoint directory::

    epoch-NNNN.pt                    model, optimizer, config, epoch, history, every rank's RNG
                                     states, the dataset's identity (written by rank 0)
    epoch-NNNN.rank-RRRRR.emb.npz    rank R's shard of the learnable node embedding (if any)
    epoch-NNNN.rank-RRRRR.opt.npz    its sparse optimizer state
    latest                           the name of the newest complete ``.pt`` file: what
                                     ``--resume`` continues from
    best                             the name of the selected epoch's ``.pt`` file (the best
                                     validation value of ``--select``): what ``hpcgnn evaluate``
                                     scores by default, and the model the run's final line reports

The config stored in the ``.pt`` file is what :func:`hpcgnn.nn.build_model` needs, so
evaluation rebuilds the model from a checkpoint without the trainer.

A checkpoint directory holds one dataset's checkpoints: a run on another dataset is refused
(:func:`prepare_directory`), so that it never moves ``latest`` and ``best`` away from the
first dataset's. Node-indexed state (the embedding and optimizer shards, VR-GCN's histories) is
row ``i`` for node ``i`` of the dataset's numbering: a checkpoint records a fingerprint of that
numbering (:func:`dataset_identity`), and state trained on another numbering — another
partitioning of a graph of the same size — is refused (:func:`check_node_state`) instead of
landing on other nodes.

A checkpoint is data, never code: the ``.pt`` file holds only tensors and plain Python values
(numbers, strings, lists, tuples, dicts) and is read with ``torch.load(weights_only=True)``,
whose unpickler refuses to build any other object, so a crafted file cannot run code in
``hpcgnn evaluate`` or ``hpcgnn train --resume``. ``latest`` and ``best`` may only name an
``epoch-NNNN.pt`` file of their own directory, and a checkpoint whose model or dataset differs
from the run's is refused before any work, naming each differing config key.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import sys
import tempfile

import numpy as np
import torch

from hpcgnn.nn.dropout import dropout_state, seed_dropout, set_dropout_state
from hpcgnn.runtime.collectives import fail_together
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import atomic_path, open_regular, write_error
from hpcgnn.runtime.rng import derive_seed
from hpcgnn.sampling import SAMPLERS, sampler_spec
from hpcgnn.store.embedding import load_arrays, save_arrays
from hpcgnn.store.reshard import reshard
from hpcgnn.training.config import stored_config


def _checkpoint_name(epoch) -> str:
    """Local. The file name of the checkpoint taken after ``epoch`` epochs."""
    return f"epoch-{epoch:04d}.pt"


def rank_shard_path(directory, epoch, rank) -> str:
    """Local. Path prefix of ``rank``'s shards at ``epoch``: node embedding, its optimizer state, VR-GCN's histories."""
    return os.path.join(directory, f"epoch-{epoch:04d}.rank-{rank:05d}")


#: what ``latest`` and ``best`` may name: a checkpoint file of its own directory
_LATEST_NAME = re.compile(r"epoch-[0-9]{4,}\.pt")
_LATEST = "latest"
_BEST = "best"
#: the files of one checkpoint (group 1: its epoch); nothing else in a directory is ever removed
_CHECKPOINT_FILE = re.compile(r"epoch-([0-9]{4,})(?:\.pt|\.rank-[0-9]{5,}\.(?:emb|opt|vr)\.npz)")
#: config keys that decide the shapes of every model's parameters
_SHAPE_KEYS = ("model", "hidden", "layers", "norm", "embed_dim")
#: further keys that decide them, by model
_MODEL_SHAPE_KEYS = {"sage": ("aggregator",), "gat": ("heads",)}
#: config keys the dataset decides
DATASET_KEYS = ("num_nodes", "feat_dim", "num_classes")
#: what a loaded checkpoint must hold, and of which type
_STATE_TYPES = {"model": dict, "optimizer": dict, "config": dict, "epoch": int, "rng": list, "history": list}


def _shape_keys(model) -> tuple:
    """Local. The config keys on which a checkpoint of ``model`` must agree with a run to fit it."""
    return _SHAPE_KEYS + _MODEL_SHAPE_KEYS.get(model, ())


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


def save_checkpoint(directory, state, best=False):
    """Local. Write ``state`` atomically to ``directory/epoch-NNNN.pt`` and point ``latest`` at it
    (and ``best`` too, when it is the selected epoch's model).

    Torch writes through a Python file object: a full disk or a file-size limit then reaches
    :func:`~hpcgnn.runtime.files.atomic_path` as the system's error, which names the file in
    one line (given a path, torch's own writer reports only "unexpected pos").
    """
    os.makedirs(directory, exist_ok=True)
    name = _checkpoint_name(state["epoch"])
    with atomic_path(os.path.join(directory, name), suffix=".pt") as tmp:
        with open(tmp, "wb") as fh:
            torch.save(state, fh)
    for pointer in (_LATEST, _BEST) if best else (_LATEST,):
        with atomic_path(os.path.join(directory, pointer)) as tmp:
            with open(tmp, "w") as fh:
                fh.write(name + "\n")


def latest_checkpoint(directory, pointer=_LATEST) -> str:
    """Local. The path of the checkpoint file ``directory/latest`` (or ``pointer``: ``best``) names.

    Raises
    ------
    InputError
        The pointer is missing, or names anything but an ``epoch-NNNN.pt`` file inside
        ``directory`` (a path, ``..``, or a link that leaves the directory).
    """
    latest = os.path.join(directory, pointer)
    if not os.path.exists(latest):
        raise InputError(directory, f"no checkpoint to resume from (missing {pointer!r})", "--checkpoint-dir")
    try:
        with open_regular(latest, pointer) as fh:  # a FIFO here would block the read forever
            name = fh.read(4096).decode("utf-8", errors="replace").strip()
    except OSError as exc:
        raise InputError(latest, f"unreadable ({exc.strerror})") from None
    if not _LATEST_NAME.fullmatch(name):
        raise InputError(latest, "must name a checkpoint file epoch-NNNN.pt of its own directory", pointer, name)
    path = os.path.join(directory, name)
    target = os.path.realpath(path)
    if os.path.dirname(target) != os.path.realpath(directory):
        raise InputError(latest, f"names a link that leaves the checkpoint directory (to {target!r})", pointer, name)
    return path


def chosen_checkpoint(path, latest=False) -> tuple[str, str]:
    """Local. The checkpoint file that ``hpcgnn evaluate --checkpoint path`` scores, and why.

    A directory's ``best`` (the model the training run selected and reported), or its
    ``latest`` with ``latest`` true or when it has no ``best`` (the run never evaluated, or
    predates ``best``); a file is itself. Returns ``(file, which)``, ``which`` in words.
    """
    if not os.path.isdir(path):
        if latest:
            raise InputError(path, "picks the newest checkpoint of a checkpoint directory; this is a file",
                             "--latest", True)
        return path, "the file given"
    if latest:
        return latest_checkpoint(path), "latest: the newest checkpoint (--latest)"
    if os.path.lexists(os.path.join(path, _BEST)):
        return latest_checkpoint(path, _BEST), "best: the epoch the run selected"
    return latest_checkpoint(path), "latest: the directory has no best (the run never evaluated)"


def dataset_identity(graph) -> dict:
    """Collective over graph.comm. What ties a checkpoint to the dataset it was trained on.

    ``nodes`` fingerprints the numbering of the nodes (SHA-256 of the part boundaries and of
    every node's original id in new-id order, hashed part by part, so any rank count gives the
    same): node-indexed state is row ``i`` for node ``i`` of this numbering, and another
    partitioning of the same graph numbers the nodes otherwise. ``dataset`` fingerprints the
    whole dataset: ``nodes``, the edge counts and the part files' checksums that ``meta.json``
    records. ``path``, ``name`` and ``num_nodes`` are for messages.
    """
    every_part = graph.part_digests()
    nodes = hashlib.sha256(json.dumps(["hpcgnn-nodes-1", graph.meta["node_starts"], every_part]).encode()).hexdigest()
    checksums = [part.get("sha256") for part in graph.meta.get("parts", [])]
    whole = hashlib.sha256(json.dumps(["hpcgnn-dataset-1", nodes, graph.num_edges, graph.meta.get("edge_starts"),
                                       checksums]).encode()).hexdigest()
    return {"nodes": nodes, "dataset": whole, "path": os.path.abspath(graph.path), "name": str(graph.name),
            "num_nodes": int(graph.num_nodes)}


def settings_view(state, where=None) -> dict:
    """Local. A loaded checkpoint's settings as one flat mapping: its config's settings by flag name,
    what the dataset decided (``num_nodes``, ``feat_dim``, ``num_classes``, ``kind``) and its rank
    count. Checkpoints of older releases stored that mapping itself as their config."""
    if not isinstance(state.get("facts"), dict):  # its "task" was the kind of target
        return dict(state["config"], kind=state["config"].get("task"))
    try:
        config = stored_config(state["config"], where)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(where, f"malformed checkpoint config ({type(exc).__name__})", "entry", "config") from None
    return {**config.flat(), **state["facts"], "ranks": state.get("ranks")}


def _session_view(session) -> dict:
    """Local. The running session's settings, as :func:`settings_view` gives a checkpoint's."""
    return {**session.config.flat(), **session.facts.as_dict(), "ranks": session.comm.size}


def _node_state(settings) -> str | None:
    """Local. The node-indexed state a checkpoint with ``settings`` (:func:`settings_view`) holds,
    in words; None if none."""
    held = ["the learnable node embedding"] if settings.get("embed_dim") else []
    if settings.get("sampler") in SAMPLERS and sampler_spec(settings["sampler"]).history:
        held.append("the sampler's histories of every node")
    return " and ".join(held) or None


def check_node_state(path, state, identity, prog="hpcgnn", warn=True) -> None:
    """Local. Refuse checkpoint ``path`` (loaded as ``state``) if it holds node-indexed state
    made for another numbering of the nodes than ``identity``'s (:func:`dataset_identity`).

    A checkpoint older than the fingerprint cannot be checked: it is accepted (its shards'
    row ranges are still checked against the dataset's parts) with a warning on stderr
    (printed when ``warn``: by one rank of a job).

    Raises
    ------
    InputError
        Naming the checkpoint, the field ``dataset.nodes`` and both fingerprints.
    """
    held = _node_state(settings_view(state, path))
    if held is None:
        return
    saved = state.get("dataset")
    if not isinstance(saved, dict) or not isinstance(saved.get("nodes"), str):
        if warn:
            print(f"{prog}: warning: {path}: written before checkpoints recorded their dataset: the rows of "
                  f"{held} cannot be checked against this dataset's node numbering", file=sys.stderr, flush=True)
        return
    if saved["nodes"] != identity["nodes"]:
        raise InputError(path, f"{held} was trained on another numbering of the nodes (another partitioning "
                         f"of the graph, or another graph; it was trained on {saved.get('path')}): its rows "
                         "would land on other nodes; give --data the dataset it was trained on", "dataset.nodes",
                         f"{saved['nodes'][:12]} in the checkpoint, {identity['nodes'][:12]} here")


def prepare_directory(session, directory, resume) -> None:
    """Collective over session.comm. Make ``directory`` ready for this run's checkpoints.

    A directory holds one dataset's checkpoints: one whose ``latest`` belongs to another
    dataset is refused (a second dataset would move ``latest`` and ``best`` to its own
    checkpoints, and the first one's ``--resume`` and ``evaluate`` would then fail). A run that
    starts over (no ``resume``) removes ``best``, which names an earlier run's model.

    Raises
    ------
    InputError
        On every rank: naming the directory, the dataset it holds and ``--checkpoint-dir``.
    """
    error = None
    if session.comm.rank == 0:
        try:
            held = _dataset_held(directory)
            if held is not None and not _same_dataset(held, session):
                raise InputError(directory, f"holds the checkpoints of another dataset ({_describe_dataset(held)}), "
                                 f"not of --data {session.config.input.data}; give this run its own "
                                 "--checkpoint-dir")
            if not resume and os.path.lexists(os.path.join(directory, _BEST)):
                os.unlink(os.path.join(directory, _BEST))
        except InputError as exc:
            error = exc
        except OSError as exc:
            error = InputError(os.path.join(directory, _BEST), f"cannot remove ({exc.strerror})")
    fail_together(session.comm, error, directory)


def _dataset_held(directory) -> dict | None:
    """Local. The ``dataset`` record and config of the checkpoint ``directory/latest`` names
    (``{"dataset": ..., "config": ...}``); None when it names none yet."""
    if not os.path.isfile(os.path.join(directory, _LATEST)):
        return None  # nothing there yet (a pointer that is no regular file is refused where it is read)
    path = latest_checkpoint(directory)
    if not os.path.isfile(path):
        return None  # a dangling pointer: --resume refuses it, a new run replaces it
    state = load_checkpoint(path)
    return {"dataset": state.get("dataset"), "config": settings_view(state, path)}


def _same_dataset(held, session) -> bool:
    """Local. Whether the checkpoints ``held`` (:func:`_dataset_held`) are of ``session``'s dataset.

    Checkpoints older than the dataset fingerprint are compared by what the dataset decides
    of a model (node count, feature width, class count).
    """
    saved = held["dataset"]
    if isinstance(saved, dict) and isinstance(saved.get("dataset"), str):
        return saved["dataset"] == session.dataset["dataset"]
    current = session.facts.as_dict()
    return all(held["config"].get(key) == current.get(key) for key in DATASET_KEYS if key in held["config"])


def _describe_dataset(held) -> str:
    """Local. The dataset of checkpoints ``held`` in a few words: name, path, nodes."""
    saved = held["dataset"] if isinstance(held["dataset"], dict) else {}
    config = held["config"]
    name = saved.get("name") or "a dataset"
    where = saved.get("path") or config.get("data")
    nodes = saved.get("num_nodes", config.get("num_nodes"))
    return " ".join(f"{name}{f' at {where}' if where else ''}{f', {nodes} nodes' if nodes is not None else ''}"
                    .split())[:300]


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
    with open_regular(path, "--checkpoint") as fh:  # a FIFO or device would block or never end
        try:
            # tensors land on the CPU whatever device saved them: the run moves them where it computes
            state = torch.load(fh, weights_only=True, map_location="cpu")
        except Exception as exc:
            raise InputError(path, refusal(exc)) from None
    for key, kind in _STATE_TYPES.items():
        if not isinstance(state, dict) or not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise InputError(path, "malformed checkpoint (missing or mistyped entry)", "entry", key)
    if "dataset" in state and not isinstance(state["dataset"], (dict, type(None))):
        raise InputError(path, "malformed checkpoint (missing or mistyped entry)", "entry", "dataset")
    if state["epoch"] < 0:
        raise InputError(path, "malformed checkpoint", "epoch", state["epoch"])
    _refuse_non_finite(path, state)
    if current is not None:
        check_fits(path, settings_view(state, path), current, keys)
    return state


def _refuse_non_finite(path, state):
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


def on_host(value):
    """Local. ``value`` (a state dict: tensors in dicts and lists) with every tensor in CPU memory, so
    a checkpoint written by a GPU run loads anywhere."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        moved = type(value)((key, on_host(item)) for key, item in value.items())
        versions = getattr(value, "_metadata", None)  # a module state dict's versions, which loading reads
        if versions is not None:
            moved._metadata = versions
        return moved
    if isinstance(value, (list, tuple)):
        return type(value)(on_host(item) for item in value)
    return value


def _rng_state() -> dict:
    """Local. This process's torch (and its GPU's, on the GPU path), numpy, Python and dropout random
    states, as tensors and plain values."""
    numpy_state = np.random.get_state(legacy=False)
    gpu = {"cuda": torch.cuda.get_rng_state()} if torch.cuda.is_available() and torch.cuda.is_initialized() else {}
    return {**gpu, "torch": torch.get_rng_state(),
            "numpy": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
                      "pos": int(numpy_state["state"]["pos"]), "has_gauss": int(numpy_state["has_gauss"]),
                      "gauss": float(numpy_state["gauss"])},
            "python": random.getstate(), "dropout": plain(dropout_state())}


def seed_rank_streams(seed, rank):
    """Local. Seed this rank's torch, numpy, Python and dropout streams (distinct per rank)."""
    torch.manual_seed(derive_seed(seed, "torch", rank))
    np.random.seed(derive_seed(seed, "numpy", rank) % 2**32)
    random.seed(derive_seed(seed, "python", rank))
    seed_dropout(derive_seed(seed, "dropout", rank))


def set_rng_state(state: dict):
    """Local. Continue every random stream from a state saved by :func:`_rng_state` (a GPU's stream
    when both the saving run and this one had one)."""
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.set_rng_state(state["cuda"])
    saved = state["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": saved["key"].numpy().astype(np.uint32), "pos": saved["pos"]},
                         "has_gauss": saved["has_gauss"], "gauss": saved["gauss"]})
    random.setstate(state["python"])
    set_dropout_state(state["dropout"])


def save_session(session, directory, epoch, history, best=False, keep=None):
    """Collective over session.comm. Checkpoint ``session`` after ``epoch`` epochs.

    The embedding shards are written first, so ``latest`` never names a checkpoint whose
    shards are missing. With ``best`` (the epoch the run selects) ``best`` names it too, and
    the checkpoint ``best`` named before is removed unless ``keep(its epoch)`` (a checkpoint
    the run was asked for, ``--checkpoint-every``) or ``keep`` is None.
    """
    comm = session.comm
    shard = rank_shard_path(directory, epoch, comm.rank)
    shards = []  # (what, file suffix) of this rank's node-indexed state
    if session.embedding is not None:
        shards += [(session.embedding, ".emb.npz"), (session.embed_optimizer, ".opt.npz")]
    if session.control is not None:
        shards.append((session.control, ".vr.npz"))
    written, error = [], None
    try:  # every rank its own shards
        for holder, suffix in shards:
            os.makedirs(directory, exist_ok=True)
            holder.save(shard + suffix)
            written.append(shard + suffix)
    except InputError as exc:
        error = exc
    except OSError as exc:
        error = write_error(directory, exc)
    try:
        if shards:
            fail_together(comm, error, directory)  # a full disk on one rank fails every rank, at once
        rngs = comm.gather(_rng_state(), root=0)
        residuals = comm.gather(session.sync.state(), root=0)  # error feedback of --grad-compress, per rank
        error = None
        if comm.rank == 0:
            try:
                replaced = best_epoch(directory) if best else None
                save_checkpoint(directory, {"model": on_host(session.model.state_dict()),
                                            "optimizer": on_host(session.optimizer.state_dict()),
                                            "config": plain(session.config.as_dict()),
                                            "facts": session.facts.as_dict(), "ranks": comm.size,
                                            "epoch": int(epoch), "rng": rngs,
                                            "grad_residual": residuals, "history": plain(history),
                                            "dataset": plain(session.dataset)}, best=best)
                if replaced is not None and replaced != epoch and keep is not None and not keep(replaced):
                    _remove_checkpoint(directory, replaced)
            except InputError as exc:
                error = exc
        fail_together(comm, error, directory)
    except InputError:
        for path in written:  # a checkpoint that failed anywhere leaves none of its files
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise


def best_epoch(directory) -> int | None:
    """Local. The epoch of the checkpoint ``directory/best`` names; None if none (or not readable)."""
    try:
        path = latest_checkpoint(directory, _BEST)
    except InputError:
        return None
    return int(_CHECKPOINT_FILE.fullmatch(os.path.basename(path)).group(1))


def _remove_checkpoint(directory, epoch) -> None:
    """Local. Remove the files of the checkpoint taken after ``epoch`` (its ``.pt`` and every rank's
    shards), unless ``latest`` or ``best`` names it; never any other file."""
    for pointer in (_LATEST, _BEST):
        with contextlib.suppress(InputError):
            if os.path.basename(latest_checkpoint(directory, pointer)) == _checkpoint_name(epoch):
                return
    for name in os.listdir(directory):
        match = _CHECKPOINT_FILE.fullmatch(name)
        if match and int(match.group(1)) == epoch:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))


def resume_session(session, directory):
    """Collective over session.comm. Restore ``session`` from the latest checkpoint in ``directory``.

    A directory without a checkpoint (no ``latest``: the first start of a job that resumes
    whenever it is started, as a requeued SLURM job is) leaves ``session`` as it is.

    A checkpoint written at another rank count (of the same dataset) resumes too: the model, its
    optimizer, the epoch count and the history as saved, each rank's rows of the embeddings,
    their optimizer state and VR-GCN's histories assembled from the saving ranks' shards
    (:mod:`~hpcgnn.store.reshard`); the random streams start afresh from the run's seed and the
    epoch, and the gradient exchange's per-rank state (compression residuals, pending stale
    sums) starts empty. The batches then differ from an uninterrupted run's, as they must.

    Returns ``(epochs_done, history, saved_ranks)``: ``(0, [], comm.size)`` when there was
    nothing to resume.
    """
    comm = session.comm
    current = _session_view(session)
    # rank 0 decides, so that ranks never disagree on whether the run starts over
    if not comm.bcast(os.path.exists(os.path.join(directory, "latest")) if comm.rank == 0 else None, root=0):
        return 0, [], comm.size
    # the same file on every rank, so a refusal here is raised by every rank alike
    path = latest_checkpoint(directory)
    keys = _shape_keys(current["model"]) + DATASET_KEYS + ("kind",) + session.task.fit_keys
    state = load_checkpoint(path, current, keys)
    check_node_state(path, state, session.dataset, "hpcgnn train", warn=comm.rank == 0)  # alike on every rank
    saved_ranks = saved_rank_count(path, state)
    try:
        session.model.load_state_dict(state["model"])
        session.optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise InputError(path, f"checkpoint does not fit the model ({type(exc).__name__})") from None
    with shard_files(directory, state["epoch"], saved_ranks, comm) as shard_file:
        if session.embedding is not None:
            session.embedding.load(shard_file(session.embedding, ".emb.npz"))  # collective: fails on every rank alike
            error = None
            try:
                session.embed_optimizer.load(shard_file(session.embed_optimizer, ".opt.npz"))
            except InputError as exc:
                error = exc
            fail_together(comm, error, directory)  # never leave the other ranks waiting
        if session.control is not None:
            session.control.load(shard_file(session.control, ".vr.npz"))
    _resume_streams(session, path, state, saved_ranks)
    session.sync.resumed()  # collective: only once every rank has loaded its state
    return state["epoch"], state["history"], saved_ranks


def saved_rank_count(path, state) -> int:
    """Local. The rank count that wrote the checkpoint ``state`` (one line naming ``path`` if unreadable)."""
    ranks = state.get("ranks")
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1 or len(state["rng"]) != ranks:
        raise InputError(path, "malformed rank count (it must be a positive integer, one random state per rank)",
                         "ranks", ranks)
    return ranks


def _resume_streams(session, path, state, saved_ranks):
    """Collective over session.comm. Each rank's random streams and gradient-exchange state: its own
    as saved at the same rank count, afresh from the seed and the epoch at another."""
    comm, error = session.comm, None
    try:  # each rank reads its own entry, so only some ranks may find theirs malformed
        if saved_ranks == comm.size:
            set_rng_state(state["rng"][comm.rank])
            session.sync.load_state((state.get("grad_residual") or [None] * comm.size)[comm.rank])
        else:
            seed_rank_streams(derive_seed(session.config.seed, "resumed", state["epoch"]), comm.rank)
            session.sync.load_state(None)
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        error = InputError(path, f"malformed random state of rank {comm.rank} ({type(exc).__name__})")
    fail_together(comm, error, path)


@contextlib.contextmanager
def shard_files(directory, epoch, saved_ranks, comm):
    """Collective over comm (each call of the function it yields). Yields ``shard_file(holder,
    suffix)``: the path of this rank's ``suffix`` shard of the checkpoint after ``epoch``, for
    ``holder`` (what saved it) to load. At the rank count that saved it, this rank's own file;
    at another, one assembled in a temporary directory from the saving ranks' files: the rows
    this rank now owns (:func:`~hpcgnn.store.reshard.reshard`). A shard that cannot be assembled
    fails every rank together."""
    if saved_ranks == comm.size:
        yield lambda holder, suffix: rank_shard_path(directory, epoch, comm.rank) + suffix
        return
    with tempfile.TemporaryDirectory(prefix="hpcgnn-reshard-") as scratch:
        def shard_file(holder, suffix):
            out, error = os.path.join(scratch, "assembled" + suffix), None
            try:
                own = os.path.join(scratch, "own" + suffix)
                holder.save(own)  # this rank's layout now: its rows' ranges and shapes
                saved = [rank_shard_path(directory, epoch, rank) + suffix for rank in range(saved_ranks)]
                save_arrays(out, reshard(load_arrays(own), saved))
            except InputError as exc:
                error = exc
            except OSError as exc:
                error = write_error(scratch, exc)
            fail_together(comm, error, directory)
            return out

        yield shard_file
