"""How a process ends on failure: one line for bad input, the whole MPI job for any error.

A rank that fails alone must never leave the others waiting in a collective, so every exit
path here calls ``MPI_Abort`` when the world has more than one rank. Every entry point
(``partition``, ``train``, ``evaluate``, ``inspect``, ``generate``) is wrapped by
:func:`entry_point`, which turns

- an :class:`~hpcgnn.runtime.errors.InputError` into ``prog: error: <file>: <problem>``, exit 2;
- an OS error (read-only or full output, missing file) into one line naming the file, exit 2;
- SIGTERM (SLURM's cancel and time limit), SIGINT and SIGHUP (a closed terminal) into the
  removal of every unfinished temporary file or directory, one line, exit 128 + the signal
  number;
- any other exception into the traceback, prefixed with the rank, exit 1.

Every one of these paths removes this rank's unfinished temporaries before it ends the job:
``MPI_Abort`` kills the other ranks with SIGKILL, so they cannot remove theirs. A temporary
directory that several ranks write into is therefore tracked by each of them
(:func:`hpcgnn.runtime.files.track_temporary`), so whichever rank ends the job removes it.
"""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
import traceback

from hpcgnn.runtime.comm import ENDING_SIGNALS
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.failure_report import abort_job, end_job
from hpcgnn.runtime.files import os_error_in, os_reason, remove_temporaries

_hook_installed = False
_as_program = False
_unraisable_noted = False
_signals_installed = False
_collective_entry = False
# set by the signal thread when a signal is ending the process: the main thread, which keeps
# running meanwhile, must neither finish the command (exit 0) nor report a failure of its own
_terminating = threading.Event()
# How long ranks that get a signal together (SLURM signals every task) wait for each other to
# finish removing their temporaries before the job ends.
_PEER_CLEANUP_S = 1.0


