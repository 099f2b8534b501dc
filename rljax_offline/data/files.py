"""Where data lives: resolving paths, globs, folders and URIs on any `pyarrow.fs` filesystem,
and atomic, never-overwriting file writes.

A write goes to a hidden temp file named after its host and process (`.<name>.<host>-<pid>.
<random>.tmp`) and is published under its final name only when complete; on a local disk the
publish is a hard link, which fails instead of replacing a file that appeared meanwhile (two
writers can never overwrite each other). Temp files left by a killed writer are removed by the
next writer into the same folder once their process is gone.
"""

from __future__ import annotations

import glob as globlib
import os
import socket
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from rljax_offline.errors import IntegrityError, OfflineDataError, OutputExistsError

PARQUET_SUFFIX = ".parquet"
# Prefix of our keys in a Parquet file's key-value metadata (format version, spaces, ...).
META_PREFIX = "rljax_offline."


def _filesystem(path: str, filesystem: Any, filesystem_kwargs: dict | None):
    """The filesystem and the path inside it for a local path or a URI (`s3://`, `gs://`...)."""
    if filesystem is not None:
        if isinstance(filesystem, str):
            filesystem = {"s3": pafs.S3FileSystem, "gcs": pafs.GcsFileSystem,
                          "local": pafs.LocalFileSystem}[filesystem](**(filesystem_kwargs or {}))
        if "://" in path:
            path = path.split("://", 1)[1]
        return filesystem, path
    if "://" in path and not path.startswith("file://"):
        try:
            fs, inner = pafs.FileSystem.from_uri(path)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types here
            raise OfflineDataError(f"cannot open URI {path!r}: {e}") from None
        return fs, inner
    if path.startswith("file://"):
        path = path[len("file://"):]
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))


def resolve_files(input_: Any, *, filesystem: Any = None,
                  filesystem_kwargs: dict | None = None) -> list[tuple[Any, str]]:
    """Every Parquet file named by `input_` (a file, a folder searched recursively, a glob, a
    URI, or a list of these) as sorted `(filesystem, path)` pairs.

    Temp files of unfinished writes (hidden names) are never listed.

    Args:
      input_: a path, folder, glob or URI (`s3://`, `gs://`, ...), or a list of them.
      filesystem: a `pyarrow.fs.FileSystem`, or a name (`"s3"`, `"gcs"`); default: inferred
        from each URI (local paths: the local filesystem).
      filesystem_kwargs: keyword arguments that build `filesystem` from its name.

    Returns:
      `(filesystem, path)` pairs, sorted by path.

    Raises:
      OfflineDataError: a path that does not exist or holds no Parquet file.
    """
    items: Sequence = [input_] if isinstance(input_, (str, os.PathLike)) else list(input_ or [])
    if not items:
        raise OfflineDataError("no input given: pass a file, folder, glob, URI or a list")
    out: list[tuple[Any, str]] = []
    for item in items:
        item = os.fspath(item)
        fs, path = _filesystem(item, filesystem, filesystem_kwargs)
        if isinstance(fs, pafs.LocalFileSystem) and any(c in path for c in "*?["):
            matches = sorted(globlib.glob(path, recursive=True))
            if not matches:
                raise OfflineDataError(f"glob {item!r} matches no file")
            for m in matches:
                out.extend(resolve_files(m, filesystem=fs))
            continue
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise OfflineDataError(f"input {item!r} does not exist")
        if info.type == pafs.FileType.Unknown:
            raise OfflineDataError(f"input {item!r} is not a regular file or folder (a FIFO, "
                                   "socket or device would block or never end); refused")
        if info.type == pafs.FileType.Directory:
            found = [f.path for f in fs.get_file_info(pafs.FileSelector(path, recursive=True))
                     if f.type == pafs.FileType.File and f.path.endswith(PARQUET_SUFFIX)
                     and not os.path.basename(f.path).startswith(".")]
            if not found:
                raise OfflineDataError(f"folder {item!r} holds no .parquet files")
            out.extend((fs, p) for p in sorted(found))
        else:
            out.append((fs, path))
    return out


def display_name(fs: Any, path: str) -> str:
    """`path` as a user wrote it, with its URI scheme (`s3://`, `gs://`) for remote storage.

    Args:
      fs: the file's filesystem.
      path: its path on that filesystem.
    """
    scheme = {"s3": "s3://", "gcs": "gs://"}.get(getattr(fs, "type_name", ""), "")
    return scheme + path


_HOST = socket.gethostname().replace(".", "_").replace("-", "_")[:32] or "host"


