"""Numeric text tables read in byte blocks: the machinery of the edge-list, node-table and OGB
csv readers.

A block of ``chunk_bytes`` (64 MiB, roughly four million short lines) is read, cut after its
last newline and parsed by numpy's C ``loadtxt``; only the parsed arrays are kept, so a 1 GB
file never becomes a list of Python strings. Plain, gzip-, bzip2- and xz-compressed files are
all accepted: the compression is recognised by its magic bytes, whatever the file is called.
A UTF-8 byte-order mark is skipped; UTF-16 and UTF-32 text (told by its byte-order mark) is
refused in one line.

A file that is not a regular file (a pipe, ``/dev/stdin``, a process substitution's
``/dev/fd/N``) can be read once only. Such an input is opened once per process
(:func:`open_binary`): what a look at its start read (:func:`peek_binary`, format detection)
is replayed to the reader, and a second read of it is refused in one line. Readers that need
to seek or to read the file twice refuse it (:func:`require_regular`).
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import threading
import warnings
import zlib

import numpy as np

from hpcgnn.runtime.errors import InputError

DEFAULT_CHUNK_BYTES = 64 << 20
#: (magic bytes, name, opener of a binary stream or None where the reader cannot decompress it)
COMPRESSIONS = ((b"\x1f\x8b", "gzip", lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")),
                (b"BZh", "bzip2", lambda raw: bz2.BZ2File(raw, "rb")),
                (b"\xfd7zXZ\x00", "xz", lambda raw: lzma.LZMAFile(raw, "rb")),
                (b"\x28\xb5\x2f\xfd", "zstd", None),
                (b"PK\x03\x04", "zip", None))
_MAGIC_BYTES = max(len(magic) for magic, _, _ in COMPRESSIONS)
#: byte-order marks, the longest first (UTF-32LE's starts with UTF-16LE's)
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32LE"), (b"\x00\x00\xfe\xff", "UTF-32BE"),
         (b"\xef\xbb\xbf", "UTF-8"), (b"\xff\xfe", "UTF-16LE"), (b"\xfe\xff", "UTF-16BE"))
_INT64_RANGE = (-(2**63), 2**63 - 1)
# latin-1 maps every byte to one character, so decoding never fails and a stray non-ASCII
# byte surfaces as an unparsable token with its line number instead of a UnicodeDecodeError.
TEXT_ENCODING = "latin-1"
#: what makes a one-pass input readable again
REGULAR_FILE_REMEDY = "write it to a regular file first"


def file_kind(path) -> str | None:
    """Local. None for a regular file (or a directory); else what ``path`` is, in words (``a pipe``,
    ``a character device``, ``a socket``). A missing path is None too: opening it says so."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return ("a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "not a regular file")


def require_regular(path, why):
    """Local. Refuse ``path`` in one line unless it is a regular file (or a directory): ``why``
    says what the reader does that a pipe cannot give (``is read by byte ranges``)."""
    kind = file_kind(path)
    if kind is not None:
        raise InputError(path, f"is {kind}, which can be read only once, but this input {why}; "
                         f"{REGULAR_FILE_REMEDY}", "input", kind)


class _OnePass:
    """The one open stream of an input that is not a regular file, and the bytes a look at its
    start took from it (given back to the next reader)."""

    def __init__(self, path):
        self.fh = open(path, "rb", buffering=0)
        self.kept = b""
        self.read_once = False


_one_pass: dict = {}
_one_pass_lock = threading.Lock()


class _Replay(io.RawIOBase):
    """A stream that gives ``kept`` bytes first, then the rest of ``source``; with ``keep`` the
    bytes it reads are added to ``kept`` for the next reader instead of being used up."""

    def __init__(self, source, keep=False):
        super().__init__()
        self.source, self.keep, self.at = source, keep, 0

    def readable(self):
        return True

    def readinto(self, buffer):
        view = memoryview(buffer).cast("B")
        kept = self.source.kept
        if self.at < len(kept):
            count = min(len(view), len(kept) - self.at)
            view[:count] = kept[self.at:self.at + count]
            self.at += count
            if not self.keep and self.at == len(kept):
                self.source.kept, self.at = b"", 0
            return count
        count = self.source.fh.readinto(view)
        if self.keep and count:
            self.source.kept += bytes(view[:count])
            self.at += count
        return count

    def close(self):
        if not self.keep and not self.closed:
            self.source.read_once = True
            self.source.fh.close()
        super().close()


