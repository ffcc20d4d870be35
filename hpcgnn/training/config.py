"""The flags of ``hpcgnn train`` (and the TOML/YAML config files that mirror them) and of
``hpcgnn evaluate``.

Nothing here imports torch until the flags are parsed, so ``--help`` answers at once.
"""
from __future__ import annotations

import math
import os
import tomllib

from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import open_regular
from hpcgnn.runtime.flags import (
    COUNT,
    MAX_COUNT,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_MIB,
    MAX_PARTS,
    MAX_REPEATS,
    MAX_SECONDS,
    MAX_WIDTH,
    SEED,
    CommandParser,
    Domain,
)
from hpcgnn.runtime.watchdog import DEFAULT_TIMEOUT_S
from hpcgnn.training.metrics import CLASS_WEIGHTS, LINK_METRICS, METRICS
from hpcgnn.training.schedule import EVAL_PERIOD

#: the domains of the flags shared here (hpcgnn.runtime.flags); a config file's values go
#: through the same domains (the parser's ``flags``), so a flag and a key accept the same
RATE = Domain(float, gt=0)
WIDTH = Domain(int, ge=1, le=MAX_WIDTH)
DROPOUT = Domain(float, ge=0, lt=1)
REPEATS = Domain(int, ge=1, le=MAX_REPEATS)
#: batches sampled ahead: each holds a batch's blocks and features
MAX_PREFETCH = 64
WATCHDOG_S = Domain(float, gt=0, le=MAX_SECONDS, special={0: "never"})


def build_parser():
    """Local. The ``hpcgnn train`` argument parser (every flag is also a ``--config`` key)."""
    p = CommandParser(prog="hpcgnn train", description="Train a GNN on a partitioned dataset, "
                                "one MPI rank per part: mpirun -np P python -m hpcgnn.train --data DIR ...")
    p.add_argument("--config", help="TOML or YAML file whose keys mirror these flags (flags win)")
    p.add_argument("--data", help="dataset directory written by 'hpcgnn partition' (required)")
    p.add_argument("--task", choices=("node", "link"), default="node",
                   help="node: classify nodes (label, masks); link: predict edges held out by "
                        "'hpcgnn partition --edge-split' (see the link flags)")
    add_model_arguments(p)
    add_sampler_arguments(p)
    p.add_argument("--embed-dim", type=Domain(int, ge=1, le=MAX_WIDTH, special={0: "none"}), default=0,
                   help="learn a per-node embedding of this width (a DistEmbedding, sharded like the nodes), "
                        "appended to the features, or the only input of a dataset without 'feat'")
    p.add_argument("--embed-lr", type=RATE, default=0.01, help="SparseAdam learning rate of the node embedding")
    p.add_argument("--feature-scale", choices=FEATURE_SCALES, default=DEFAULT_FEATURE_SCALE,
                   help="rescale the features when the dataset is opened (evaluate applies the checkpoint's "
                        "choice): standard = each feature to mean 0 and deviation 1 over all nodes; row = each "
                        "node's row divided by its absolute sum; auto = row when no value is negative (counts, "
                        "0/1 words), else standard; none = as stored (hpcgnn.graph.feature_scale)")
    p.add_argument("--batch-size", type=COUNT, default=DEFAULT_BATCH, help="seeds per rank per step")
    p.add_argument("--epochs", type=COUNT, default=10, help="passes over the training nodes")
    add_optimizer_arguments(p)
    p.add_argument("--seed", type=SEED, default=0, help="seed of the parameters, batches and dropout")
    p.add_argument("--metric", choices=METRICS + LINK_METRICS, default=None,
                   help="reported per split beside accuracy and loss, and used for model selection; default by "
                        "task: acc (multi-class), roc-auc (binary: 2 classes), f1-micro (multi-label [N, C] labels), "
                        "auc (link; every link metric is reported)")
    p.add_argument("--class-weight", choices=CLASS_WEIGHTS, default="none",
                   help="weights of the training loss: balanced = inverse frequency of the training labels "
                        "(multi-label: each label's positives weigh negatives/positives)")
    p.add_argument("--prefetch", type=Domain(int, ge=1, le=MAX_PREFETCH, special={-1: "by the cores", 0: "none"}),
                   default=-1,
                   help="batches sampled ahead on a background thread (0: none; default: 2 when each rank has "
                        "a spare core, else 0, since the thread then only competes with the model)")
    p.add_argument("--cache-mb", type=Domain(float, gt=0, le=MAX_MIB, special={0: "no cache"}), default=0,
                   help="per rank: MB of feature rows of other nodes kept locally, the ones batches read most "
                        "(chosen by sampling batches first; 0: no cache)")
    p.add_argument("--progress-ms", type=Domain(float, gt=0, le=MAX_SECONDS * 1000,
                                                special={-1: "by the job's nodes", 0: "none"}), default=-1,
                   help="milliseconds between the polls that serve other ranks' reads while this rank computes "
                        "(0: none; default: 0.5 when the job spans several nodes, else none)")
    add_link_arguments(p)
    add_evaluation_arguments(p)
    p.add_argument("--checkpoint-dir", help="where checkpoints go (one after the last epoch; see --checkpoint-every)")
    p.add_argument("--checkpoint-every", type=Domain(int, ge=1, le=MAX_COUNT, special={0: "after the last epoch"}),
                   default=0,
                   help="epochs between checkpoints (0: only after the last epoch)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the latest checkpoint in --checkpoint-dir; start at epoch 1 when it has "
                        "none (so a job that may be requeued can always pass it)")
    p.add_argument("--force", action="store_true",
                   help="write checkpoints even when another run holds the lock of --checkpoint-dir (use only "
                        "when that run is known to be gone: two live runs would overwrite each other's checkpoints)")
    p.add_argument("--metrics", help="JSON-lines file: one record per epoch and a final one")
    p.add_argument("--plot", help="directory for PNG curves and the per-rank time breakdown")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_watchdog_argument(p)
    return p


