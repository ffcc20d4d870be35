"""Small deterministic graphs that tests make themselves."""
import numpy as np

from hpcgnn.prep.graph import Graph
from hpcgnn.prep.typed import typed_graph


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


def typed_toy_graph(num_papers=400, num_authors=200, num_classes=4, feat_dim=8, p_inside=0.9, seed=0,
                    add_reverse=True):
    """A small typed graph whose paper labels only relations reveal: papers (labelled, features pure
    noise), authors (features = their class's one-hot plus noise; a paper's authors are mostly of
    its class), venues (no features; a paper mostly appears in its class's venue); relations
    writes (author -> paper), cites (paper -> paper, mostly inside a class), published_in
    (paper -> venue), and their reverses."""
    rng = np.random.default_rng(seed)
    paper_class = rng.integers(0, num_classes, num_papers)
    author_class = rng.integers(0, num_classes, num_authors)
    by_class = [np.flatnonzero(author_class == c) for c in range(num_classes)]
    papers_of = [np.flatnonzero(paper_class == c) for c in range(num_classes)]

    def same_class(classes, pool, inside):
        """A node of the same class for each of ``classes`` (any node with probability 1 - inside)."""
        out = np.empty(classes.shape[0], dtype=np.int64)
        for c in range(num_classes):
            at = np.flatnonzero(classes == c)
            out[at] = rng.choice(pool[c], at.shape[0])
        stray = rng.random(classes.shape[0]) >= inside
        out[stray] = rng.integers(0, sum(len(p) for p in pool), int(stray.sum()))
        return out

    writes_paper = np.repeat(np.arange(num_papers), 2)
    writes_author = same_class(paper_class[writes_paper], by_class, p_inside)
    cites_src = rng.integers(0, num_papers, 3 * num_papers)
    cites_dst = same_class(paper_class[cites_src], papers_of, p_inside)
    venue = np.where(rng.random(num_papers) < p_inside, paper_class, rng.integers(0, num_classes, num_papers))
    author_feat = (np.eye(num_classes, feat_dim)[author_class] + 0.5 * rng.standard_normal((num_authors, feat_dim)))
    split = rng.random(num_papers)
    return typed_graph(
        {"paper": num_papers, "author": num_authors, "venue": num_classes},
        [("author", "writes", "paper", writes_author, writes_paper),
         ("paper", "cites", "paper", cites_src, cites_dst),
         ("paper", "published_in", "venue", np.arange(num_papers), venue)],
        typed_fields={"paper": {"feat": rng.standard_normal((num_papers, feat_dim)).astype(np.float32)},
                      "author": {"feat": author_feat.astype(np.float32)}},
        target="paper", label=paper_class.astype(np.int64),
        masks={"train_mask": split < 0.6, "val_mask": (split >= 0.6) & (split < 0.8), "test_mask": split >= 0.8},
        name="typed_toy", add_reverse=add_reverse)
