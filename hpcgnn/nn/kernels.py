"""Which kernels the layers compute with: the compiled CPU kernels or torch operations.

Every aggregation, attention and dropout of the layers goes through :mod:`.aggregate`,
:mod:`.attention` and :mod:`.dropout`, and each of those picks its path per call by
:func:`path_for`:

- ``compiled`` (default): the compiled kernels of :mod:`hpcgnn._spmm`, :mod:`hpcgnn._attention` and
  :mod:`hpcgnn._dense` on CPU memory;
- ``torch``: torch operations on any device (a sparse CSR product, scatter and index ops, the same
  counter-based dropout mask computed by integer ops), the GPU path, selectable on the CPU
  (``--kernels torch``) so that it is tested everywhere.

A tensor on a device other than the CPU always takes the torch path, whatever the setting. A
model carries its choice (:func:`set_kernels`, as ``--precision`` with
:func:`~hpcgnn.nn.models.set_precision`) and its forward pass runs under :func:`using`; each
operation fixes its path when it runs forward, and its backward pass follows that path.
"""
from __future__ import annotations

import contextlib
import contextvars

#: the layers' kernel choices (``--kernels``)
KERNELS = ("compiled", "torch")

_current = contextvars.ContextVar("hpcgnn_kernels", default="compiled")


def check(name) -> str:
    """Local. ``name`` if it is one of :data:`KERNELS`, else ValueError."""
    if name not in KERNELS:
        raise ValueError(f"unknown kernels {name!r} ({', '.join(KERNELS)})")
    return name


def current() -> str:
    """Local. The kernels chosen for this context (``compiled`` outside any :func:`using`)."""
    return _current.get()


@contextlib.contextmanager
def using(name):
    """Local. Run the enclosed operations with kernels ``name`` (one of :data:`KERNELS`)."""
    token = _current.set(check(name))
    try:
        yield
    finally:
        _current.reset(token)


def path_for(*tensors) -> str:
    """Local. The path an operation on ``tensors`` takes: ``torch`` when one of them is off the
    CPU, else the current choice."""
    if any(t.device.type != "cpu" for t in tensors):
        return "torch"
    return current()


def set_kernels(model, name):
    """Local. Set the kernels of ``model``'s layer stacks (one of :data:`KERNELS`), a link or typed
    model's stack included: every module whose class declares a ``kernels`` attribute
    (:class:`~hpcgnn.nn.models.LayerStack`); their forward passes then run under :func:`using`."""
    check(name)
    for module in model.modules():
        if "kernels" in dir(type(module)):
            module.kernels = name