def add_model_arguments(p):
    """Local. The model's flags: which model, its shape, dropout, normalisation, arithmetic."""
    p.add_argument("--model", default="sage", help="a registered model (hpcgnn.nn.MODELS): sage, gcn, gat")
    p.add_argument("--aggregator", choices=("mean", "gcn"), default="mean", help="GraphSAGE aggregator")
    p.add_argument("--hidden", type=WIDTH, default=256, help="width of every hidden layer")
    p.add_argument("--layers", type=Domain(int, ge=1, le=MAX_LAYERS), default=None, help="default: number of fanouts")
    p.add_argument("--heads", type=Domain(int, ge=1, le=MAX_HEADS), default=4, help="GAT attention heads")
    p.add_argument("--dropout", type=DROPOUT, default=0.5, help="between layers")
    p.add_argument("--input-dropout", type=DROPOUT, default=0.0, help="on the input features")
    p.add_argument("--norm", choices=("none", "batch", "layer"), default="none",
                   help="normalisation after each hidden layer")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="the layers' arithmetic: bf16 runs GEMMs, activations and aggregations in bfloat16 "
                        "(float32 weights, optimizer state, losses and reductions; AMX and AVX512-BF16 where "
                        "the CPU has them)")


#: flags of --task link only, with their defaults: set with --task node they are an error
SAINT = ("saint-node", "saint-edge", "saint-rw")
SAMPLERS = ("neighbor", "layer", "cluster", "randomwalk", *SAINT, "vr")
DEFAULT_FANOUTS = "10,25"
#: hpcgnn.nn.PRECISIONS, named here without importing torch before the flags are parsed
PRECISIONS = ("fp32", "bf16")
#: hpcgnn.graph.feature_scale.FEATURE_SCALES, named here for the same reason
FEATURE_SCALES = ("auto", "standard", "row", "none")
DEFAULT_FEATURE_SCALE = "auto"
DEFAULT_LAYER_SIZES = "512,512"
DEFAULT_LAYER_WEIGHTS = "normalized"
DEFAULT_BATCH = 1000
#: each sampler flag: its default and the samplers it applies to (refused with any other)
SAMPLER_FLAGS = {"num_clusters": ("auto", ("cluster",)), "clusters_per_batch": ("auto", ("cluster",)),
                 "walks": (20, ("randomwalk",)), "walk_length": (3, ("randomwalk", "saint-rw")),
                 "topk": (10, ("randomwalk",)), "budget": ("auto", SAINT), "presample": (50, SAINT),
                 "vr_neighbors": (2, ("vr",))}
