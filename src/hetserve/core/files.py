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
    try:
        return Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read {what}: {e.strerror}") from None


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
    try:
        f = open(path, newline="")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    with f:
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
