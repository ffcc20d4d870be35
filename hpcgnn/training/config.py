"""The configuration of ``hpcgnn train``: one frozen, typed :class:`TrainConfig`, built in one place.

A run's settings come from flags, a TOML/YAML ``--config`` file (keys mirror the flags; flags
win) or a checkpoint, and every route goes through :func:`train_config`, which validates them with
the one-line errors of the command line. The config is made of parts (input, model, sampler,
task, optimizer, evaluation, output, runtime); each part's fields declare their own flags
(:func:`hpcgnn.runtime.options.option`), and the sampler's and the task's options come from their
registrations (:mod:`hpcgnn.sampling.registry`, :mod:`hpcgnn.tasks.registry`), so a new sampler or
task adds its flags without an edit here. Library functions receive the config (or one of its
parts); it is stored whole in checkpoints and in the metrics file's header.

What the dataset decides (node count, classes, feature width) is not configuration: it is a
:class:`~hpcgnn.tasks.registry.DatasetFacts`, read when the run opens its dataset.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import os
import tomllib
from dataclasses import dataclass, replace

from hpcgnn.nn.config import PRECISIONS, ModelConfig
from hpcgnn.nn.registry import MODELS
from hpcgnn.runtime.errors import InputError
from hpcgnn.runtime.files import open_regular
from hpcgnn.runtime.flags import (
    COUNT,
    MAX_COUNT,
    MAX_LAYERS,
    MAX_MIB,
    MAX_SECONDS,
    MAX_WIDTH,
    SEED,
    CommandParser,
    Domain,
)
from hpcgnn.runtime.options import add_options, as_dict, declared, flag_of, note_deprecated, option, options_from
from hpcgnn.runtime.watchdog import DEFAULT_TIMEOUT_S
from hpcgnn.sampling.registry import AT_DEFAULT, SAMPLERS, option_owners, sampler_spec
from hpcgnn.tasks.registry import TASKS
from hpcgnn.training.device import DEVICES, device_name, refuse_on_device
from hpcgnn.training.schedule import EVAL_PERIOD

RATE = Domain(float, gt=0)
#: batches sampled ahead: each holds a batch's blocks and features
MAX_PREFETCH = 64
WATCHDOG_S = Domain(float, gt=0, le=MAX_SECONDS, special={0: "never"})
#: hpcgnn.graph.feature_scale.FEATURE_SCALES
FEATURE_SCALES = ("auto", "standard", "row", "none")
SYNC_MODES = ("allreduce", "async")
STEP_BALANCES = ("none", "speed")
COMPRESSIONS = ("none", "bf16", "topk:R")
#: modules imported before the flags are read, so that what they register has its flags
PLUGIN_ENTRY_POINTS = "hpcgnn.plugins"


@dataclass(frozen=True)
class InputConfig:
    """Local. The dataset, how its features are rescaled, and the learnable node embedding."""

    data: str | None = option(None, "dataset directory written by 'hpcgnn partition' (required)")
    feature_scale: str = option("auto", "rescale the features when the dataset is opened (evaluate applies the "
                                "checkpoint's choice): standard = each feature to mean 0 and deviation 1 over all "
                                "nodes; row = each node's row divided by its absolute sum; auto = row when no value is "
                                "negative (counts, 0/1 words), else standard; none = as stored "
                                "(hpcgnn.graph.feature_scale)", choices=FEATURE_SCALES)
    embed_dim: int = option(0, "learn a per-node embedding of this width (a DistEmbedding, sharded like the nodes), "
                            "appended to the features, or the only input of a dataset without 'feat'",
                            type=Domain(int, ge=1, le=MAX_WIDTH, special={0: "none"}))
    embed_lr: float = option(0.01, "SparseAdam learning rate of the node embedding", type=RATE)


@dataclass(frozen=True)
class SamplerConfig:
    """Local. The ``--sampler`` (a name in :data:`hpcgnn.sampling.SAMPLERS`) and its options."""

    name: str = "neighbor"
    options: object = None


@dataclass(frozen=True)
class TaskConfig:
    """Local. The ``--task`` (a name in :data:`hpcgnn.tasks.TASKS`) and its options."""

    name: str = "node"
    options: object = None


@dataclass(frozen=True)
class OptimizerConfig:
    """Local. Epochs and steps, Adam, gradient accumulation and how the gradient is reduced."""

    epochs: int = option(10, "passes over the training nodes", type=COUNT)
    batch_size: int = option(1000, "seeds per rank per step", type=COUNT)
    steps_per_epoch: int = option(0, "end each epoch after N steps (0: a whole pass); each epoch takes the first N "
                                  "batches of its own shuffled order, so successive epochs see different seeds",
                                  type=Domain(int, ge=1, le=MAX_COUNT, special={0: "a whole pass"}), metavar="N")
    lr: float = option(0.003, "Adam learning rate", type=RATE)
    weight_decay: float = option(0.0, "Adam L2 penalty", type=Domain(float, ge=0))
    accumulate: int = option(1, "micro-batches per optimizer step: gradients of K batches of --batch-size seeds are "
                             "averaged, then reduced over the ranks once (a batch of K x --batch-size seeds per rank "
                             "in the memory of one)", type=COUNT, metavar="K")
    overlap: bool = option(False, "reduce the gradient in buckets of --bucket-mb with non-blocking Allreduce as "
                           "backward produces them (last layer first), overlapping communication with backward")
    bucket_mb: float = option(1.0, "--overlap: MiB of float32 gradients per bucket",
                              type=Domain(float, gt=0, le=MAX_MIB), metavar="MB")
    staleness: int = option(0, "bounded staleness: each step applies the mean gradient of the step S before it, "
                            "whose Allreduce ran while the rank computed the S steps since, so a slow step holds the "
                            "other ranks back only once that slack is spent; a run's first S steps take no optimizer "
                            "step (hpcgnn.training.gradsync; 0: every step applies its own mean gradient)",
                            type=Domain(int, ge=0, le=MAX_COUNT), metavar="S")
    step_balance: str = option("none", "speed: after each epoch every rank's batch size becomes proportional to its "
                          "measured speed (seeds per second of its epoch less the gradient exchange), together ranks "
                          "x --batch-size, with the same step count everywhere, so a slow rank no longer holds the "
                          "others' steps back (hpcgnn.training.balance; sizes follow the machine's timing: not "
                          "reproducible from the seed)", choices=STEP_BALANCES)
    sync: str = option("allreduce", "how the ranks combine their steps: allreduce: every step applies the mean "
                       "gradient over the ranks (as --staleness and --average-every modify it); async: the "
                       "parameters live in an MPI window sharded over the ranks, and each rank reads them, steps "
                       "on its own gradient and adds the change, scaled down when more updates reached a shard "
                       "meanwhile than the ranks stepping in turn make (min(1, P / (1 + lag))), with no wait "
                       "for the other ranks until the epoch's end (hpcgnn.training.gradsync; not reproducible "
                       "on more than one rank)",
                       choices=SYNC_MODES)
    average_every: int = option(1, "local SGD: each rank steps on its own gradient without communication, and every "
                                "H optimizer steps the ranks average their parameters, and at each epoch's end "
                                "their parameters and optimizer state (hpcgnn.training.gradsync; 1: every step "
                                "reduces the gradient)", type=Domain(int, ge=1, le=MAX_COUNT), metavar="H")
    grad_compress: str = option("none", "bf16: send the gradient as bfloat16 (half the bytes); topk:R: send the "
                                "fraction R of entries largest in magnitude (index, value); both carry what was not "
                                "sent to the next step (error feedback)", metavar="none|bf16|topk:R")


@dataclass(frozen=True)
class EvaluationConfig:
    """Local. When the run evaluates, what it reports, how it selects its model and stops early."""

    eval_every: object = option("auto", "epochs between evaluations (0: only after the last epoch); 'auto' evaluates "
                                "after the first epoch, then as often as keeps evaluation under a quarter of the run "
                                "time (hpcgnn.training.schedule); the last epoch is always evaluated; 'never': no "
                                "evaluation (full-graph inference holds every node's hidden rows: evaluate the "
                                "checkpoint with 'hpcgnn evaluate' where they fit)",
                                type=EVAL_PERIOD, metavar="N|auto|never")
    eval_batch_size: int = option(10_000, "nodes per batch of full-graph inference", type=COUNT)
    metric: str | None = option(None, "reported per split beside accuracy and loss, and used for model selection; "
                                "default by task: acc (multi-class), roc-auc (binary: 2 classes), f1-micro "
                                "(multi-label [N, C] labels), auc (link; every link metric is reported)")
    select: str = option("metric", "model selection: the epoch of the best validation value of --metric, or of the "
                         "lowest validation loss; its test figures are the run's selected_test_* "
                         "(hpcgnn.training.early_stop)", choices=("metric", "loss"))
    early_stop: int = option(0, "end training once the --select value has not improved for this many epochs "
                             "(0: never)", type=Domain(int, ge=1, le=MAX_COUNT, special={0: "never"}),
                             metavar="PATIENCE")
    refit_folds: int = option(0, "choose the epoch count by K-fold cross-validation, then train on every labelled "
                              "node for that count: the training and validation nodes are dealt into K folds "
                              "stratified by label; K runs each train on K-1 folds for --epochs epochs (or until "
                              "--early-stop), validating on the fold left out; of the counts whose mean --select "
                              "value is within one standard error of the best, the median wins; a "
                              "last run trains that many epochs on all of them (hpcgnn.training.refit); 0: one run",
                              type=Domain(int, ge=2, le=MAX_COUNT, special={0: "one run"}), metavar="K")
    refit_predict: str = option("ensemble", "--refit-folds' test figures: ensemble scores the average of the "
                                "class probabilities of the K fold models after the chosen count and the last "
                                "run's model; last scores the last run's model alone", choices=("ensemble", "last"))


@dataclass(frozen=True)
class OutputConfig:
    """Local. Checkpoints, the metrics file, plots and the progress bar."""

    checkpoint_dir: str | None = option(None, "where checkpoints go (one after the last epoch; see "
                                        "--checkpoint-every)")
    checkpoint_every: int = option(0, "epochs between checkpoints (0: only after the last epoch)",
                                   type=Domain(int, ge=1, le=MAX_COUNT, special={0: "after the last epoch"}))
    resume: bool = option(False, "continue from the latest checkpoint in --checkpoint-dir; start at epoch 1 when it "
                          "has none (so a job that may be requeued can always pass it)")
    force: bool = option(False, "write checkpoints even when another run holds the lock of --checkpoint-dir (use "
                         "only when that run is known to be gone: two live runs would overwrite each other's "
                         "checkpoints)")
    metrics_file: str | None = option(None, "JSON-lines file: one record per epoch and a final one",
                                      deprecated=("--metrics",))
    plot: str | None = option(None, "directory for PNG curves and the per-rank time breakdown")
    no_progress: bool = option(False, "no progress bar")


@dataclass(frozen=True)
class RuntimeConfig:
    """Local. Where a rank computes, how it spends its cores and waits: prefetching, progress polls,
    the watchdog."""

    device: str = option("cpu", "where the model computes: cuda puts the model, its optimizer state and every "
                         "batch's blocks, features and labels on one GPU per rank (the GPU of index local rank "
                         "modulo visible GPUs; ranks may share one), while sampling stays on the CPU, the copy to "
                         "the GPU overlapping the previous step (hpcgnn.training.device, --device-rows-mb); the "
                         "layers then take --kernels torch; auto: cuda where torch sees a GPU, else cpu",
                         choices=DEVICES)
    device_rows_mb: float = option(-1, "per rank, with --device cuda: MB of feature rows kept on the GPU, the rows "
                                   "the rank reads without the network (its own part first, then its node's other "
                                   "parts), so a batch copies only their positions and gathers them there; 0: "
                                   "none, every row gathered on the CPU and copied (hpcgnn.loading.device_rows)",
                                   type=Domain(float, ge=0, le=MAX_MIB,
                                               special={-1: "a quarter of the GPU's memory shared by the ranks on "
                                                            "it"}), metavar="MB")

    prefetch: int = option(-1, "batches sampled ahead on a background thread (0: none; default: 2 when each rank "
                           "has a spare core, else 0, since the thread then only competes with the model)",
                           type=Domain(int, ge=1, le=MAX_PREFETCH, special={-1: "by the cores", 0: "none"}))
    progress_ms: float = option(-1, "milliseconds between the polls that serve other ranks' reads while this rank "
                                "computes (0: none; default: 0.5 when the job spans several nodes, else none)",
                                type=Domain(float, gt=0, le=MAX_SECONDS * 1000,
                                            special={-1: "by the job's nodes", 0: "none"}))
    watchdog_s: float = option(DEFAULT_TIMEOUT_S, "end the job, naming the ranks at fault, when some rank makes no "
                               "progress (no training step or inference batch) for this many seconds (0: never; "
                               f"default {DEFAULT_TIMEOUT_S:g})", type=WATCHDOG_S)
    plugins: tuple = ()


#: the parts made of option fields alone, by their attribute name in TrainConfig
PARTS = {"input": InputConfig, "model": ModelConfig, "optimizer": OptimizerConfig, "evaluation": EvaluationConfig,
         "output": OutputConfig, "runtime": RuntimeConfig}


@dataclass(frozen=True)
class TrainConfig:
    """Local. Everything a training run is asked to do: built by :func:`train_config`, frozen."""

    seed: int = option(0, "seed of the parameters, batches and dropout", type=SEED)
    input: InputConfig = InputConfig()
    model: ModelConfig = ModelConfig()
    sampler: SamplerConfig = SamplerConfig()
    task: TaskConfig = TaskConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    output: OutputConfig = OutputConfig()
    runtime: RuntimeConfig = RuntimeConfig()

    def flat(self) -> dict:
        """Local. Every setting by its flag's name (``hidden``, ``fanouts``, ``sampler``, ``task``...)."""
        values = {"seed": self.seed, "sampler": self.sampler.name, "task": self.task.name}
        for name in PARTS:
            values.update(as_dict(getattr(self, name)))
        for part in (self.sampler, self.task):
            if part.options is not None:
                values.update(as_dict(part.options))
        return values

    def as_dict(self) -> dict:
        """Local. The config as plain nested data (checkpoints, the metrics header):
        ``{"seed", "input": {...}, ..., "sampler": {"name", options...}, "task": {"name", options...}}``."""
        record = {"seed": self.seed}
        for name in ("input", "model", "sampler", "task", "optimizer", "evaluation", "output", "runtime"):
            part = getattr(self, name)
            if isinstance(part, (SamplerConfig, TaskConfig)):
                record[name] = {"name": part.name, **(as_dict(part.options) if part.options is not None else {})}
            else:
                record[name] = as_dict(part)
        return record


