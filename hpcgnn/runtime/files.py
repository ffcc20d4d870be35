"""Write-then-rename helpers: a reader never sees a half-written file or directory."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid


@contextlib.contextmanager
def atomic_path(path, suffix=""):
    """Local. Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    On an exception the temporary file is removed and ``path`` is left untouched.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp" + suffix,
                               dir=directory)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a dataset should be shareable
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_temp_dir(final_dir):
    """Local. A fresh, empty sibling directory of ``final_dir`` to build it in."""
    final_dir = os.path.abspath(os.fspath(final_dir))
    os.makedirs(os.path.dirname(final_dir), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(final_dir) + ".tmp-",
                           dir=os.path.dirname(final_dir))
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


def replace_dir(tmp_dir, final_dir):
    """Local. Move a finished directory onto ``final_dir``, replacing an older one if present."""
    final_dir = os.fspath(final_dir)
    if os.path.exists(final_dir):
        old = final_dir.rstrip("/") + ".old-" + uuid.uuid4().hex[:12]
        os.replace(final_dir, old)
        os.replace(tmp_dir, final_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp_dir, final_dir)