#: their domains: a walk's steps and a node's walks multiply a batch's memory
#: a subgraph sampler's 'auto' size: batches that keep their nodes a set mean number of in-batch
#: neighbours (hpcgnn.sampling.subgraph)
AUTO_SIZE = {"auto": "sized from the graph"}
SAMPLER_DOMAINS = {"num_clusters": Domain(int, ge=1, le=MAX_PARTS, words=AUTO_SIZE),
                   "clusters_per_batch": Domain(int, ge=1, le=MAX_COUNT, words=AUTO_SIZE),
                   "walks": REPEATS, "walk_length": Domain(int, ge=1, le=1000), "topk": REPEATS,
                   "budget": Domain(int, ge=1, le=MAX_COUNT, share=True, words=AUTO_SIZE), "presample": REPEATS,
                   "vr_neighbors": REPEATS}
#: samplers whose batch is a subgraph of the rank's part (no seed batches, node tasks only), and
#: those whose blocks are weighted (a weighted mean: GraphSAGE with the mean aggregator only)
SUBGRAPH_SAMPLERS = ("cluster", *SAINT)
WEIGHTED_SAMPLERS = ("layer", "randomwalk", *SAINT, "vr")
LINK_DEFAULTS = {"predictor": "dot", "negative_sampler": "corrupt", "negatives": 1, "link_loss": "bce",
                 "margin": 1.0, "exclude": "self"}


def add_link_arguments(parser):
    """Local. The flags of ``--task link``: predictor, negatives, loss."""
    group = parser.add_argument_group("link prediction (--task link)")
    group.add_argument("--predictor", choices=("dot", "mlp"), default=LINK_DEFAULTS["predictor"],
                       help="edge score from the two endpoints' embeddings: dot product, or an MLP on their "
                            "element-wise product")
    group.add_argument("--negative-sampler", choices=("corrupt", "uniform", "degree", "in-batch"),
                       default=LINK_DEFAULTS["negative_sampler"],
                       help="negatives per positive (u, v): corrupt = (u, uniform node); uniform = random node "
                            "pairs; degree = (u, node drawn by in-degree^0.75); in-batch = (u, destination of "
                            "another positive of the batch)")
    group.add_argument("--negatives", type=REPEATS, default=LINK_DEFAULTS["negatives"], metavar="K",
                       help="negative pairs per positive edge in training")
    group.add_argument("--link-loss", choices=("bce", "margin"), default=LINK_DEFAULTS["link_loss"],
                       help="bce: binary cross-entropy on logits; margin: relu(margin - pos + neg) per "
                            "(positive, negative)")
    group.add_argument("--margin", type=Domain(float, ge=0), default=LINK_DEFAULTS["margin"],
                       help="of --link-loss margin")
    group.add_argument("--exclude", choices=("self", "none"), default=LINK_DEFAULTS["exclude"],
                       help="self: hide each batch's positive edges and their reverses from its neighbourhoods "
                            "(the model cannot read the answer); none: keep them (DGL's exclude=None; it leaks the "
                            "answer, for measurements and for tests that compare rank counts)")


