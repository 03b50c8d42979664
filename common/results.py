"""One JSON file per run, versioned and written atomically (temp file + rename)."""
import contextlib
import json
import os
import tempfile
from pathlib import Path

from common.errors import CookbookError

SCHEMA_VERSION = 1


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write data so that readers see either the old file or the whole new one, never a part."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise CookbookError(f"cannot write to {path.parent}: {e.strerror}; choose a writable folder") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_result(path: Path, result: dict) -> None:
    result = {"schema_version": SCHEMA_VERSION, **result}
    atomic_write_text(path, json.dumps(result, indent=1, sort_keys=False) + "\n")


def read_result(path: Path) -> dict:
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CookbookError(f"cannot read result {path}: {e}") from None
    if result.get("schema_version") != SCHEMA_VERSION:
        raise CookbookError(
            f"{path} has schema_version {result.get('schema_version')!r}, expected {SCHEMA_VERSION}; re-run the recipe"
        )
    return result

