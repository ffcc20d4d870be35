"""The training loop: synchronous data-parallel mini-batch training, one MPI rank per part.

Every rank runs :func:`run` top to bottom on its own partition: sample mini-batches of its
training nodes, forward and backward on blocks, one Allreduce of a flat gradient buffer,
optimizer step, identical parameters everywhere. Validation and test accuracy come from a
full-neighbourhood distributed inference, not a sampled estimate.
"""
from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np
import torch

from hpcgnn.nn.aggregate import precision_note
from hpcgnn.runtime.collectives import allreduce_
from hpcgnn.runtime.comm import mpi
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.watchdog import Watchdog, beat, waiting_in
from hpcgnn.sampling import sampler_spec
from hpcgnn.tasks.collapse import CollapseCheck
from hpcgnn.tasks.inference import input_rows, model_inputs
from hpcgnn.tasks.metrics import metric_key
from hpcgnn.training.checkpoint import prepare_directory, resume_session, save_session
from hpcgnn.training.config import TrainConfig
from hpcgnn.training.device import cuda_memory_peak_mib
from hpcgnn.training.early_stop import EarlyStopping, selected, selection_key
from hpcgnn.training.lock import checkpoint_lock
from hpcgnn.training.plots import plot_history
from hpcgnn.training.refit import refit_line, run_refit
from hpcgnn.training.reporting import Reporter, epoch_record, final_record, header_record, progress
from hpcgnn.training.schedule import EvalSchedule, every
from hpcgnn.training.session import Session, open_session


class StepResult(NamedTuple):
    """Local. What one step adds to the epoch's sums, and where its time went."""

    loss_sum: float
    correct: float
    seen: int
    compute_s: float
    allreduce_s: float


def train_step(session: Session, batch, scale=1.0, first=True, last=True) -> StepResult:
    """Collective over session.comm (when ``last``). Forward, backward, gradient Allreduce (mean)
    and optimizer steps.

    With gradient accumulation (``--accumulate K``) a call is one micro-batch of a group: the
    group's first zeroes the gradients, each scales its loss by ``scale`` (one over the group's
    size, so the group's gradient is the mean over its micro-batches, as one batch of all their
    seeds), and only the last reduces the gradients over the ranks and steps the optimizers.
    """
    t0 = time.perf_counter()
    if first:
        session.grads.zero()
    x = model_inputs(batch.feat, session.embedding, batch.input_gids, session.device)
    if session.control is not None:
        session.control.fill(batch)  # VR-GCN: the history terms, as the last step left them
    out = session.model(batch.blocks, x, batch.input_degree)
    if session.control is not None:
        session.control.update(batch, session.model.hidden)  # collective: every rank has a batch each step
    loss, correct, seen = session.loss.batch(out, batch)
    session.sync.arm(last)
    scale *= batch.loss_weight  # --step-balance: the mean gradient over all the ranks' seeds
    (loss * scale if scale != 1.0 else loss).backward()
    finish_queued(session.device)  # a GPU runs the step behind the host: its time is the compute's
    t1 = time.perf_counter()
    correct = float(correct)  # read after backward is queued: on a GPU this waits for the step
    if not last:
        return StepResult(float(loss.detach()) * seen, correct, seen, t1 - t0, 0.0)
    waiting_in("the gradient Allreduce")
    reduced = session.sync.finish()  # False: no gradient to apply yet (--staleness's first steps)
    t2 = time.perf_counter()
    exchange_s = t2 - t1
    if reduced:
        session.optimizer.step()
        t3 = time.perf_counter()
        session.sync.stepped()  # local SGD: every H steps the ranks average; async: the change goes out
        exchange_s += time.perf_counter() - t3
    if session.embed_optimizer is not None:
        session.embed_optimizer.step()  # collective: every rank takes the same number of steps
    return StepResult(float(loss.detach()) * seen, correct, seen, time.perf_counter() - t0 - exchange_s, exchange_s)


def finish_queued(device):
    """Local. Wait until ``device`` has run the work queued on it (nothing to wait for on the CPU).

    The wait blocks on an event rather than spinning, so the rank's prefetch thread gets the core
    while the GPU computes."""
    if device.type == "cuda":
        done = torch.cuda.Event(blocking=True)
        done.record(torch.cuda.current_stream(device))
        done.synchronize()


