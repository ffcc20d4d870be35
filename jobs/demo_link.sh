#!/usr/bin/env bash
# `make demo-link`: link prediction end to end on this machine.
# The demo's synthetic 100k-node graph (planted communities, so links are predictable) -> 15% of
# its edges held out (5% validation, 10% test, 100 fixed negatives each) -> 2 METIS parts written
# by 2 MPI ranks -> verified -> GraphSAGE + dot-product predictor trained with 2 MPI ranks ->
# test AUC, AP, MRR and Hits@K. Outputs go to demo/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/demo_graph.sh
INPUT=demo/graph.npz OUT=demo/link-parts PARTS=2 EXTRA="--force --edge-split 0.85,0.05,0.1" PYTHON=$PY \
    bash jobs/partition.sbatch
DATA=demo/link-parts PYTHON=$PY \
    TRAIN_ARGS="--task link --model sage --fanouts 10,25 --hidden 128 --batch-size 1000 --epochs 2 --steps-per-epoch 300 --eval-every 1 --metrics-file demo/link-metrics.jsonl --no-progress" \
    bash jobs/train.sbatch
echo "demo-link: metrics in demo/link-metrics.jsonl (chance: AUC 0.5, MRR about 0.05 with 100 negatives)"