def load_plugins(modules=()) -> tuple:
    """Local. Import each ``--plugin`` module and every installed ``hpcgnn.plugins`` entry point, so
    that the samplers, tasks and models they register have their flags; the modules' names.

    Raises
    ------
    InputError
        Naming ``--plugin`` and a module that cannot be imported.
    """
    from importlib.metadata import entry_points  # deferred: only read when the parser is built

    for entry in entry_points(group=PLUGIN_ENTRY_POINTS):
        entry.load()
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise InputError(None, f"cannot import the plugin module ({exc})", "--plugin", module) from None
    return tuple(modules)


def build_parser():
    """Local. The ``hpcgnn train`` argument parser: the flags of every part of :class:`TrainConfig`
    and of every registered sampler and task (each is also a ``--config`` key)."""
    p = CommandParser(prog="hpcgnn train", description="Train a GNN on a partitioned dataset, "
                                "one MPI rank per part: mpirun -np P python -m hpcgnn.train --data DIR ...")
    p.add_argument("--config", help="TOML or YAML file whose keys mirror these flags (flags win)")
    p.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE",
                   help="import MODULE first: the samplers, tasks and models it registers become choices, with "
                        "their flags (repeatable; installed packages can instead declare an 'hpcgnn.plugins' "
                        "entry point)")
    add_options(p, InputConfig)
    add_options(p, TrainConfig)
    p.add_argument("--task", choices=tuple(TASKS), default="node",
                   help="; ".join(f"{name}: {task.summary}" for name, task in TASKS.items()))
    add_options(p.add_argument_group("model"), ModelConfig)
    if _has_kernels():
        p.set_defaults(kernels=None)  # not given: the device decides (settle_kernels)
    add_sampler_arguments(p.add_argument_group("sampler"))
    add_options(p.add_argument_group("optimizer"), OptimizerConfig)
    add_options(p.add_argument_group("evaluation"), EvaluationConfig)
    for name, task in TASKS.items():
        if task.options is not None:
            add_options(p.add_argument_group(f"{name} task (--task {name})"), task.options)
    add_options(p.add_argument_group("output"), OutputConfig)
    add_options(p.add_argument_group("runtime"), RuntimeConfig)
    return p


