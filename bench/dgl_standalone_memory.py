"""Run inside DGL 2.1's virtualenv: load a 1-part DGL partition as dgl.distributed.DistGraph in
standalone mode (one process is server and trainer), touch it, print memory as JSON.

    $DGLENV/bin/python bench/dgl_standalone_memory.py --part-config parts/g.json --name g
"""
import argparse
import json
import os
import tempfile

import numpy as np


def memory():
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS", "VmHWM")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    with open("/proc/self/smaps_rollup") as fh:
        for line in fh:
            if line.startswith("Pss:"):
                out["Pss"] = int(line.split()[1]) / 1024
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--part-config", required=True)
    parser.add_argument("--name", required=True)
    args = parser.parse_args()
    import dgl
    import torch

    torch.set_num_threads(1)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write("127.0.0.1 30050\n")
    dgl.distributed.initialize(fh.name)
    graph = dgl.distributed.DistGraph(args.name, part_config=args.part_config)
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, graph.num_nodes(), 100_000))
    feat = graph.ndata["feat"][ids]
    sampled = dgl.distributed.sample_neighbors(graph, ids[:1000], 10)
    print("RESULT " + json.dumps({"nodes": graph.num_nodes(), "edges": graph.num_edges(),
                                  "feat_rows": int(feat.shape[0]), "sampled": int(sampled.num_edges()),
                                  "MiB": memory()}), flush=True)
    os.unlink(fh.name)


if __name__ == "__main__":
    main()
