"""The one error type of the data layer: it names the file, row and column at fault."""

from __future__ import annotations


class OfflineDataError(ValueError):
    """Bad offline data: missing or corrupt file, wrong schema, unsafe or malformed payload."""

    def __init__(self, message: str, *, file: str | None = None, row: int | None = None,
                 column: str | None = None):
        where = []
        if file is not None:
            where.append(f"file {file!r}")
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.file, self.row, self.column = file, row, column