def add_sampler_arguments(group):
    """Local. ``--sampler`` and the options of every registered sampler, each flag's help naming
    the samplers it applies to."""
    group.add_argument("--sampler", choices=tuple(SAMPLERS), default="neighbor",
                       help="; ".join(f"{name}: {spec.summary}" for name, spec in SAMPLERS.items()))
    for name, (options, samplers) in option_owners().items():
        add_options(group, options, help_prefix=f"--sampler {'|'.join(samplers)}: ",
                    skip=[f.name for f, _ in declared(options) if f.name != name])


def parse_train_config(argv=None) -> TrainConfig:
    """Local. The :class:`TrainConfig` of ``hpcgnn train``'s flags, with defaults taken from
    ``--config`` when given, and ``--plugin`` modules imported first."""
    pre = CommandParser(prog="hpcgnn train", add_help=False)
    pre.add_argument("--config")
    pre.add_argument("--plugin", dest="plugins", action="append", default=[])
    known, _ = pre.parse_known_args(argv)
    config_file = read_config_file(known.config) if known.config else {}
    plugins = load_plugins([*config_plugins(config_file), *known.plugins])
    parser = build_parser()
    if known.config:
        parser.set_defaults(**config_defaults(known.config, config_file, parser))
    values = vars(parser.parse_args(argv))
    values["plugins"] = plugins
    config = train_config(values)
    if not config.input.data:
        raise InputError(None, "is required", "--data")
    if not os.path.isdir(config.input.data):
        raise InputError(config.input.data, "dataset directory not found", "--data")
    if config.output.plot and importlib.util.find_spec("matplotlib") is None:  # refused before training, not after
        raise InputError(None, "needs matplotlib (pip install 'hpcgnn[plot]')", "--plot", config.output.plot)
    return config