class _Prefixed(io.RawIOBase):
    """``prefix`` then the rest of ``stream``: what was read to look at a stream's start, put back."""

    def __init__(self, prefix, stream):
        super().__init__()
        self.prefix, self.stream = prefix, stream

    def readable(self):
        return True

    def readinto(self, buffer):
        view = memoryview(buffer).cast("B")
        if self.prefix:
            count = min(len(view), len(self.prefix))
            view[:count], self.prefix = self.prefix[:count], self.prefix[count:]
            return count
        return self.stream.readinto(view)

    def close(self):
        if not self.closed:
            self.stream.close()
        super().close()


def _read_start(stream, size):
    """Up to ``size`` bytes from the start of ``stream`` (fewer only at its end)."""
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _open_raw(path, keep):
    """The file's bytes as they are stored: a fresh handle of a regular file, the one stream of
    anything else."""
    if file_kind(path) is None:
        return open(path, "rb")
    with _one_pass_lock:
        source = _one_pass.get(path)
        if source is None:
            source = _one_pass[path] = _OnePass(path)
    if source.read_once:
        raise InputError(path, "was read once already, and a pipe gives its contents once; "
                         f"{REGULAR_FILE_REMEDY}", "input", file_kind(path))
    return io.BufferedReader(_Replay(source, keep))


def compression_of(path) -> str | None:
    """Local. The compression of the file at ``path`` told by its magic bytes (``gzip``,
    ``bzip2``, ``xz``, ``zstd``, ``zip``), or None for a file stored as it is (or unreadable)."""
    try:
        with _open_raw(os.fspath(path), keep=True) as raw:
            magic = _read_start(raw, _MAGIC_BYTES)
    except (OSError, InputError):
        return None
    return next((name for start, name, _ in COMPRESSIONS if magic.startswith(start)), None)


def open_binary(path, keep=False):
    """Local. Open ``path`` for binary reading: decompressed as its magic bytes say, without a
    UTF-8 byte-order mark.

    Parameters
    ----------
    path : str or os.PathLike
        A plain or compressed (gzip, bzip2, xz) file, or a pipe (read once: see the module
        docstring).
    keep : bool
        Only a look at the start: the bytes read from a pipe are kept for the next reader.

    Returns
    -------
    file object
        Binary stream of the (decompressed) contents.

    Raises
    ------
    InputError
        If the path is missing, a directory, cannot be opened, is compressed in a way the
        readers do not decompress (zstd, zip), holds UTF-16 or UTF-32 text, or is a pipe read
        once already.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise InputError(path, "is a directory, expected a file")
    try:
        raw = _open_raw(path, keep)
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except OSError as exc:
        raise InputError(path, f"cannot open file ({exc.strerror})") from None
    try:
        return _decoded(path, raw)
    except BaseException:
        raw.close()
        raise


def _decoded(path, raw):
    try:
        magic = _read_start(raw, _MAGIC_BYTES)
        stream = _rewound(raw, magic)
        for start, name, opener in COMPRESSIONS:
            if magic.startswith(start):
                if opener is None:
                    raise InputError(path, f"is {name}-compressed, which the readers do not decompress; "
                                     "decompress it first (or recompress it with gzip)", "compression", name)
                stream = opener(stream)
                break
        head = _read_start(stream, 4)
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise InputError(path, f"cannot read file ({exc})") from None
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            if encoding != "UTF-8":
                raise InputError(path, f"is {encoding} text (byte-order mark {bom.hex(' ').upper()}); save it "
                                 f"as UTF-8 or ASCII (iconv -f {encoding} -t UTF-8)", "encoding", encoding)
            return _rewound(stream, head, skip=len(bom))
    return _rewound(stream, head)


def _rewound(stream, start, skip=0):
    """``stream`` from its byte ``skip`` on, ``start`` being what was read of it: seeked back where
    it can be (a regular file), else with ``start[skip:]`` put back in front."""
    if stream.seekable():
        stream.seek(skip)
        return stream
    return io.BufferedReader(_Prefixed(start[skip:], stream), buffer_size=1 << 16)


class TextTable:
    """Local. A numeric text file opened for block-wise parsing.

    Opening consumes leading blank and comment lines, so ``first_line`` (the first line with
    content, comment stripped, or None for a file without data) can be inspected to choose the
    delimiter and header handling before ``blocks`` streams the rest.

    Parameters
    ----------
    path : str or os.PathLike
        Plain or compressed text file, or a pipe (see :func:`open_binary`).
    comment : str or None
        Text after this marker is ignored, and lines starting with it are skipped.
    chunk_bytes : int
        Approximate size of each block handed to the parser.
    """

    def __init__(self, path, comment="#", chunk_bytes=DEFAULT_CHUNK_BYTES):
        self.path = os.fspath(path)
        self.comment = comment or None
        self.chunk_bytes = max(int(chunk_bytes), 1)
        self.first_line = None
        self.first_line_number = 0
        self._pending = b""
        self._fh = open_binary(self.path)
        try:
            self._find_first_line()
        except BaseException:
            self._fh.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Local. Close the underlying file."""
        self._fh.close()

    def strip_comment(self, line):
        """Local. Return ``line`` without its trailing comment and surrounding whitespace."""
        if self.comment:
            line = line.split(self.comment, 1)[0]
        return line.strip()

    def _read(self, size=-1, line=False):
        try:
            return self._fh.readline() if line else self._fh.read(size)
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            raise InputError(self.path, f"cannot read file ({exc})") from None

    def _find_first_line(self):
        number = 0
        while True:
            raw = self._read(line=True)
            if not raw:
                return
            number += 1
            content = self.strip_comment(raw.decode(TEXT_ENCODING))
            if content:
                self.first_line, self.first_line_number, self._pending = content, number, raw
                return

    def blocks(self, skip_first=False):
        """Local. Yield ``(block, line_number)`` chunks of whole lines, starting at ``first_line``.

        Parameters
        ----------
        skip_first : bool
            Leave ``first_line`` out (it is a header).

        Yields
        ------
        (bytes, int)
            Raw bytes of complete lines and the 1-based file line number of the first one.
        """
        line_number = self.first_line_number
        carry = self._pending
        if skip_first:
            carry, line_number = b"", line_number + 1
        while True:
            data = self._read(self.chunk_bytes)
            if not data:
                if carry.strip():
                    yield carry, line_number
                return
            buffer = carry + data
            cut = buffer.rfind(b"\n") + 1
            if cut == 0:
                carry = buffer  # a line longer than one block: keep reading until it ends
                continue
            block, carry = buffer[:cut], buffer[cut:]
            yield block, line_number
            line_number += block.count(b"\n")


