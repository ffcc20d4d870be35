#!/usr/bin/env bash
# `make demo`: the embedded default end to end on this machine.
# A synthetic 100k-node graph with learnable communities -> 2 METIS parts written by 2 MPI
# ranks -> verified -> GraphSAGE trained with 2 MPI ranks (one per part) -> test accuracy.
# Outputs go to demo/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/demo_graph.sh
INPUT=demo/graph.npz OUT=demo/parts PARTS=2 EXTRA=--force PYTHON=$PY bash jobs/partition.sbatch
DATA=demo/parts PYTHON=$PY \
    TRAIN_ARGS="--model sage --fanouts 10,25 --hidden 256 --epochs 5 --eval-every 5 --metrics-file demo/metrics.jsonl --plot demo/plots --no-progress" \
    bash jobs/train.sbatch
echo "demo: metrics in demo/metrics.jsonl, curves in demo/plots/ (chance is 10%)"