def train_config(values, where=None, strict=True) -> TrainConfig:
    """Local. The validated :class:`TrainConfig` of flat ``values`` (flag names to values: a parsed
    command line, or a stored config).

    ``strict`` refuses options of a sampler or task other than the run's when they are set away
    from their defaults (never silently ignored); stored configs of older releases are read with
    it off. ``where`` is the file a refusal names (a checkpoint), None for the command line.
    """
    values = {key: tuple(value) if isinstance(value, list) else value for key, value in values.items()}
    sampler_name, task_name = values.get("sampler", "neighbor"), values.get("task", "node")
    if sampler_name not in SAMPLERS:
        raise InputError(where, f"unknown sampler (choose from {', '.join(SAMPLERS)})", "--sampler", sampler_name)
    if task_name not in TASKS:
        raise InputError(where, f"unknown task (choose from {', '.join(TASKS)})", "--task", task_name)
    spec, task = SAMPLERS[sampler_name], TASKS[task_name]
    if strict:
        refuse_foreign_options(values, spec, task)
    model = options_from(ModelConfig, values)
    if model.model not in MODELS:
        raise InputError(where, f"unknown model (choose from {', '.join(MODELS)})", "--model", model.model)
    sampler_options = options_from(spec.options, values) if spec.options is not None else None
    config = TrainConfig(
        seed=values.get("seed", 0), input=options_from(InputConfig, values),
        model=replace(model, layers=model_depth(model.layers, spec, sampler_options, where)),
        sampler=SamplerConfig(sampler_name, sampler_options),
        task=TaskConfig(task_name, options_from(task.options, values) if task.options is not None else None),
        optimizer=options_from(OptimizerConfig, values), evaluation=options_from(EvaluationConfig, values),
        output=options_from(OutputConfig, values),
        runtime=options_from(RuntimeConfig, values, plugins=tuple(values.get("plugins", ()))))
    config = settle_kernels(config, values.get("kernels"), where)
    check_requirements(config, spec, where)
    check_settings(config, task, where)
    return config