def split_tokens(line, delimiter):
    """Local. Split one line on ``delimiter`` (None = runs of whitespace), stripping each token."""
    return [token.strip() for token in line.split(delimiter)] if delimiter else line.split()


def is_number(token, integer=False):
    """Local. True if numpy's parser would accept ``token`` as an int64 (``integer``) or a float."""
    if "_" in token:  # Python accepts 1_000, numpy does not
        return False
    try:
        value = int(token) if integer else float(token)
    except ValueError:
        return False
    return not integer or _INT64_RANGE[0] <= value <= _INT64_RANGE[1]


def parse_block(table, text, line_number, dtype, delimiter, names, integer_columns, exact=True):
    """Local. Parse one block with numpy's C reader; on failure raise InputError naming the line.

    Parameters
    ----------
    table : TextTable
        The file the block came from (for its path and comment marker).
    text : bytes
        Whole lines, as yielded by ``TextTable.blocks``.
    line_number : int
        File line number of the block's first line.
    dtype : numpy.dtype
        Plain dtype (result is 2-D) or structured dtype with one field per column (result 1-D).
    delimiter : str or None
        Column separator; None splits on whitespace.
    names : sequence of str
        Column names used in error messages; ``len(names)`` columns are parsed.
    integer_columns : set of int
        Column positions that must hold integers.
    exact : bool
        Require exactly ``len(names)`` columns per line (else extra columns are ignored).

    Returns
    -------
    numpy.ndarray
        Parsed rows (possibly zero of them for a block of comments).
    """
    structured = np.dtype(dtype).names is not None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="loadtxt: input contained no data")
        try:
            # BytesIO shares the block's buffer; a StringIO would hold a 4-byte-per-char copy.
            rows = np.loadtxt(io.BytesIO(text), dtype=dtype, delimiter=delimiter, encoding=TEXT_ENCODING,
                              comments=table.comment, ndmin=1 if structured else 2,
                              usecols=None if exact else tuple(range(len(names))))
        except ValueError as exc:
            _raise_for_bad_line(table, text, line_number, delimiter, names, integer_columns, exact, exc)
    if not structured and rows.size and rows.shape[1] != len(names):
        _raise_for_bad_line(table, text, line_number, delimiter, names, integer_columns, exact, None)
    return rows


