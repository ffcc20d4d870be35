# One-command set-up: `make demo` or `make test` on a fresh machine builds .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
export OMP_NUM_THREADS ?= 1

.PHONY: install test test-slurm test-wheel demo demo-link bench lint docs clean

install: $(STAMP)

$(STAMP): setup.py pyproject.toml cython/*.pyx cython/*.h
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q "torch==2.13.0"
	@# A site MPI compiler on PATH wins (mpi4py is built against it); otherwise the MPICH wheel.
	if command -v mpicc >/dev/null 2>&1 && [ "$$(command -v mpicc)" != "$(CURDIR)/$(VENV)/bin/mpicc" ]; then \
	    $(PIP) install -q --no-binary mpi4py mpi4py; \
	else \
	    $(PIP) install -q mpich mpi4py; \
	fi
	$(PIP) install -q numpy scipy h5py pymetis cython tqdm pytest ruff matplotlib psutil pyyaml kaminpar
	$(PIP) install -q --no-build-isolation -e .
	touch $(STAMP)

test: install
	$(PY) -m pytest -q --durations=15 tests

# jobs/*.sbatch on a real one-node SLURM cluster (../shared/tools/local_slurm.sh; needs root),
# under MpiDefault none, pmi2 and pmix: about two minutes. Not part of `make test`, which must
# not restart SLURM's daemons; CI runs both.
test-slurm: install
	HPCGNN_REQUIRE_SLURM=1 $(PY) -m pytest -q -s tests/slurm/slurm_jobs.py

# hpcgnn as a user installs it: an sdist of the checkout, the wheel built from it, installed into a
# new virtualenv outside the checkout, and from there `hpcgnn train --help`, generate, partition and
# a 2-rank training (.ci/wheel_check.sh; the kernels' compile is most of its time). CI runs it.
test-wheel: install
	BUILD_PY=$(CURDIR)/$(PY) bash .ci/wheel_check.sh

demo: install
	bash jobs/demo.sh

# link prediction on the demo's graph: held-out edges, GraphSAGE + dot predictor, AUC/AP/MRR/Hits@K
demo-link: install
	bash jobs/demo_link.sh

# The benchmarks behind the README's tables; BENCH_ARGS=--dgl adds DGL 2.1 side by side
# (its own virtualenv, built once with: $(PY) bench/partition.py --dgl --dgl-setup).
BENCH_ARGS ?=
bench: install
	$(PY) bench/partition.py $(BENCH_ARGS)
	$(PY) bench/gather.py
	$(PY) bench/memory.py $(BENCH_ARGS)
	$(PY) bench/sample.py $(BENCH_ARGS)
	$(PY) bench/train.py $(BENCH_ARGS)

# The documentation site (MkDocs + Material + mkdocstrings) into site/, in strict mode: a broken
# link or anchor, a page missing from the nav, or a docstring the API pages cannot parse fails
# the build. The docs tools go into .venv once; the CLI pages run `hpcgnn <cmd> --help`.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(PIP) install -q "mkdocs==1.6.1" "mkdocs-material==9.6.23" "mkdocstrings-python==1.18.2"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(VENV)/bin/mkdocs build --strict --clean --site-dir site

lint: install
	$(VENV)/bin/ruff check hpcgnn tests bench

clean:
	rm -rf build *.egg-info hpcgnn/*.so cython/*.cpp
