"""Reading user files with one-line errors that name the file (and the line)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from hetserve.core.errors import ConfigError


def read_text(path: str | Path, what: str) -> str:
    """A UTF-8 text file (a byte-order mark is allowed); one-line errors otherwise."""
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise ConfigError(f"{path}: cannot read {what}: it is a directory") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read {what}: {e.strerror}") from None
    return decode_utf8(data, path, what)


def decode_utf8(data: bytes, path: str | Path, what: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}:{line}: {what} is not UTF-8 text (byte {e.start}: "
            f"{data[e.start : e.start + 1]!r}); save it as UTF-8"
        ) from None


def read_yaml(path: str | Path, what: str) -> Any:
    text = read_text(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None


def read_json(path: str | Path, what: str) -> Any:
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON: {e.msg} at line {e.lineno}") from None


def csv_rows(path: str | Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line number, row)`` of a CSV file with a header holding at least ``columns``."""
    import io

    text = read_text(path, "CSV file")
    with io.StringIO(text, newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise ConfigError(
                f"{path}:1: header must have columns {','.join(columns)}; "
                f"missing {','.join(missing)}"
            )
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise ConfigError(f"{path}:{reader.line_num}: expected {len(header)} fields")
            yield reader.line_num, row