def _has_kernels() -> bool:
    return any(f.name == "kernels" for f, _ in declared(ModelConfig))


def settle_kernels(config, kernels, where=None) -> TrainConfig:
    """Local. ``config`` with ``--device auto`` resolved on this process and the layers' kernels
    settled: ``kernels`` as given, else the torch kernels on a GPU and the model's default on the
    CPU; the compiled kernels on a GPU are refused in one line."""

    device = device_name(config.runtime.device)
    config = replace(config, runtime=replace(config.runtime, device=device))
    if not _has_kernels():
        return config
    if kernels is None:
        kernels = "torch" if device == "cuda" else (ModelConfig().kernels or "compiled")
    elif device == "cuda" and kernels == "compiled":
        raise InputError(where, "the compiled kernels run on the CPU only: on --device cuda the layers take their "
                         "torch kernels (leave --kernels out, or give --kernels torch)", "--kernels", kernels)
    return replace(config, model=replace(config.model, kernels=kernels))


def refuse_foreign_options(values, spec, task):
    """Local. Refuse an option of another sampler or task than the run's, set away from its default."""
    own = {f.name for options in (spec.options, task.options) if options is not None for f, _ in declared(options)}
    owners = {}  # option field -> (field, {"--sampler": [names], "--task": [names]})
    for kind, registry in (("--sampler", SAMPLERS), ("--task", TASKS)):
        for name, entry in registry.items():
            for f, _ in declared(entry.options) if entry.options is not None else ():
                owners.setdefault(f.name, (f, {}))[1].setdefault(kind, []).append(name)
    for name, (f, users) in owners.items():
        if name not in own and name in values and values[name] != f.default:
            where = " or ".join(f"{kind} {'|'.join(names)}" for kind, names in users.items())
            raise InputError(None, f"applies to {where} only", flag_of(f), _shown(values[name]))