def add_sampler_arguments(p):
    """Local. The sampler's flags: which sampler, the neighbour fanouts, each sampler's sizes."""
    p.add_argument("--sampler", choices=SAMPLERS, default="neighbor",
                   help="neighbor: --fanouts per layer; cluster: Cluster-GCN, batches of --clusters-per-batch "
                        "METIS clusters of each rank's nodes, the model on the subgraph they induce; "
                        "layer: LADIES, --layer-sizes nodes per layer by importance sampling; "
                        "randomwalk: PinSAGE, each node's --topk most visited nodes of random walks; "
                        "saint-node|saint-edge|saint-rw: GraphSAINT subgraphs of each rank's part; "
                        "vr: VR-GCN, --vr-neighbors sampled neighbours per node with the control variate of "
                        "historical activations, the input layer exact")
    p.add_argument("--fanouts", default=DEFAULT_FANOUTS,
                   help="per layer, input layer first; 'all' (or --fanouts=-1,...) takes every neighbour")
    p.add_argument("--layer-sizes", default=DEFAULT_LAYER_SIZES,
                   help="--sampler layer: nodes drawn per layer, input layer first (one per layer)")
    p.add_argument("--layer-weights", choices=("normalized", "unbiased"), default=DEFAULT_LAYER_WEIGHTS,
                   help="--sampler layer: unbiased importance weights, or normalized: each node's weights "
                        "divided by their sum (a weighted mean of its drawn in-neighbours; lower variance)")
    help_of = {"num_clusters": "clusters of each rank's nodes (an epoch is C / Q steps); auto: about 128 nodes each",
               "clusters_per_batch": "clusters per batch (Cluster-GCN's q); auto: as many as keep a batch's nodes "
                                     "10 in-batch neighbours on average (half their in-part ones where fewer)",
               "walks": "random walks started at every node of a layer",
               "walk_length": "steps per walk", "topk": "the most visited nodes kept as a node's neighbours",
               "budget": "nodes (saint-node), edges (saint-edge) or walk roots (saint-rw) drawn per subgraph; "
                         "P%% draws that share of the rank's part (its nodes, or its edges for saint-edge), "
                         "so a step covers the same share of the graph at any rank count; auto: the least that "
                         "keeps a subgraph's nodes 10 in-batch neighbours on average (half their in-part ones "
                         "where fewer)",
               "presample": "subgraphs drawn at start-up to estimate GraphSAINT's normalisation",
               "vr_neighbors": "sampled in-neighbours per node in every layer but the input layer (VR-GCN's D)"}
    for dest, (default, samplers) in SAMPLER_FLAGS.items():
        p.add_argument("--" + dest.replace("_", "-"), type=SAMPLER_DOMAINS[dest], default=default,
                       help=f"--sampler {'|'.join(samplers)}: {help_of[dest]}")


def parse_sizes(text) -> list:
    """Local. ``--layer-sizes``: comma-separated positive integers, else a one-line InputError."""
    try:
        sizes = [int(x) for x in str(text).split(",")]
    except ValueError:
        raise InputError(None, "must be comma-separated integers", "--layer-sizes", text) from None
    if min(sizes) < 1 or max(sizes) > MAX_COUNT or len(sizes) > MAX_LAYERS:
        raise InputError(None, f"must be 1 to {MAX_LAYERS} sizes, each from 1 to {MAX_COUNT}", "--layer-sizes", text)
    return sizes


def check_sampler_flags(args):
    """Local. Refuse flags that do not apply to the run's ``--sampler`` (never silently ignored)."""
    for dest, (default, samplers) in SAMPLER_FLAGS.items():
        flag, value = "--" + dest.replace("_", "-"), getattr(args, dest)
        if args.sampler not in samplers and value != default:
            raise InputError(None, f"applies to --sampler {'|'.join(samplers)} only", flag, value)
    for flag, value, default in (("--layer-sizes", args.layer_sizes, DEFAULT_LAYER_SIZES),
                                 ("--layer-weights", args.layer_weights, DEFAULT_LAYER_WEIGHTS)):
        if args.sampler != "layer" and str(value) != default:
            raise InputError(None, "applies to --sampler layer only", flag, value)
    refused = {}
    if args.sampler != "neighbor":
        refused["--fanouts"] = (str(args.fanouts) != DEFAULT_FANOUTS, "it has no fanouts")
    if args.sampler in SUBGRAPH_SAMPLERS:
        why = "a batch is a subgraph of the rank's part, for node tasks"
        refused.update({"--batch-size": (args.batch_size != DEFAULT_BATCH, why),
                        "--cache-mb": (bool(args.cache_mb), why), "--task": (args.task != "node", why)})
    if args.sampler == "vr":
        why = "its input layer reads the features' neighbour means, for node tasks"
        refused.update({"--embed-dim": (bool(args.embed_dim), why), "--task": (args.task != "node", why)})
    if args.sampler in WEIGHTED_SAMPLERS:
        why = "its blocks are weighted means: GraphSAGE with the mean aggregator"
        refused.update({"--model": (args.model != "sage", why), "--aggregator": (args.aggregator != "mean", why)})
    for flag, (given, why) in refused.items():
        if given:
            raise InputError(None, f"does not apply to --sampler {args.sampler} ({why})", flag,
                             getattr(args, flag[2:].replace("-", "_")))


