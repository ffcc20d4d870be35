# Sourced by jobs/demo.sh and jobs/demo_link.sh (from the repository root): the project's
# Python, one thread per rank, and the demo's graph, generated once into demo/graph.npz: a
# synthetic 100k-node, 2M-edge RMAT graph with 64-d features and 10 planted communities.
PY=.venv/bin/python
export OMP_NUM_THREADS=1
mkdir -p demo
if [ ! -f demo/graph.npz ]; then
    $PY -m hpcgnn.generate rmat --nodes 100000 --edges 2000000 --feat-dim 64 --classes 10 \
        --homophily 0.7 --seed 0 --out demo/graph.npz
fi
