#!/usr/bin/env bash
# `make test-wheel` (and CI): hpcgnn as a user installs it, not as the editable install of
# `make install` shows it. Builds an sdist of the checkout and the wheel from that sdist (so the
# sdist holds every source the build needs), installs the wheel with its dependencies into a new
# virtualenv outside the checkout, and from a directory outside the checkout (where `import
# hpcgnn` cannot find the source tree) checks the package and runs the console command end to
# end: generate a graph, partition it in 2, train on it with 2 MPI ranks.
#
# Builds with the checkout's .venv (setuptools, Cython, numpy, without build isolation: nothing
# downloaded); the new virtualenv installs torch and MPI as `make install` does, through pip's
# cache. KEEP=1 keeps the work directory.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_PY=${BUILD_PY:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hpcgnn-wheel.XXXXXX")
VENV=$WORK/venv
START=$SECONDS
venv_job=

say() { printf 'test-wheel [%3ds] %s\n' "$((SECONDS - START))" "$*"; }
fail() { say "FAILED: $*" >&2; exit 1; }
# run a step quietly; on failure show the end of what it printed
quiet() {
    local log=$WORK/$1.log
    shift
    "$@" >"$log" 2>&1 || { tail -n 40 "$log" >&2; fail "$*"; }
}
cleanup() {
    local status=$?
    if [ -n "$venv_job" ]; then  # its pip first (a child of the background shell), then the shell
        pkill -TERM -P "$venv_job" 2>/dev/null || true
        kill "$venv_job" 2>/dev/null || true
        wait "$venv_job" 2>/dev/null || true
    fi
    if [ "${KEEP:-0}" = 1 ] || [ "$status" -ne 0 ]; then echo "test-wheel: work directory kept: $WORK" >&2
    else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# the torch requirement `make install` pins (the CPU wheel): the same one, written once
TORCH=$(sed -n 's/.*"\(torch==[^"]*\)".*/\1/p' "$ROOT/Makefile" | head -n 1)
[ -n "$TORCH" ] || fail "no \"torch==...\" requirement found in $ROOT/Makefile"

# The virtualenv with MPI, torch and the package's declared requirements (the sdist's
# Requires-Dist, extras left out); installing the wheel then finds them there and resolves nothing
# new, but checks them, and a requirement missing from setup.py shows when a module fails to import.
make_venv() {
    "$BUILD_PY" -m venv "$VENV"  # a venv of the base interpreter, not of .venv, and no system packages
    # as `make install`: a site MPI compiler on PATH wins (mpi4py built against it), else MPICH's wheel
    if command -v mpicc >/dev/null 2>&1 && [ "$(command -v mpicc)" != "$ROOT/.venv/bin/mpicc" ]; then
        "$VENV/bin/pip" install -q --no-binary mpi4py mpi4py
    else
        "$VENV/bin/pip" install -q mpich mpi4py
    fi
    local requirements
    mapfile -t requirements < <(tar -xzOf "$SDIST" "$(basename "$SDIST" .tar.gz)/PKG-INFO" \
                                | sed -n 's/^Requires-Dist: \([^;]*\)$/\1/p')
    [ "${#requirements[@]}" -gt 0 ] || { echo "no Requires-Dist in the sdist's PKG-INFO"; return 1; }
    "$VENV/bin/pip" install -q "$TORCH" "${requirements[@]}"
}

say "sdist of $ROOT"
mkdir -p "$WORK/dist" "$WORK/run" "$WORK/egg"
# egg_info in a new directory: one left in the checkout by an earlier build keeps the file list it
# had (setuptools reads its SOURCES.txt back), which would hide a file that MANIFEST.in lost
quiet sdist bash -c 'cd "$1" && "$2" setup.py egg_info --egg-base "$3/egg" sdist --dist-dir "$3/dist"' \
    _ "$ROOT" "$BUILD_PY" "$WORK"
SDIST=$(echo "$WORK"/dist/hpcgnn-*.tar.gz)
[ -f "$SDIST" ] || fail "no sdist in $WORK/dist"

# the checkout's sources (tracked or new, not ignored): all of them must reach the sdist, before
# anything compiles, and the package's ones the wheel
git -C "$ROOT" ls-files -co --exclude-standard -- 'hpcgnn/*.py' 'cython/*.pyx' 'cython/*.h' \
    >"$WORK/checkout-files.txt" 2>/dev/null \
    || (cd "$ROOT" && find hpcgnn cython -name '*.py' -o -name '*.pyx' -o -name '*.h') >"$WORK/checkout-files.txt"
say "the sdist holds every module, Cython source and header of the checkout"
"$BUILD_PY" - "$SDIST" "$ROOT" "$WORK/checkout-files.txt" <<'EOF' || fail "the sdist's contents"
import sys, tarfile
from pathlib import Path

sdist, root, listing = sys.argv[1:]
with tarfile.open(sdist) as tar:
    names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
wanted = [p for p in Path(listing).read_text().splitlines() if (Path(root) / p).is_file()]
missing = sorted(set(wanted) - names)
assert not missing, ("checkout files missing from the sdist (a directory of modules without __init__.py is no "
                     "package, and find_packages leaves it out; other files need MANIFEST.in):\n  "
                     + "\n  ".join(missing))
EOF

# the virtualenv's installs (mostly disk) run while the kernels compile (CPU)
say "new virtualenv $VENV: MPI, $TORCH, the requirements (in the background)"
quiet venv make_venv &
venv_job=$!

say "wheel from $(basename "$SDIST") (compiles the kernels)"
quiet wheel "$BUILD_PY" -m pip wheel -q --no-build-isolation --no-deps -w "$WORK/dist" "$SDIST"
WHEEL=$(echo "$WORK"/dist/hpcgnn-*.whl)
[ -f "$WHEEL" ] || fail "no wheel in $WORK/dist"

say "waiting for the virtualenv"
wait "$venv_job" || fail "the virtualenv's installs (log: $WORK/venv.log)"
venv_job=
say "install $(basename "$WHEEL") and its dependencies"
quiet install "$VENV/bin/pip" install -q "$WHEEL"

# From here on nothing of the checkout is on the path: a directory outside it, no PYTHONPATH,
# no user site; the virtualenv's bin first (mpiexec, hpcgnn).
cd "$WORK/run"
unset PYTHONPATH PYTHONHOME
export PYTHONNOUSERSITE=1 PATH="$VENV/bin:$PATH" OMP_NUM_THREADS=1

say "package: version, files, kernels, every module imports"
"$VENV/bin/python" - "$WHEEL" "$VENV" "$ROOT" "$WORK/checkout-files.txt" <<'EOF' || fail "the installed package"
import importlib, pkgutil, sys, zipfile
from pathlib import Path

wheel, venv, root, listing = sys.argv[1:]
import hpcgnn

where = Path(hpcgnn.__file__).resolve()
assert Path(venv).resolve() in where.parents, f"hpcgnn imported from {where}, not from the virtualenv"
version = Path(wheel).name.split("-")[1]
assert hpcgnn.__version__ == version, f"hpcgnn.__version__ {hpcgnn.__version__} but the wheel is {version}"

names = set(zipfile.ZipFile(wheel).namelist())
wanted = [p for p in Path(listing).read_text().splitlines() if (Path(root) / p).is_file()]
missing = sorted(p for p in wanted if p.startswith("hpcgnn/") and p.endswith(".py") and p not in names)
assert not missing, ("checkout files missing from the wheel (a directory without __init__.py is not a package, "
                     "and find_packages leaves it out):\n  " + "\n  ".join(missing))
kernels = [f"hpcgnn/_{Path(p).stem}." for p in wanted if p.endswith(".pyx")]
absent = [k + "*.so" for k in kernels if not any(n.startswith(k) and n.endswith(".so") for n in names)]
assert kernels and not absent, f"compiled kernels missing from the wheel: {absent or 'no cython/*.pyx found'}"
entry = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
assert entry and "hpcgnn = " in zipfile.ZipFile(wheel).read(entry[0]).decode(), "no 'hpcgnn' console script"

failed = []
for module in pkgutil.walk_packages(hpcgnn.__path__, "hpcgnn."):
    if module.name.rsplit(".", 1)[-1] == "__main__":
        continue  # runs the command when imported
    try:
        importlib.import_module(module.name)
    except Exception as exc:  # noqa: BLE001 - every failing module is reported, not the first
        failed.append(f"{module.name}: {type(exc).__name__}: {exc}")
assert not failed, "modules that do not import from the wheel:\n  " + "\n  ".join(failed)
print(f"hpcgnn {version} from {where.parent}: {len(names)} files, {len(kernels)} kernels, every module imports")
EOF

say "hpcgnn --version, hpcgnn train --help, python -m hpcgnn.train --help"
[ "$(hpcgnn --version)" = "hpcgnn $(basename "$WHEEL" | cut -d- -f2)" ] || fail "hpcgnn --version: $(hpcgnn --version)"
quiet help hpcgnn train --help
quiet help-module python -m hpcgnn.train --help
# --metrics became --metrics-file (the old spelling a deprecated alias): use what this version has
METRICS_FLAG=--metrics
grep -q -- '--metrics-file' "$WORK/help.log" && METRICS_FLAG=--metrics-file

say "hpcgnn generate, hpcgnn partition --parts 2"
quiet generate hpcgnn generate sbm --nodes 400 --avg-degree 6 --classes 4 --feat-dim 8 --seed 1 --out graph.npz
quiet partition hpcgnn partition graph.npz --parts 2 --symmetrize --out parts

say "mpiexec -n 2 hpcgnn train --epochs 1"
quiet train mpiexec -n 2 hpcgnn train --data parts --epochs 1 --hidden 8 --fanouts 3,3 --no-progress \
    "$METRICS_FLAG" metrics.jsonl
python - metrics.jsonl <<'EOF' || fail "the metrics file"
import json, sys

records = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
assert records and records[-1].get("final") is True, f"no final record in {sys.argv[1]}: {records[-1:]}"
print(f"final record: epochs_trained={records[-1].get('epochs_trained')}, ranks={records[-1].get('ranks')}")
EOF
say "OK: the wheel installs, imports and trains outside the checkout"