def micro_batch_role(i, num_batches, accumulate) -> tuple[float, bool, bool]:
    """Local. ``(loss scale, first, last)`` of batch ``i`` of ``num_batches`` in groups of
    ``accumulate``; the last group may be shorter. Every rank has the same batch count, so
    every rank reduces and steps at the same batches."""
    start = i - i % accumulate
    size = min(accumulate, num_batches - start)
    return 1.0 / size, i == start, i == start + size - 1


def train_epoch(session: Session, epoch, show_progress=False) -> dict:
    """Collective over session.comm. One pass over the loader; the epoch's record
    (loss, training accuracy, epoch time, seconds per phase)."""
    session.model.train()
    totals = np.zeros(3)
    compute_s = allreduce_s = 0.0
    reset_memory_peak(session.device)
    t_epoch = time.perf_counter()
    accumulate = session.config.optimizer.accumulate
    beat(f"epoch {epoch + 1} step 1 (loading the batch)")
    batches = session.stage(session.loader)  # on a GPU: each batch copied there a step ahead
    step_start = t_epoch
    for i, batch in enumerate(progress(batches, len(session.loader), epoch, show_progress)):
        beat(f"epoch {epoch + 1} step {i + 1}")
        step = train_step(session, batch, *micro_batch_role(i, len(session.loader), accumulate))
        if session.balancer is not None:  # this step's time with its loading, less the exchange
            session.balancer.observe(time.perf_counter() - step_start - step.allreduce_s, step.seen)
            step_start = time.perf_counter()
        if not math.isfinite(step.loss_sum):
            raise InputError(None, f"training loss is {step.loss_sum / max(step.seen, 1)} at epoch {epoch + 1} "
                             f"step {i + 1} on rank {session.comm.rank}: diverged (lower --lr) or non-finite "
                             "input (check the dataset with 'hpcgnn inspect --verify')")
        beat(f"epoch {epoch + 1} step {i + 2} (loading the batch)")
        totals += (step.loss_sum, step.correct, step.seen)
        compute_s += step.compute_s
        allreduce_s += step.allreduce_s
    extra_steps = 0
    if session.sync.steps_alone:  # async: train on, not idle, until every rank has ended its epoch
        extra_steps, extra = step_until_all_done(session, epoch)
        totals += extra[:3]
        compute_s += extra[3]
        allreduce_s += extra[4]
    session.sync.settle()  # one model on every rank before evaluation and checkpoints
    average_buffers(session.model, session.comm)
    epoch_time = time.perf_counter() - t_epoch
    stats = session.loader.stats
    phases = {"sample": stats.sample_s, "gather": stats.gather_s, "copy": session.stage.copy_s, "compute": compute_s,
              "allreduce": allreduce_s, "wait": stats.wait_s}
    record = epoch_record(session.comm, epoch + 1, totals, epoch_time, phases, stats, steps=len(session.loader))
    record["grad_bytes_per_step"] = session.sync.bytes_per_step
    if session.sync.steps_alone:
        record["extra_steps"] = session.comm.allgather(extra_steps)
    if session.balancer is not None:  # the batch sizes the next steps take
        record["batch_sizes"] = session.balancer.settle()
    record.update(session.sync.observed())  # the exchange's own figures: staleness, lags
    if session.device.type == "cuda":
        record["gpu_memory_peak_MiB"] = session.comm.allreduce(cuda_memory_peak_mib(session.device), op=mpi().MAX)
    return record


def step_until_all_done(session: Session, epoch) -> tuple[int, np.ndarray]:
    """Collective over session.comm (a non-blocking barrier). Train on batches beyond the epoch's
    own until every rank has reached the barrier, checking it between steps; returns the steps
    taken and their sums ``[loss, correct, seen, compute s, exchange s]``.

    Asynchronous training has no collective per step, so equal step counts are not what keeps
    it from hanging: the barrier is, and a rank that finished its epoch first would otherwise
    idle there. The barrier completes once the slowest rank arrives; a faster one notices after
    its current step."""
    everyone = session.comm.Ibarrier()
    sums, steps = np.zeros(5), 0
    batches = session.loader.extra(epoch)
    staged_s = session.stage.copy_s  # staging these batches starts its count anew: keep the epoch's
    try:
        staged = iter(session.stage(batches))
        while not everyone.Test():
            batch = next(staged, None)
            if batch is None:  # a whole extra pass: wait
                break
            beat(f"epoch {epoch + 1} extra step {steps + 1} (waiting for the other ranks)")
            step = train_step(session, batch)
            sums += (step.loss_sum, step.correct, step.seen, step.compute_s, step.allreduce_s)
            steps += 1
    finally:
        batches.close()
        session.stage.copy_s += staged_s
    waiting_in("the epoch's end")
    everyone.Wait()
    return steps, sums