def _world():
    """``MPI.COMM_WORLD`` if this process initialised MPI (never initialises it), else None."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD
    return None


def _abort_world(status):
    """End the whole MPI job when MPI runs with several ranks (returns otherwise)."""
    world = _world()
    if world is not None and world.size > 1:
        abort_job(world, status)


def _rank_prefix() -> str:
    world = _world()
    return f"[rank {world.rank}/{world.size}] " if world is not None and world.size > 1 else ""


def _launched_world():
    """``MPI.COMM_WORLD`` when this process is one rank of several started by an MPI launcher,
    initialising MPI if the failure came before the entry point did (a bad flag): its peers
    reach ``MPI_Init`` too, failing the same way or going on to their own work."""
    world = _world()
    if world is None and _collective_entry:
        from hpcgnn.runtime.launch import launcher_tasks  # deferred: the MPI path only

        launched = launcher_tasks()
        if launched is not None and launched[1] > 1:
            from hpcgnn.runtime.comm import world as init_world  # deferred: MPI only when launched

            world = init_world()
    return world


def fail(prog, message, status=2):
    """Local. Print ``prog: error: message`` and end the process (the whole MPI job if any).

    In a job of several ranks the line is printed once for the job when every rank fails with
    it (:func:`hpcgnn.runtime.failure_report.end_job`).
    """
    _await_termination()
    line = f"{prog}: error: {message}"
    remove_temporaries()
    world = _launched_world()
    if world is not None and world.size > 1:
        try:
            end_job(world, line, status)
        except Exception:  # noqa: BLE001 - the report must not fail: fall back to this rank's line
            pass
    print(line, file=sys.stderr, flush=True)
    _abort_world(status)
    if _as_program:
        sys.stdout.flush()
        os._exit(status)
    sys.exit(status)


def crash(exc_type, exc, tb):
    """Local. Print a traceback prefixed with the rank, then end the whole MPI job (status 1)."""
    _await_termination()
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    remove_temporaries()
    prefix = _rank_prefix()
    sys.stderr.write("".join(prefix + line + "\n" for line in text.rstrip().splitlines()))
    sys.stderr.flush()
    _abort_world(1)
    os._exit(1)


def _os_error_line(exc: OSError) -> str:
    """Local. ``<file>: <reason>`` for an OS error (``/data/out: Read-only file system``)."""
    names = [str(n) for n in (exc.filename, exc.filename2) if n is not None]
    return ": ".join(names + [os_reason(exc)]) if names else str(exc)


def entry_point(prog, collective=True):
    """Local. Decorate a subcommand's ``main`` so that every failure ends the whole job promptly.

    See the module docstring for what each kind of failure prints and its exit status.
    ``collective``: the command runs as one MPI job when launched with several ranks, so a
    failure before it initialised MPI still joins its peers to report once for the job.
    """
    def wrap(fn):
        @functools.wraps(fn)
        def run(argv=None):
            global _collective_entry
            _collective_entry = collective
            handle_termination(prog)
            install_abort_hook(main_thread=False)  # the main thread's errors are handled right here
            hooks = sys.excepthook, sys.unraisablehook
            sys.excepthook = functools.partial(_note_unraisable, prog)
            sys.unraisablehook = lambda info: _note_unraisable(prog, info.exc_type, info.exc_value, None)
            try:
                return fn(argv)
            except InputError as exc:
                fail(prog, str(exc))
            except KeyboardInterrupt:
                remove_temporaries()
                fail(prog, "interrupted", status=130)
            except Exception as exc:
                cause = os_error_in(exc)
                if isinstance(cause, BrokenPipeError):
                    _reader_gone()
                if cause is None:  # a bug: its traceback, and the whole job ends
                    world = _world()
                    if not _as_program and (world is None or world.size == 1):
                        raise  # called in-process by one process: the caller sees the exception
                    crash(type(exc), exc, exc.__traceback__)
                fail(prog, _os_error_line(cause))
            finally:
                sys.excepthook, sys.unraisablehook = hooks
        return run
    return wrap


def _note_unraisable(prog, exc_type, exc, tb):
    """``sys.excepthook`` inside an entry point, which handles its own errors: what still reaches
    it is an error a compiled extension could not raise (h5py reports a failed close of a file
    whose write failed this way, just before raising the write's own error), so one line."""
    global _unraisable_noted
    if _unraisable_noted:  # one failure of an extension tends to come as many; the first says it
        return
    _unraisable_noted = True
    text = " ".join(str(exc).split())
    print(f"{prog}: note: ignored {exc_type.__name__}: {text[:160]}", file=sys.stderr, flush=True)


def run_program(main):
    """Local. Run an entry point's ``main`` as this process's program (``python -m``, the
    ``hpcgnn`` command) and exit with its status.

    A failure then ends the process at once, without the interpreter's teardown: after a
    failed HDF5 write (a full disk), h5py can crash while freeing the broken file's objects,
    which would turn a clean one-line error into a segmentation fault. Called in-process (tests,
    notebooks), ``main`` raises ``SystemExit`` instead.
    """
    global _as_program
    _as_program = True
    try:
        status = main()
        sys.stdout.flush()  # here, so a reader that left early is noticed below
    except BrokenPipeError:
        _reader_gone()
    _await_termination()
    sys.exit(status)


def _await_termination():
    """When a signal is ending the process, leave it to the signal thread (which ends it): the
    main thread that finished or failed meanwhile must not exit 0 or report its own line."""
    if _terminating.is_set() and threading.current_thread() is threading.main_thread():
        while True:
            time.sleep(1)


def _reader_gone():
    """Local. End quietly when the reader of stdout went away (``hpcgnn inspect ... | head``).

    As a program killed by SIGPIPE would (status 141, which shells do not report), without
    a traceback and without the interpreter's final flush failing again on the closed pipe.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    os._exit(128 + signal.SIGPIPE)


def install_abort_hook(comm=None, main_thread=True):
    """Local. Make any unhandled exception, on any thread, end the whole MPI job.

    The failing rank prints its traceback prefixed with its rank, then calls ``Abort`` so
    the other ranks do not wait forever in a collective. ``comm`` is accepted for callers that
    hold one; the job aborted is always the world's. ``main_thread=False`` leaves
    ``sys.excepthook`` alone (threads only), for callers that catch the main thread's errors.
    """
    global _hook_installed
    if _hook_installed:
        return
    if main_thread:
        sys.excepthook = crash
    threading.excepthook = lambda args: crash(args.exc_type, args.exc_value, args.exc_traceback)
    _hook_installed = True


def handle_termination(prog):
    """Local. On SIGTERM, SIGINT or SIGHUP: remove unfinished temporaries, print one line, end the job.

    The work is done by a thread woken through :func:`signal.set_wakeup_fd`, so it happens
    even while the main thread waits inside an MPI call (mpi4py releases the GIL there). A
    main thread holding the GIL in a long compiled call (METIS) delays it until that returns.
    Only the main thread can install signal handlers; elsewhere this does nothing.
    """
    global _signals_installed
    if _signals_installed or threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for signum in ENDING_SIGNALS:
        signal.signal(signum, _note_signal)
    # a file-size limit should fail the write (EFBIG, reported as one line), not kill the rank
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def watch():
        while True:
            data = os.read(read_fd, 1)
            if data and data[0] in ENDING_SIGNALS:
                _terminate(prog, data[0])

    threading.Thread(target=watch, name="hpcgnn-signals", daemon=True).start()
    _signals_installed = True


def _note_signal(signum, frame):
    """Python-level handler: the watcher thread acts on the byte the C handler wrote."""


def _terminate(prog, signum):
    _terminating.set()
    removed = remove_temporaries(final=True)
    what = f"; removed {len(removed)} unfinished output(s)" if removed else ""
    line = f"{prog}: error: stopped by {signal.Signals(signum).name}{what}"
    world = _world()
    if world is not None and world.size > 1:
        # ranks signalled together (SLURM signals every task) report once, after all cleaned up
        try:
            end_job(world, line, 128 + signum, grace_s=_PEER_CLEANUP_S)
        except Exception:  # noqa: BLE001 - as in fail()
            pass
    print(line, file=sys.stderr, flush=True)
    _abort_world(128 + signum)
    os._exit(128 + signum)
