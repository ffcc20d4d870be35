"""The partitioned dataset's format, shared by the tools that write it and the runtime that reads it.

:mod:`~hpcgnn.format.ondisk` is the on-disk layout (``meta.json``, the part files, the HDF5 objects
a part file may hold, and :class:`~hpcgnn.format.ondisk.PartFile`, the one reader of part data);
:mod:`~hpcgnn.format.fields` names the node fields (split masks, input ids, the unlabelled label)
and the kind each must be; :mod:`~hpcgnn.format.feat_dtype` encodes 2-byte features. The layer
sits below ``store/`` and ``graph/`` and above ``runtime/`` only: :mod:`hpcgnn.prep` imports it to
write datasets, the runtime to read them, and the runtime never imports :mod:`hpcgnn.prep`.
"""