def _shown(value):
    return ",".join(map(str, value)) if isinstance(value, tuple) else value


def model_depth(layers, spec, options, where=None) -> int:
    """Local. The model's layer count: ``--layers``, else what the sampler's options imply (one
    fanout per layer), else 2; refused when the two disagree."""
    implied = spec.layers(options) if spec.layers is not None else None
    depth = layers or implied or 2
    if implied is not None and implied != depth:
        value = _shown(getattr(options, spec.layers_flag[2:].replace("-", "_")))
        raise InputError(where, f"needs one {'fanout' if spec.layers_flag == '--fanouts' else 'size'} per layer "
                         f"({depth} layers)", spec.layers_flag, value)
    return depth


def check_requirements(config, spec, where=None):
    """Local. Refuse settings the run's sampler cannot work with (its ``requires``)."""
    flat = config.flat()
    defaults = default_values()
    for setting, wanted, why in spec.requires:
        if setting not in flat and wanted == AT_DEFAULT:
            continue  # an option of another task than the run's: not set
        value = flat.get(setting)
        ok = value == defaults.get(setting) if wanted == AT_DEFAULT else value == wanted
        if not ok:
            raise InputError(where, f"does not apply to --sampler {spec.name} ({why})",
                             "--" + setting.replace("_", "-"), _shown(value))


def default_values() -> dict:
    """Local. Every option's default, by name (every part, sampler and task)."""
    defaults = {"sampler": SamplerConfig().name, "task": TaskConfig().name, "plugins": ()}
    classes = [TrainConfig, *PARTS.values()] + [s.options for s in SAMPLERS.values() if s.options is not None] + \
        [t.options for t in TASKS.values() if t.options is not None]
    for cls in classes:
        for f, _ in declared(cls):
            defaults.setdefault(f.name, f.default)
    return defaults


