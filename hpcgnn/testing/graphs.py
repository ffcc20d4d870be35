"""Small deterministic graphs that tests make themselves."""
import numpy as np

from hpcgnn.prep.graph import Graph


def clustered_graph(num_nodes=600, num_clusters=4, avg_degree=12, p_inside=0.95, feat_dim=8, seed=0,
                    edge_field=True):
    """Planted clusters: most edges stay inside a cluster; ids are shuffled."""
    rng = np.random.default_rng(seed)
    cluster = rng.integers(0, num_clusters, num_nodes)
    members = [np.flatnonzero(cluster == c) for c in range(num_clusters)]
    num_edges = num_nodes * avg_degree
    src = rng.integers(0, num_nodes, num_edges)
    inside = rng.random(num_edges) < p_inside
    dst = rng.integers(0, num_nodes, num_edges)
    for c in range(num_clusters):
        pick = inside & (cluster[src] == c)
        dst[pick] = rng.choice(members[c], int(pick.sum()))
    masks = rng.random(num_nodes)
    ndata = {
        "feat": rng.standard_normal((num_nodes, feat_dim)).astype(np.float32),
        "label": cluster.astype(np.int64),
        "train_mask": masks < 0.6,
        "val_mask": (masks >= 0.6) & (masks < 0.8),
        "test_mask": masks >= 0.8,
    }
    edata = {"weight": rng.random(num_edges).astype(np.float32)} if edge_field else {}
    return Graph(num_nodes, src.astype(np.int64), dst.astype(np.int64), ndata, edata, name="clustered")
