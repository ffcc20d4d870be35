# One-command set-up: `make demo` or `make test` on a fresh machine builds .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
export OMP_NUM_THREADS ?= 1

.PHONY: install test test-fast demo bench lint clean

install: $(STAMP)

$(STAMP): setup.py pyproject.toml cython/*.pyx
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q "torch==2.13.0"
	@# A site MPI compiler on PATH wins (mpi4py is built against it); otherwise the MPICH wheel.
	if command -v mpicc >/dev/null 2>&1 && [ "$$(command -v mpicc)" != "$(CURDIR)/$(VENV)/bin/mpicc" ]; then \
	    $(PIP) install -q --no-binary mpi4py mpi4py; \
	else \
	    $(PIP) install -q mpich mpi4py; \
	fi
	$(PIP) install -q numpy scipy h5py pymetis cython tqdm pytest ruff matplotlib psutil
	$(PIP) install -q --no-build-isolation -e .
	touch $(STAMP)

test: install
	$(PY) -m pytest -q tests

demo: install
	bash jobs/demo.sh

bench: install
	$(PY) bench/partition.py

lint: install
	$(VENV)/bin/ruff check hpcgnn tests bench

clean:
	rm -rf build *.egg-info hpcgnn/*.so cython/*.cpp
