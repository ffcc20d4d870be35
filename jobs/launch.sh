# Shared by jobs/partition.sbatch and jobs/train.sbatch (sourced, once they have found the
# project): the interpreter, the MPI launcher, and running the job step.
#
# Variables read here:
#   PYTHON      interpreter with hpcgnn installed (default: <project>/.venv/bin/python, else
#               python3 on PATH if it imports hpcgnn)
#   MPI_LAUNCH  inside SLURM: auto (default), pmi2, pmix (srun --mpi=...) or mpiexec
#   MPIEXEC     the mpiexec to use (default: the one next to PYTHON, else the one on PATH)

die() {
    echo "hpcgnn job: error: $*" >&2
    exit 2
}

if [ -z "${PYTHON:-}" ]; then
    PYTHON=$HPCGNN_HOME/.venv/bin/python
    [ -x "$PYTHON" ] || PYTHON=$(command -v python3 || echo "$PYTHON")
fi
"$PYTHON" -c "import hpcgnn" 2>/dev/null ||
    die "$PYTHON cannot import hpcgnn (run 'make install' in $HPCGNN_HOME, or set PYTHON)"
MPIEXEC=${MPIEXEC:-$(dirname "$PYTHON")/mpiexec}
[ -x "$MPIEXEC" ] || MPIEXEC=$(command -v mpiexec || true)

# The number of parts of dataset $1 (its meta.json, checked as every reader checks it).
dataset_parts() {
    "$PYTHON" - "$1" <<'PY'
import sys

from hpcgnn.format.ondisk import read_meta
from hpcgnn.runtime.errors import InputError

try:
    print(read_meta(sys.argv[1])["num_parts"])
except InputError as exc:
    sys.exit(f"hpcgnn job: error: {exc}")
PY
}

# PMI flavours to try with srun, best first for the MPI library mpi4py loads: MPICH and its
# derivatives speak PMI-2, Open MPI speaks PMIx.
_preferred_plugins() {
    local library
    library=$("$PYTHON" -c "import mpi4py; mpi4py.rc.initialize = False
from mpi4py import MPI; print(MPI.Get_library_version())" 2>/dev/null | head -n 1)
    case "$library" in
        "Open MPI"*) echo pmix pmi2 ;;
        *) echo pmi2 pmix ;;
    esac
}

# Whether `srun --mpi=$1` starts $2 tasks as one MPI world (a plugin can be listed and still
# fail to load, or speak a PMI this MPI library does not).
_one_world_with() {
    timeout 120 srun --mpi="$1" -n "$2" --kill-on-bad-exit=1 "$PYTHON" -c \
        "from mpi4py import MPI; import sys; sys.exit(MPI.COMM_WORLD.size != $2)" >/dev/null 2>&1
}

# Sets LAUNCH: the command prefix that starts $1 ranks as one MPI world. Inside SLURM srun does,
# with the first PMI plugin of `srun --mpi=list` that works with this MPI; otherwise (and
# outside SLURM) the MPI library's own mpiexec, which under SLURM starts its proxies with srun.
# The tasks SLURM allocated to this start of the job: the sum of SLURM_TASKS_PER_NODE ("2(x3),1"
# is 7). SLURM_NTASKS comes from the submission and keeps its count when a requeued job is given
# fewer tasks; empty outside SLURM.
job_tasks() {
    local entry count times total=0 entries
    [ -n "${SLURM_TASKS_PER_NODE:-}" ] || { echo "${SLURM_NTASKS:-}"; return; }
    IFS=, read -ra entries <<<"$SLURM_TASKS_PER_NODE"
    for entry in "${entries[@]}"; do
        count=${entry%%(*}
        times=1
        if [[ $entry == *"(x"* ]]; then times=${entry#*(x}; times=${times%)}; fi
        total=$((total + count * times))
    done
    echo "$total"
}

choose_launcher() {
    local ranks=$1 how=${MPI_LAUNCH:-auto} listed plugin
    if [ -z "${SLURM_JOB_ID:-}" ] || ! command -v srun >/dev/null; then
        how=mpiexec
    elif [ "$how" = auto ]; then
        how=mpiexec
        listed=$(srun --mpi=list 2>&1 || true)
        for plugin in $(_preferred_plugins); do
            grep -Eq "^[[:space:]]*$plugin[[:space:]]*\$" <<<"$listed" || continue
            if [ "$ranks" -eq 1 ] || _one_world_with "$plugin" 2; then
                how=$plugin
                break
            fi
            echo "hpcgnn job: srun --mpi=$plugin does not start one MPI world here; trying the next launcher" >&2
        done
    fi
    case "$how" in
        mpiexec)
            [ -n "$MPIEXEC" ] || die "no mpiexec next to $PYTHON or on PATH (set MPIEXEC)"
            LAUNCH=("$MPIEXEC" -n "$ranks")
            # Under SLURM, MPICH's mpiexec starts its proxies with srun: they need no PMI plugin
            # of SLURM's (a MpiDefault whose plugin cannot load would make that srun fail).
            [ -n "${SLURM_JOB_ID:-}" ] && LAUNCH=(env SLURM_MPI_TYPE=none "${LAUNCH[@]}") ;;
        pmi2 | pmix)
            LAUNCH=(srun --mpi="$how" -n "$ranks" --kill-on-bad-exit=1) ;;
        *) die "MPI_LAUNCH must be auto, pmi2, pmix or mpiexec (not '$how')" ;;
    esac
    echo "hpcgnn job: $ranks ranks, launched with: ${LAUNCH[*]}" >&2
}

# Run the job step "$@". Inside SLURM it runs in the background, so that the batch shell acts on
# a signal (a trap) at once instead of after the step ends; the step's exit status is returned.
run_step() {
    if [ -z "${SLURM_JOB_ID:-}" ]; then
        "$@"
        return
    fi
    local pid status
    "$@" &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        wait "$pid" || true  # returns early when a trap ran; the step goes on
    done
    wait "$pid" && status=0 || status=$?
    return "$status"
}