def check_task_flags(args):
    """Local. Refuse flags that do not apply to the run's ``--task`` (never silently ignored)."""
    if args.task == "node":
        for dest, default in LINK_DEFAULTS.items():
            if getattr(args, dest) != default:
                raise InputError(None, "applies to --task link only", "--" + dest.replace("_", "-"),
                                 getattr(args, dest))
        if args.metric in LINK_METRICS:
            raise InputError(None, "is a link metric: use it with --task link", "--metric", args.metric)
        return
    if args.class_weight != "none":
        raise InputError(None, "applies to --task node only", "--class-weight", args.class_weight)
    if args.cache_mb:
        raise InputError(None, "applies to --task node only (the cache is chosen by sampling node batches)",
                         "--cache-mb", args.cache_mb)
    if args.metric is not None and args.metric not in LINK_METRICS:
        raise InputError(None, f"is a node metric: --task link reports {', '.join(LINK_METRICS)}", "--metric",
                         args.metric)


COMPRESSIONS = ("none", "bf16", "topk:R")


def parse_compression(text) -> tuple[str, float]:
    """Local. ``--grad-compress``: ``("none", 0)``, ``("bf16", 0)`` or ``("topk", R)`` with
    0 < R <= 1, else a one-line InputError."""
    text = str(text)
    if text in ("none", "bf16"):
        return text, 0.0
    if text.startswith("topk:"):
        try:
            ratio = float(text[5:])
        except ValueError:
            ratio = math.nan
        if 0.0 < ratio <= 1.0:
            return "topk", ratio
        raise InputError(None, "topk:R needs a fraction 0 < R <= 1 of the entries to send", "--grad-compress", text)
    raise InputError(None, f"must be one of {', '.join(COMPRESSIONS)}", "--grad-compress", text)


def add_optimizer_arguments(parser):
    """Local. The optimizer's flags: learning rate, weight decay, gradient accumulation, steps."""
    parser.add_argument("--lr", type=RATE, default=0.003, help="Adam learning rate")
    parser.add_argument("--weight-decay", type=Domain(float, ge=0), default=0.0, help="Adam L2 penalty")
    parser.add_argument("--accumulate", type=COUNT, default=1, metavar="K",
                        help="micro-batches per optimizer step: gradients of K batches of --batch-size seeds "
                             "are averaged, then reduced over the ranks once (a batch of K x --batch-size seeds "
                             "per rank in the memory of one)")
    parser.add_argument("--overlap", action="store_true",
                        help="reduce the gradient in buckets of --bucket-mb with non-blocking Allreduce as backward "
                             "produces them (last layer first), overlapping communication with backward")
    parser.add_argument("--bucket-mb", type=Domain(float, gt=0, le=MAX_MIB), default=1.0, metavar="MB",
                        help="--overlap: MiB of float32 gradients per bucket")
    parser.add_argument("--grad-compress", default="none", metavar="none|bf16|topk:R",
                        help="bf16: send the gradient as bfloat16 (half the bytes); topk:R: send the fraction R of "
                             "entries largest in magnitude (index, value); both carry what was not sent to the next "
                             "step (error feedback)")
    parser.add_argument("--steps-per-epoch", type=Domain(int, ge=1, le=MAX_COUNT, special={0: "a whole pass"}),
                        default=0, metavar="N",
                        help="end each epoch after N steps (0: a whole pass); each epoch takes the first N batches "
                             "of its own shuffled order, so successive epochs see different seeds")


def add_evaluation_arguments(parser):
    """Local. When a run evaluates, and how it selects its model and stops early."""
    parser.add_argument("--eval-every", type=EVAL_PERIOD, default="auto", metavar="N|auto",
                        help="epochs between evaluations (0: only after the last epoch); 'auto' evaluates after the "
                             "first epoch, then as often as keeps evaluation under a quarter of the run time "
                             "(hpcgnn.training.schedule); the last epoch is always evaluated")
    parser.add_argument("--eval-batch-size", type=COUNT, default=10_000, help="nodes per batch of full-graph inference")
    parser.add_argument("--select", choices=("metric", "loss"), default="metric",
                        help="model selection: the epoch of the best validation value of --metric, or of the "
                             "lowest validation loss; its test figures are the run's selected_test_* "
                             "(hpcgnn.training.early_stop)")
    parser.add_argument("--early-stop", type=Domain(int, ge=1, le=MAX_COUNT, special={0: "never"}), default=0,
                        metavar="PATIENCE",
                        help="end training once the --select value has not improved for this many epochs (0: never)")