def check_settings(config, task, where=None):
    """Local. Refuse settings that contradict each other (one line naming the flag)."""
    optimizer, evaluation, output = config.optimizer, config.evaluation, config.output
    if optimizer.bucket_mb != 1.0 and not optimizer.overlap:
        raise InputError(where, "applies to --overlap only", "--bucket-mb", optimizer.bucket_mb)
    kind, _ = parse_compression(optimizer.grad_compress)
    if optimizer.overlap and kind != "none":
        raise InputError(where, "--overlap reduces float32 buckets; it does not combine with compression",
                         "--grad-compress", optimizer.grad_compress)
    if optimizer.average_every > 1 and (optimizer.overlap or kind != "none" or optimizer.staleness):
        raise InputError(where, "averages parameters, reducing no gradient; it does not combine with --overlap, "
                         "--grad-compress or --staleness", "--average-every", optimizer.average_every)
    if optimizer.staleness and (optimizer.overlap or kind != "none"):
        raise InputError(where, "reduces whole float32 gradients without blocking; it does not combine with "
                         "--overlap or --grad-compress", "--staleness", optimizer.staleness)
    if optimizer.sync == "async":
        check_async(config, kind, where)
    if evaluation.metric is not None and evaluation.metric not in task.metrics:
        owners = [name for name, other in TASKS.items() if evaluation.metric in other.metrics]
        other = f"a metric of --task {'|'.join(owners)}: use it with that task" if owners \
            else f"not a metric of --task {task.name} (choose from {', '.join(task.metrics)})"
        raise InputError(where, f"is {other}", "--metric", evaluation.metric)
    if evaluation.refit_folds and not task.folds_nodes:
        raise InputError(where, f"deals node masks into folds, and --task {task.name} trains on no node mask: train "
                         "without it", "--refit-folds", evaluation.refit_folds)
    if evaluation.refit_folds and evaluation.eval_every == "never":
        raise InputError(where, "chooses the epoch count on validation figures: train with --eval-every 1 (or auto)",
                         "--eval-every", evaluation.eval_every)
    if evaluation.refit_folds and output.resume:
        raise InputError(where, "a cross-validated run starts from its first fold: train without --resume (its "
                         "last run still checkpoints)", "--refit-folds", evaluation.refit_folds)
    if (output.resume or output.checkpoint_every) and not output.checkpoint_dir:
        raise InputError(where, "--resume and --checkpoint-every need --checkpoint-dir", "--checkpoint-dir")
    if config.runtime.device == "cuda":

        refuse_on_device(config, where)


def check_async(config, compression, where=None):
    """Local. Refuse what ``--sync async`` cannot do (one line naming the flag)."""
    optimizer = config.optimizer
    if optimizer.overlap or compression != "none" or optimizer.staleness or optimizer.average_every > 1:
        raise InputError(where, "reduces no gradient; it does not combine with --overlap, --grad-compress, "
                         "--staleness or --average-every", "--sync", optimizer.sync)
    if config.input.embed_dim:
        raise InputError(where, "steps dense parameters only: a learnable embedding's sparse optimizer meets "
                         "every rank each step (train without --embed-dim, or with --sync allreduce)", "--sync",
                         optimizer.sync)
    if sampler_spec(config.sampler.name).history:
        raise InputError(where, f"lets ranks run apart, and --sampler {config.sampler.name} updates its history "
                         "with every rank each step: use --sync allreduce", "--sync", optimizer.sync)


def stored_config(record, where=None) -> TrainConfig:
    """Local. The :class:`TrainConfig` a checkpoint stored: the nested record of :meth:`TrainConfig.as_dict`,
    or the flat one of older releases (the flags plus what the dataset decided)."""
    if isinstance(record.get("model"), dict):
        load_plugins(record.get("runtime", {}).get("plugins", ()))  # what the run registered, registered again
        values = {"seed": record.get("seed", 0)}
        for name, part in record.items():
            if isinstance(part, dict):
                values.update({key: value for key, value in part.items() if key != "name"})
                if name in ("sampler", "task"):
                    values[name] = part["name"]
    else:  # flat: its "task" is the kind of target ("multiclass", ...), the task's name for the other tasks
        values = dict(record, task=record["task"] if record.get("task") in TASKS else TaskConfig().name)
        values.setdefault("metrics_file", values.pop("metrics", None))
    known = default_values()
    return train_config({key: value for key, value in values.items() if key in known}, where, strict=False)


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


#: a config file is a few dozen keys; anything larger is not one (and is never read whole)
MAX_CONFIG_BYTES = 1 << 20


def read_config(path, parser):
    """Local. Keys of a TOML/YAML file as argparse defaults of ``parser`` (dashes or underscores)."""
    return config_defaults(path, read_config_file(path), parser)