def _raise_for_bad_line(table, text, line_number, delimiter, names, integer_columns, exact, exc):
    # Error path only, so a Python loop over the block's lines is fine here.
    text = text.decode(TEXT_ENCODING)
    for offset, line in enumerate(text.split("\n")):
        content = table.strip_comment(line)
        if not content:
            continue
        where = line_number + offset
        tokens = split_tokens(content, delimiter)
        if len(tokens) < len(names) or (exact and len(tokens) != len(names)):
            field = names[min(len(tokens), len(names) - 1)]
            raise InputError(table.path, f"line {where} has {len(tokens)} columns, expected {len(names)}",
                             field, content)
        for column, (name, token) in enumerate(zip(names, tokens)):
            integer = column in integer_columns
            if not is_number(token, integer):
                kind = "an integer" if integer else "a number"
                raise InputError(table.path, f"not {kind} on line {where}", name, token)
    last = line_number + text.count("\n")
    raise InputError(table.path, f"cannot parse lines {line_number}-{last} ({exc})")


def read_numeric_table(path, dtype, *, delimiter=",", names=None, comment="#", expected_rows=None,
                       expected_from="expected", order="C", allow_empty=False,
                       chunk_bytes=DEFAULT_CHUNK_BYTES):
    """Local. Read a headerless numeric text table (plain or gzip) into one 2-D array, blockwise.

    Parameters
    ----------
    path : str or os.PathLike
        The table; its column count is fixed by the first data line.
    dtype : numpy.dtype
        Element type; integer dtypes reject non-integer tokens.
    delimiter : str or None
        Column separator; None splits on whitespace.
    names : sequence of str, optional
        Column names for error messages; if given, the column count must match.
    comment : str or None
        Comment marker.
    expected_rows : int, optional
        Known row count: the result is allocated once and filled, and a different count is an
        error citing ``expected_from``.
    expected_from : str
        Where ``expected_rows`` came from, for the error message.
    order : {"C", "F"}
        Memory order of the result; "F" makes each column a contiguous 1-D view.
    allow_empty : bool
        Return a (0, 1) array for a file without data lines instead of raising.
    chunk_bytes : int
        Block size for the C parser.

    Returns
    -------
    numpy.ndarray
        Array of shape (rows, columns).
    """
    parts, filled, out, width = [], 0, None, 1
    for rows in numeric_blocks(path, dtype, delimiter=delimiter, names=names, comment=comment,
                               allow_empty=allow_empty, chunk_bytes=chunk_bytes):
        width = rows.shape[1]
        if out is None and expected_rows is not None:
            out = np.empty((expected_rows, width), dtype, order=order)
        if not rows.shape[0]:
            continue
        if expected_rows is None:
            parts.append(rows)
        elif filled + rows.shape[0] > expected_rows:
            raise InputError(os.fspath(path), f"more rows than the {expected_rows} {expected_from}",
                             "rows", f">{expected_rows}")
        else:
            out[filled:filled + rows.shape[0]] = rows
        filled += rows.shape[0]
    if expected_rows is None:
        out = np.empty((filled, width), dtype, order=order)
        start = 0
        while parts:  # pop as we copy so the blocks are freed one by one
            block = parts.pop(0)
            out[start:start + block.shape[0]] = block
            start += block.shape[0]
    elif filled != expected_rows:
        raise InputError(os.fspath(path), f"has {filled} rows but {expected_rows} {expected_from}", "rows", filled)
    return out

def numeric_blocks(path, dtype, *, delimiter=",", names=None, comment="#", allow_empty=False,
                   chunk_bytes=DEFAULT_CHUNK_BYTES):
    """Local. The rows of a headerless numeric text table (plain or gzip), a block at a time.

    Yields 2-D arrays of ``chunk_bytes`` worth of lines each (the first one, for a file without
    data lines and ``allow_empty``, an empty (0, 1) block); the column count is fixed by the
    first data line and must match ``names`` if given. Errors name the file line.
    """
    integer = np.issubdtype(np.dtype(dtype), np.integer)
    with TextTable(path, comment, chunk_bytes) as table:
        if table.first_line is None:
            if allow_empty:
                yield np.empty((0, 1), dtype=dtype)
                return
            raise InputError(table.path, "file has no data lines", "rows", 0)
        width = len(split_tokens(table.first_line, delimiter))
        if names is None:
            names = [f"column {j + 1}" for j in range(width)]
        names = list(names)
        if width != len(names):
            raise InputError(table.path, f"line {table.first_line_number} has {width} columns, "
                             f"expected {len(names)}", names[min(width, len(names) - 1)], table.first_line)
        integer_columns = set(range(width)) if integer else set()
        for text, line_number in table.blocks():
            rows = parse_block(table, text, line_number, dtype, delimiter, names, integer_columns)
            yield rows.reshape(-1, width)
