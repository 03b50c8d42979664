"""Typed results: one JSON file per run, versioned and written atomically (temp file + rename).

Every record is a dataclass built on `Record`, with `to_json()` and `from_json()`, tied to
SCHEMA_VERSION: a file of another version is one line that says which file, which version and what to
re-run, never a KeyError deep in a report. The records live beside this module, named for the step
that writes them: a run's `RunResult` (results_run), a variant's `VariantAggregate`, `make recipe-<name>`'s
`Comparison` and `make ladder`'s `LadderSummary` (results_compare), a sweep's (results_sweep), a
diagnosis's (results_diagnose), the doctor's (results_doctor).
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import field
from pathlib import Path

from common.errors import CookbookError
from common.files import atomic_write_text

SCHEMA_VERSION = 3  # 1: plain dicts; 2: never released; 3: these dataclasses, statistics over processes


def optional(default=None):
    """A field left out of the JSON while it is None: its producer writes the key only when it has
    a value, and the files keep that shape."""
    return field(default=default, metadata={"optional": True})


class Record:
    """Base of every result dataclass: to_json() / from_json() through the type hints."""

    def to_json(self) -> dict:
        return _encode(self)

    @classmethod
    def from_json(cls, data: dict):
        return _decode(cls, data)


def _encode(value):
    if dataclasses.is_dataclass(value):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.metadata.get("optional") and getattr(value, f.name) is None)}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _decode(tp, value):
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _decode(inner[0], value) if len(inner) == 1 else value
    if origin is list:
        (item,) = typing.get_args(tp) or (typing.Any,)
        return [_decode(item, v) for v in value]
    if origin is tuple:
        return tuple(value)
    if origin is dict:
        _, item = typing.get_args(tp) or (str, typing.Any)
        return {k: _decode(item, v) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        renamed = getattr(tp, "RENAMED", {})  # a field's older name, in files written before it changed
        value = {renamed.get(k, k): v for k, v in value.items()}
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        return tp(**{k: _decode(hints[k], v) for k, v in value.items() if k in names})
    return value


def write_result(path: Path, record: Record) -> None:
    data = {"schema_version": SCHEMA_VERSION, "type": type(record).__name__, **record.to_json()}
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CookbookError(f"cannot read result {path}: {e}") from None


def read_result(path: Path, cls, rerun: str = "make recipe-<name>"):
    """The record in `path`, or one line naming the file, its schema and the command to re-run."""
    data = read_json(path)
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CookbookError(f"{path} has schema_version {version!r}, this code reads {SCHEMA_VERSION}: "
                            f"re-run `{rerun}` to write it again")
    return cls.from_json(data)