def add_watchdog_argument(parser):
    """Local. ``--watchdog-s``: seconds without progress on some rank before the job is ended."""
    parser.add_argument("--watchdog-s", type=WATCHDOG_S, default=DEFAULT_TIMEOUT_S,
                        help="end the job, naming the ranks at fault, when some rank makes no progress "
                             f"(no training step or inference batch) for this many seconds (0: never; "
                             f"default {DEFAULT_TIMEOUT_S:g})")


def parse_args(argv=None):
    """Local. Flags, with defaults taken from ``--config`` when given."""
    parser = build_parser()
    pre = CommandParser(prog=parser.prog, add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.config:
        parser.set_defaults(**read_config(known.config, parser))
    args = parser.parse_args(argv)
    check_sampler_flags(args)
    if args.sampler == "layer":  # one size per layer, as fanouts
        args.layer_sizes = parse_sizes(args.layer_sizes)
        args.layers = args.layers or len(args.layer_sizes)
        if args.layers != len(args.layer_sizes):
            raise InputError(None, f"needs one size per layer ({args.layers} layers)", "--layer-sizes",
                             ",".join(map(str, args.layer_sizes)))
    if args.sampler != "neighbor":  # no fanouts: --layers (default 2) counts the layers
        args.layers = args.layers or 2
        args.fanouts = ",".join(["all"] * args.layers)
    try:
        args.fanouts = [-1 if x.strip() == "all" else int(x) for x in str(args.fanouts).split(",")]
    except ValueError:
        raise InputError(None, "must be comma-separated integers", "--fanouts", args.fanouts) from None
    if any(f == 0 or f < -1 or f > MAX_COUNT for f in args.fanouts) or len(args.fanouts) > MAX_LAYERS:
        raise InputError(None, f"must be 1 to {MAX_LAYERS} fanouts, each from 1 to {MAX_COUNT} or -1 (all)",
                         "--fanouts", ",".join(map(str, args.fanouts)))
    args.layers = args.layers or len(args.fanouts)
    if args.layers != len(args.fanouts):
        raise InputError(None, f"needs one fanout per layer ({args.layers} layers)", "--fanouts", args.fanouts)
    if args.bucket_mb != 1.0 and not args.overlap:
        raise InputError(None, "applies to --overlap only", "--bucket-mb", args.bucket_mb)
    kind, _ = parse_compression(args.grad_compress)
    if args.overlap and kind != "none":
        raise InputError(None, "--overlap reduces float32 buckets; it does not combine with compression",
                         "--grad-compress", args.grad_compress)
    check_task_flags(args)
    if (args.resume or args.checkpoint_every) and not args.checkpoint_dir:
        raise InputError(None, "--resume and --checkpoint-every need --checkpoint-dir", "--checkpoint-dir")
    if not args.data:
        raise InputError(None, "is required", "--data")
    if not os.path.isdir(args.data):
        raise InputError(args.data, "dataset directory not found", "--data")
    from hpcgnn.nn.registry import MODELS  # deferred: torch, only once the flags parsed (fast --help)

    if args.model not in MODELS:
        raise InputError(None, f"unknown model (choose from {', '.join(MODELS)})", "--model", args.model)
    return args


#: a config file is a few dozen keys; anything larger is not one (and is never read whole)
MAX_CONFIG_BYTES = 1 << 20


def read_config(path, parser):
    """Local. Keys of a TOML/YAML file as argparse defaults (dashes or underscores).

    Only a regular file of at most :data:`MAX_CONFIG_BYTES` is read (a FIFO would block the read
    forever), and YAML anchors and aliases are refused: a config is flat keys and values, and
    nested aliases expand exponentially (the "billion laughs").
    """
    if not os.path.exists(path):
        raise InputError(path, "config file not found", "--config")
    with open_regular(path, "--config") as fh:
        data = fh.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise InputError(path, f"larger than {MAX_CONFIG_BYTES} bytes: not a config file", "--config")
    try:
        if path.endswith((".yaml", ".yml")):
            values = _load_yaml(data)
            values = {} if values is None else values  # an empty file sets nothing
        else:
            values = tomllib.loads(data.decode("utf-8"))
    except ImportError:
        raise InputError(path, "YAML configs need PyYAML (pip install pyyaml)", "--config") from None
    except _YamlAlias as exc:
        raise InputError(path, f"YAML anchors and aliases (&name, *name) are not allowed in a config "
                               f"(line {exc.line}): write each value out", "--config") from None
    except Exception as exc:  # any parse error becomes one line naming the file
        # YAML parse errors span several lines (context, caret); the message must stay one.
        detail = " ".join(str(exc).split())
        raise InputError(path, f"unreadable config ({detail})", "--config") from None
    if not isinstance(values, dict):
        raise InputError(path, "config must be a mapping of flag names to values", "--config",
                         type(values).__name__)
    known = set(vars(parser.parse_args([])))  # every flag, at its default
    actions = parser.flags
    defaults = {}
    for key, value in values.items():
        dest = str(key).replace("-", "_")
        if dest not in known or dest == "config":
            raise InputError(path, "unknown key", key, value)
        if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (list, dict)) for v in value)):
            raise InputError(path, "must be a single value or a list", key, value)
        value = ",".join(map(str, value)) if isinstance(value, list) else value
        defaults[dest] = _config_value(path, key, value, actions[dest])
    return defaults


