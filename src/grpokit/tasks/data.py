"""Read task data: a local .jsonl / .json / .csv / .parquet file, a local dataset folder, or a hub id.

Every row comes back with where it was found ("line 3", "row 7"), so an error about a row can name
the file, the row and the column. Hub ids and folders go through `datasets.load_dataset`; local files
are read directly (no cache directory, exact line numbers).
"""

from __future__ import annotations

import contextlib
import csv
import json
from pathlib import Path
from typing import Any

from grpokit import shipped
from grpokit.models import hub

FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")

Record = tuple[str, dict[str, Any]]  # (where, row)


def is_local_file(source: str) -> bool:
    return Path(source).suffix.lower() in FILE_SUFFIXES


def read_file(path: Path) -> list[Record]:
    """Rows of one local file (a relative path not found here is looked for among the shipped data,
    `grpokit.shipped.locate`); errors name the file and the line or row."""
    path = shipped.locate(path)
    if not path.is_file():
        raise ValueError(f"dataset file not found: {path} (relative paths start at the current directory)")
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise ValueError(f"{path}: use one of {', '.join(FILE_SUFFIXES)}")
    if suffix == ".parquet":
        return _read_parquet(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 (bad byte at offset {err.start}); re-save it as UTF-8") from err
    if suffix == ".csv":
        rows: list[Record] = [(f"row {n}", dict(r)) for n, r in enumerate(csv.DictReader(text.splitlines()), start=2)]
    elif suffix == ".json" and text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON: {err.msg} at line {err.lineno}") from err
        rows = [(f"item {n}", r) for n, r in enumerate(data)]
    else:  # JSON Lines (.jsonl, or .json holding one object per line)
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append((f"line {number}", json.loads(line)))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path} line {number} is not valid JSON: {err.msg}") from err
    for where, row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{path} {where} is not a JSON object")
    if not rows:
        raise ValueError(f"{path} has no rows")
    return rows


def _read_parquet(path: Path) -> list[Record]:
    # slow import: pyarrow, for Parquet files only
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise ValueError(f"{path} is not a readable Parquet file: {err}") from err
    rows = [(f"row {n}", r) for n, r in enumerate(table.to_pylist())]
    if not rows:
        raise ValueError(f"{path} has no rows")
    return rows


def load_split(source: str, split: str, subset: str | None = None) -> list[Record]:
    """One split of a hub dataset id or a local dataset folder, through `datasets.load_dataset`
    (a folder that `save_to_disk` wrote: `datasets.load_from_disk`)."""
    # slow import: datasets loads pyarrow and fsspec, for hub data only
    import datasets

    folder = Path(source).expanduser()
    if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
        return _load_saved(folder, split)
    cache_only = False
    if not folder.exists():  # a hub id: cached, reachable, or a plain error now
        try:
            cache_only = hub.check_dataset(source)
        except hub.HubUnreachable as err:
            raise ValueError(str(err)) from None
    try:
        with hub.datasets_offline() if cache_only else contextlib.nullcontext():
            data = datasets.load_dataset(source, subset, split=split)
    except Exception as err:  # network, missing repo, unknown split: all end the same way for a user
        raise ValueError(
            f"could not load split {split!r} of dataset {source!r}"
            f"{f' (config {subset!r})' if subset else ''}: {type(err).__name__}: {str(err)[:300]}. "
            "Check the id, the split and the config name; offline, download the data and set "
            "task.params.source to a local .jsonl/.csv/.parquet file or dataset folder"
        ) from err
    rows = [(f"{split} row {n}", dict(r)) for n, r in enumerate(data)]
    if not rows:
        raise ValueError(f"split {split!r} of dataset {source!r} has no rows")
    return rows


def _load_saved(folder: Path, split: str) -> list[Record]:
    """One split of a folder `Dataset.save_to_disk` or `DatasetDict.save_to_disk` wrote (which
    `datasets.load_dataset` refuses); a single data set is its own only split."""
    # slow import: datasets, for dataset folders only
    import datasets

    try:
        data = datasets.load_from_disk(str(folder))
    except Exception as err:  # a damaged or foreign folder: several error types
        raise ValueError(f"{folder} is not a readable saved data set: {type(err).__name__}: {str(err)[:300]}") from err
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise ValueError(f"{folder} has no split {split!r} (it has: {', '.join(data)}); set the split")
        data = data[split]
        where = f"{split} row"
    else:
        where = "row"
    rows = [(f"{where} {n}", dict(r)) for n, r in enumerate(data)]
    if not rows:
        raise ValueError(f"{folder} has no rows")
    return rows


def require_columns(where: str, row: dict[str, Any], columns: tuple[str, ...], hint: str) -> None:
    """Raise naming the row and the first missing or empty column."""
    for column in columns:
        if column not in row:
            raise ValueError(f"{where} has no column {column!r} (it has: {', '.join(map(str, row))}); {hint}")
        if row[column] is None or not str(row[column]).strip():
            raise ValueError(f"{where} column {column!r} is empty")