def _temp_name(folder: str, name: str) -> str:
    tmp = f".{name}.{_HOST}-{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    return f"{folder}/{tmp}" if folder else tmp


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temps(fs: Any, folder: str) -> list[str]:
    """Removes temp files under `folder` (local disks) left by killed writers of this host
    whose process no longer runs; returns them. Live writers' temp files are kept.

    Args:
      fs: the folder's filesystem (only a local one is cleaned).
      folder: the output folder.
    """
    if not isinstance(fs, pafs.LocalFileSystem) or not os.path.isdir(folder):
        return []
    removed = []
    for root, _, names in os.walk(folder):
        for name in names:
            if not (name.startswith(".") and name.endswith(".tmp")):
                continue
            owner = name[:-len(".tmp")].rsplit(".", 2)
            if len(owner) != 3 or "-" not in owner[1]:
                continue
            host, _, pid = owner[1].rpartition("-")
            if host == _HOST and pid.isdigit() and not _pid_alive(int(pid)):
                try:
                    os.remove(os.path.join(root, name))
                    removed.append(os.path.join(root, name))
                except FileNotFoundError:
                    pass
    return removed


def _publish(fs: Any, tmp: str, path: str) -> None:
    """Moves the finished temp file to `path`, refusing to replace an existing file."""
    if isinstance(fs, pafs.LocalFileSystem):
        fd = os.open(tmp, os.O_RDONLY)  # on disk before it has a visible name
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic and exclusive: fails if `path` exists
        except FileExistsError:
            raise OutputExistsError(f"{path!r} already exists; refusing to overwrite "
                                    "it") from None
        except OSError:  # a filesystem without hard links: check, then rename
            if os.path.lexists(path):
                raise OutputExistsError(f"{path!r} already exists; refusing to overwrite "
                                        "it") from None
            os.replace(tmp, path)
            return
        os.remove(tmp)
        return
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        raise OutputExistsError(f"{path!r} already exists; refusing to overwrite it")
    fs.move(tmp, path)


@contextmanager
def atomic_output(fs: Any, path: str) -> Iterator[Any]:
    """Yields a writable stream to a hidden temp file beside `path`, published as `path` only
    when the block finishes; on error the temp file is removed. A reader never sees half a
    file, and an existing file at `path` is never replaced (`OutputExistsError`).

    Args:
      fs: the filesystem to write on.
      path: the file's final path.

    Raises:
      OutputExistsError: a file already exists at `path`.
    """
    folder, name = os.path.split(path)
    tmp = _temp_name(folder, name)
    fs.create_dir(folder, recursive=True) if folder else None
    stream = fs.open_output_stream(tmp)
    try:
        yield stream
        stream.close()
        _publish(fs, tmp, path)
    except BaseException:
        if not stream.closed:
            stream.close()
        try:
            fs.delete_file(tmp)
        except (OSError, FileNotFoundError):
            pass
        raise


def as_data_error(e: BaseException, name: str, what: str = "cannot be read") -> OfflineDataError:
    """`e` raised while reading file `name` as our named error (named errors pass through).

    Args:
      e: the exception raised while reading.
      name: the file's display name.
      what: what went wrong, completing "file NAME ...".
    """
    if isinstance(e, OfflineDataError):
        return e
    text = str(e).splitlines()[0][:300] if str(e) else ""
    if "checksum" in text.lower() or "crc" in text.lower():
        return IntegrityError(f"page checksum mismatch, the file is damaged: {text}", file=name)
    if isinstance(e, MemoryError):
        return OfflineDataError(f"{what}: decoding would need more memory than the file can "
                                "justify (corrupt size header?)", file=name)
    if isinstance(e, RecursionError):
        return OfflineDataError(f"{what}: nested too deeply", file=name)
    return OfflineDataError(f"{what} (truncated or corrupt?): {type(e).__name__}: {text}",
                            file=name)


def open_parquet(fs: Any, path: str) -> pq.ParquetFile:
    """A Parquet file to read, its page checksums verified; a named error if it is not one.

    Args:
      fs: the file's filesystem.
      path: its path.
    """
    name = display_name(fs, path)
    try:
        return pq.ParquetFile(fs.open_input_file(path), page_checksum_verification=True)
    except FileNotFoundError:
        raise OfflineDataError("file does not exist", file=name) from None
    except Exception as e:  # noqa: BLE001 - pyarrow raises many types for a damaged file
        raise as_data_error(e, name, "not a readable Parquet file") from None