class _YamlAlias(Exception):
    def __init__(self, line):
        super().__init__(line)
        self.line = line


def _load_yaml(data):
    import yaml  # deferred: only YAML configs need it (installed with hpcgnn)

    class FlatConfigLoader(yaml.SafeLoader):  # safe: a config never constructs Python objects
        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise _YamlAlias(event.start_mark.line + 1)
            return super().compose_node(parent, index)

    return yaml.load(data, Loader=FlatConfigLoader)  # noqa: S506 - a SafeLoader without aliases


def _config_value(path, key, value, action):
    # argparse converts only string defaults and reports a bad one with its usage text, and it
    # would keep a float for an int flag: check each value here, as the flag would be checked.
    if action.nargs == 0:  # an on/off flag such as --resume
        if not isinstance(value, bool):
            raise InputError(path, "must be true or false", key, value)
        return value
    if isinstance(action.type, Domain) and value is not None:
        return action.type.convert(value, key, path)
    if action.type is not None and value is not None:
        try:
            value = action.type(str(value))
        except (TypeError, ValueError):
            raise InputError(path, f"not a valid {getattr(action.type, '__name__', 'value')}", key, value) from None
    if action.choices is not None and value not in action.choices:
        raise InputError(path, f"must be one of {', '.join(map(str, action.choices))}", key, value)
    return value


def build_evaluate_parser():
    """Local. The ``hpcgnn evaluate`` argument parser."""
    p = CommandParser(prog="hpcgnn evaluate",
                      description="Full-neighbourhood distributed inference of a trained checkpoint.")
    p.add_argument("--data", required=True, help="partitioned dataset directory")
    p.add_argument("--checkpoint", required=True,
                   help="checkpoint file written by hpcgnn train, or a checkpoint directory: its best checkpoint "
                        "(the epoch the run selected and reported; its latest if it has none)")
    p.add_argument("--latest", action="store_true",
                   help="score the checkpoint directory's latest checkpoint (what --resume continues from) "
                        "instead of its best")
    p.add_argument("--batch-size", type=COUNT, default=10_000, help="nodes per inference batch")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="the layers' arithmetic (see hpcgnn train --precision); default: the checkpoint's")
    p.add_argument("--metric", choices=METRICS + LINK_METRICS, default=None,
                   help="reported per split beside accuracy and loss (node checkpoints; a link checkpoint reports "
                        "every link metric); default: the checkpoint's")
    p.add_argument("--save-embeddings", metavar="DIR",
                   help="write each rank's nodes to DIR/embeddings-RANK.h5: orig_id (the input file's id), "
                        "gid and embedding (the output of --embedding-layer); format in hpcgnn.training.outputs")
    p.add_argument("--embedding-layer", type=Domain(int, ge=-MAX_LAYERS, le=MAX_LAYERS, nonzero=True), default=-1,
                   metavar="N",
                   help="which layer's output --save-embeddings writes: 1..L, or counted from the end "
                        "(-1: the last layer, the logits; -2: the last hidden layer)")
    p.add_argument("--save-predictions", action="store_true",
                   help="add each node's predicted class ('prediction') and class probabilities "
                        "('probability') to the --save-embeddings files")
    add_watchdog_argument(p)
    return p