def reset_memory_peak(device):
    """Local. Start measuring ``device``'s memory peak anew (a GPU's; nothing on the CPU)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def average_buffers(model, comm):
    """Collective over comm. Replace every floating-point buffer of ``model`` (BatchNorm's running
    statistics) by its mean over the ranks.

    Each rank's running statistics follow its own batches; without this, ranks would evaluate
    and checkpoint different models. Parameters need nothing: the gradient Allreduce keeps them
    identical.
    """
    buffers = [b for b in model.buffers() if b.is_floating_point()]
    if not buffers or comm.size == 1:
        return
    flat = torch.cat([b.detach().reshape(-1) for b in buffers]).to(torch.float64).cpu()  # MPI reads host memory
    allreduce_(flat.numpy(), comm, average=True)
    offset = 0
    for b in buffers:
        b.copy_(flat[offset:offset + b.numel()].view_as(b))
        offset += b.numel()


def evaluate_session(session: Session) -> dict:
    """Collective over session.comm. The task's full-neighbourhood figures on the validation and test
    sets (node classification: accuracy, loss and the run's metric on every split; link
    prediction: every link metric), the collapse check's ``constant_share``, and their time;
    ``rows``: the output rows of this rank's nodes where the task gives them (not a record field)."""
    t0 = time.perf_counter()
    figures = session.task.evaluate(session.model, session.graph, session.config,
                                    session.config.evaluation.eval_batch_size, input_rows(session.graph,
                                                                                          session.embedding))
    return dict(figures, eval_time_s=time.perf_counter() - t0)


def start_line(session) -> str:
    """Local. The console line a run starts with: data, ranks, model, sampler, task, threads."""
    config, graph, model = session.config, session.graph, session.config.model
    spec = sampler_spec(config.sampler.name)
    describe = getattr(getattr(session.loader, "sampler", None), "describe", None)
    if describe is not None:  # a subgraph sampler sizes its batches from the graph: say how
        sampling = describe()
    else:
        sampling = spec.describe(config.sampler.options) if spec.describe else f"sampler {spec.name}"
    parts = graph.meta.get("num_parts", session.comm.size)
    ranks = f"{session.comm.size} ranks" + (f" on {parts} parts" if parts != session.comm.size else "")
    return (f"hpcgnn train: {graph.name} {graph.num_nodes:,} nodes {graph.num_edges:,} edges, {ranks}, "
            f"{model.model} {model.layers}x{model.hidden}, {sampling}, {len(session.loader)} steps/epoch, "
            f"{session.task.describe(config, session.facts)}, {precision_note(model.precision)}, "
            f"prefetch {session.decided['prefetch']}, {session.decided['threads']} torch threads per rank"
            + (f", {session.placement.note}" if session.device.type != "cpu" else "")
            + (session.stage.describe() if session.stage is not None else ""))


def train_epochs(session: Session, first_epoch, history, report, stopper, votes=None):
    """Collective over session.comm. The epochs from ``first_epoch`` on: train, evaluate when the
    schedule says, report, stop early, check for a collapsed model and checkpoint; ``history``
    gains each epoch's record. ``votes`` (``--refit-folds``' ensemble) keeps each evaluation's
    output rows."""
    config, comm = session.config, session.comm
    output, epochs = config.output, config.optimizer.epochs
    schedule = EvalSchedule(config.evaluation.eval_every, epochs, first_epoch)
    collapse = CollapseCheck(config.optimizer.lr, session.task.scored)
    best_only = set()  # epochs this run checkpointed only because they were the selected model
    for epoch in range(first_epoch, epochs):
        if stopper.stopped:
            break
        record = train_epoch(session, epoch, show_progress=comm.rank == 0 and not output.no_progress)
        if schedule.due(epoch):
            figures = evaluate_session(session)
            rows = figures.pop("rows", None)
            if votes is not None:
                votes.keep(epoch + 1, rows, session)
            record.update(figures)
            schedule.measured(comm, epoch, record["epoch_time_s"], record["eval_time_s"])
        history.append(record)
        report.epoch(record)
        stop = stopper.update(record)  # the same reduced values on every rank: the same decision
        collapse.update(record, epoch + 1, last=stop or epoch + 1 == epochs)  # a dead model ends the run
        selected_now = stopper.best_epoch == epoch + 1  # the model the final line will report, kept as best
        asked = every(output.checkpoint_every, epoch, epochs) or stop
        if output.checkpoint_dir and (asked or selected_now):
            if not asked:
                best_only.add(epoch + 1)  # written only as best: removed once a later epoch is better
            save_session(session, output.checkpoint_dir, epoch + 1, history, best=selected_now,
                         keep=lambda done: done not in best_only)
        if stop:
            report.say(stopper.reason())