def read_config_file(path) -> dict:
    """Local. The keys and values of a TOML/YAML config file.

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
    return values


def config_plugins(values) -> list:
    """Local. The ``plugin`` key of a config file's ``values``, as a list of module names."""
    plugins = values.get("plugin", [])
    return [plugins] if isinstance(plugins, str) else list(plugins)


def config_defaults(path, values, parser) -> dict:
    """Local. A config file's ``values`` as argparse defaults, each checked as its flag would be."""
    known = set(vars(parser.parse_args([])))  # every flag, at its default
    actions = parser.flags
    renamed = {old.lstrip("-").replace("-", "_"): action.dest for action in actions.values()
               for old in action.option_strings[1:] if old.startswith("--")}
    defaults = {}
    for key, value in values.items():
        dest = str(key).replace("-", "_")
        if dest == "plugin":
            continue  # imported before the parser was built (config_plugins)
        if dest in renamed:
            note_deprecated(parser.prog, f"config key '{key}'", "'" + renamed[dest] + "'")
            dest = renamed[dest]
        if dest not in known or dest in ("config", "plugins"):
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


@dataclass(frozen=True)
class EvaluateConfig:
    """Local. What ``hpcgnn evaluate`` scores and writes."""

    data: str | None = option(None, "partitioned dataset directory")
    checkpoint: str | None = option(None, "checkpoint file written by hpcgnn train, or a checkpoint directory: its "
                                    "best checkpoint (the epoch the run selected and reported; its latest if it has "
                                    "none)")
    latest: bool = option(False, "score the checkpoint directory's latest checkpoint (what --resume continues from) "
                          "instead of its best")
    batch_size: int = option(10_000, "nodes per inference batch", type=COUNT)
    precision: str | None = option(None, "the layers' arithmetic (see hpcgnn train --precision); default: the "
                                   "checkpoint's", choices=PRECISIONS)
    metric: str | None = option(None, "reported per split beside accuracy and loss (node checkpoints; a link "
                                "checkpoint reports every link metric); default: the checkpoint's",
                                choices=tuple(dict.fromkeys(m for task in TASKS.values() for m in task.metrics)))
    save_embeddings: str | None = option(None, "write each rank's nodes to DIR/embeddings-RANK.h5: orig_id (the "
                                         "input file's id), gid and embedding (the output of --embedding-layer); "
                                         "format in hpcgnn.training.outputs", metavar="DIR")
    embedding_layer: int = option(-1, "which layer's output --save-embeddings writes: 1..L, or counted from the end "
                                  "(-1: the last layer, the logits; -2: the last hidden layer)", metavar="N",
                                  type=Domain(int, ge=-MAX_LAYERS, le=MAX_LAYERS, nonzero=True))
    save_predictions: bool = option(False, "add each node's predicted class ('prediction') and class probabilities "
                                    "('probability') to the --save-embeddings files")
    watchdog_s: float = option(DEFAULT_TIMEOUT_S, "end the job, naming the ranks at fault, when some rank makes no "
                               "progress (no inference batch) for this many seconds (0: never; default "
                               f"{DEFAULT_TIMEOUT_S:g})", type=WATCHDOG_S)
    device: str = option("cpu", "where inference computes: cuda (one GPU per rank, as hpcgnn train --device cuda; "
                         "the layers take their torch kernels), cpu, or auto (cuda where torch sees a GPU); a "
                         "checkpoint scores alike on either, whichever device trained it", choices=DEVICES)


def build_evaluate_parser():
    """Local. The ``hpcgnn evaluate`` argument parser."""
    p = CommandParser(prog="hpcgnn evaluate",
                      description="Full-neighbourhood distributed inference of a trained checkpoint.")
    add_options(p, EvaluateConfig)
    return p


def parse_evaluate_config(argv=None) -> EvaluateConfig:
    """Local. The :class:`EvaluateConfig` of ``hpcgnn evaluate``'s flags."""
    config = options_from(EvaluateConfig, vars(build_evaluate_parser().parse_args(argv)))
    for flag, value in (("--data", config.data), ("--checkpoint", config.checkpoint)):
        if not value:
            raise InputError(None, "is required", flag)
    return config
