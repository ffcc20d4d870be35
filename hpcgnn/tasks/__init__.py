"""What a run trains and how it is scored: a task per module, registered by name.

:mod:`.node` (node classification) and :mod:`.link` (link prediction) are the built-in tasks;
a new task is a module with a :class:`~.registry.Task` subclass and one
:func:`~.registry.register_task` call, imported below (or from a ``--plugin`` module). The
pieces tasks share: :mod:`.inference` (full-neighbourhood layer-wise inference), :mod:`.metrics`
and :mod:`.link_metrics` (figures reduced over ranks), :mod:`.collapse` (dead-model checks).
"""
from hpcgnn.tasks import link, node  # noqa: F401 (registration, in the order of --task's choices)
from hpcgnn.tasks.registry import TASKS, DatasetFacts, Task, register_task, task_named

__all__ = ["TASKS", "DatasetFacts", "Task", "register_task", "task_named"]
