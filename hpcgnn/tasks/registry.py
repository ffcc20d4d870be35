"""Tasks by name: what ``--task NAME`` trains and how it is scored.

A task is a subclass of :class:`Task` in a module of its own, made available with one
:func:`register_task` call; its options dataclass becomes its flags and config keys. The trainer
and ``hpcgnn evaluate`` call only the methods below, so nothing else names a task.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from hpcgnn.runtime.registry import Registry
from hpcgnn.tasks.metrics import choose_metric


@dataclass(frozen=True)
class DatasetFacts:
    """Local. What the dataset decides of a run: its node count, feature width, outputs per node
    (classes; 0 for tasks without classes), the task's kind of target (``multiclass``,
    ``binary``, ``multilabel``, ``link``, ...) and the model's input width (features plus the
    learnable embedding). On a typed graph, also the feature width of every node type
    (``type_widths``, 0 for a type whose input is the learned embedding) and the number of
    relations; the model's input width is then the width every type is projected to."""

    num_nodes: int
    feat_dim: int
    num_classes: int
    kind: str
    in_dim: int
    type_widths: tuple = ()
    num_relations: int = 1

    def __post_init__(self):
        object.__setattr__(self, "type_widths", tuple(int(w) for w in self.type_widths))  # a list once stored

    @property
    def typed(self) -> bool:
        return bool(self.type_widths)

    def as_dict(self) -> dict:
        """Local. The facts as plain data (the checkpoint's and the metrics header's record)."""
        return dict(asdict(self), type_widths=list(self.type_widths))


class Task:
    """Local. The protocol of a task: subclasses set the class attributes and override the methods.

    Attributes
    ----------
    name : str
        The ``--task`` value.
    options : type or None
        Its frozen options dataclass (flags ``--task NAME: ...``).
    summary : str
        One sentence for ``--task``'s help.
    metrics : tuple of str
        The ``--metric`` values it reports (the first: the default unless :meth:`default_metric`
        says otherwise).
    scored : str
        What the collapse check watches, in words ("nodes' logits").
    fit_keys : tuple of str
        Settings a checkpoint must share with the run that resumes it, besides the model's shape.
    folds_nodes : bool
        Whether its training and validation sets are node masks that ``--refit-folds`` may deal
        into cross-validation folds (:func:`hpcgnn.graph.fold_of_nodes`).
    """

    name = ""
    options = None
    summary = ""
    metrics = ()
    scored = "outputs"
    fit_keys = ()
    folds_nodes = False

    def settle(self, config, graph):
        """Local. ``config`` with what the dataset settles before anything is built (default: unchanged)."""
        return config

    def facts(self, graph, config, comm) -> DatasetFacts:
        """Collective over comm. Refuse a dataset without what the task reads; what it decides."""
        raise NotImplementedError

    def choose_metric(self, metric, facts, where=None) -> str:
        """Local. The metric the run reports and selects by: ``metric`` (``--metric``) if it suits
        the dataset, else the default of the facts' kind of target; refused in one line otherwise."""
        return choose_metric(metric, facts.kind, where)

    def build_model(self, config, facts):
        """Local. The model to train, from ``config.model`` and the dataset's facts."""
        raise NotImplementedError

    def build_loader(self, graph, config, sampler, prefetch):
        """Collective over graph.comm. The training batches of this rank."""
        raise NotImplementedError

    def build_loss(self, model, graph, config, facts):
        """Collective over graph.comm. ``loss.batch(model_output, batch) -> (loss, correct, seen)``."""
        raise NotImplementedError

    def evaluate(self, model, graph, config, batch_size, inputs, on_layer=None) -> dict:
        """Collective over graph.comm. The run's validation and test figures (``{split}_{metric}``),
        with ``constant_share`` for the collapse check, and ``"rows"``: this rank's rows of the
        model's output when ``on_layer`` is given (for saved outputs)."""
        raise NotImplementedError

    def describe(self, config, facts) -> str:
        """Local. The task in a few words, for the run's first line."""
        return self.name

    def check_evaluation(self, graph, data, options) -> None:
        """Local. Refuse, before inference, a dataset or an ``hpcgnn evaluate`` flag that does not
        suit the task's checkpoints."""


#: name -> Task instance, in registration order (the order of ``--task``'s choices)
TASKS = Registry("task")


def register_task(task: Task) -> Task:
    """Local. Make ``task`` (an instance) available as ``--task task.name``."""
    return TASKS.add(task.name, task)


def task_named(name) -> Task:
    """Local. The registered task ``name`` (KeyError naming the choices if none)."""
    return TASKS.named(name)