def run(config: TrainConfig, comm):
    """Collective over comm. Train as ``config`` says; return ``(model, history)`` (history: per-epoch records).

    A run given a checkpoint directory checkpoints every ``--checkpoint-every`` epochs and after
    the last one, and holds the directory's lock from start to end (:mod:`hpcgnn.training.lock`),
    so two runs never overwrite each other's checkpoints. With ``--refit-folds`` the epoch count
    is chosen by cross-validation first (:mod:`hpcgnn.training.refit`).
    """
    with checkpoint_lock(config.output.checkpoint_dir, comm, force=config.output.force):
        if config.evaluation.refit_folds:
            return run_refit(config, comm, _train)
        model, history, _ = _train(config, comm)
        return model, history


def _train(config: TrainConfig, comm, fold=None, refit=None, votes=None):
    """Collective over comm. One run of :func:`run`, once the checkpoint directory is locked;
    returns ``(model, history, the record key it selects on)``. ``fold``: the fold a run of
    ``--refit-folds`` validates on (that run prints nothing); ``refit``: what the final record
    of its last run adds; ``votes``: its ensemble's side (:mod:`hpcgnn.training.refit`)."""
    started = time.perf_counter()
    output, epochs = config.output, config.optimizer.epochs
    cross_validating = bool(config.evaluation.refit_folds) and fold is not None
    session = open_session(config, comm, fold=fold)
    config = session.config  # with what the dataset decided (the metric)
    if votes is not None:  # a refusal comes before any training
        votes.check(session)
    first_epoch, history, saved_ranks = (resume_session(session, output.checkpoint_dir) if output.resume
                                         else (0, [], comm.size))
    if output.checkpoint_dir:  # one dataset per directory; a new run's best is yet to come
        prepare_directory(session, output.checkpoint_dir, output.resume)
    session.loader.epoch = first_epoch
    report = Reporter(None if cross_validating else comm.rank, output.metrics_file, append=first_epoch > 0)
    report.header(header_record(session, first_epoch))
    report.say(start_line(session))
    if output.resume:  # a requeued job says which of its starts this is
        ranks = f", {saved_ranks} ranks -> {comm.size} ranks" if saved_ranks != comm.size else ""
        report.say(f"resumed from epoch {first_epoch} ({output.checkpoint_dir}{ranks})" if first_epoch
                   else f"nothing to resume in {output.checkpoint_dir}: starting at epoch 1")
    select = selection_key(config.evaluation.select, metric_key(config.evaluation.metric))
    stopper = EarlyStopping(select, config.evaluation.early_stop, history)
    # closed on every rank at the end; on an error only this rank's clock stops (a caught error
    # must not leave a watchdog that aborts the process later)
    with Watchdog(comm, config.runtime.watchdog_s, "hpcgnn train"):
        train_epochs(session, first_epoch, history, report, stopper, votes)
    final = final_record(comm, history, epochs, run_time_s=time.perf_counter() - started,
                         metric=config.evaluation.metric)
    final = dict(final, **selected(history, select), stopped_early=stopper.stopped,
                 **({"refit": refit} if refit else {}))
    if votes is not None:
        final = votes.final(session, final)
    report.final(final)
    if refit:
        report.say(refit_line(final["refit"]))
    if output.plot and comm.rank == 0:
        plot_history(history, output.plot)
    session.close()
    return session.model, history, select
