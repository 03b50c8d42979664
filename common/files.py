"""Files written whole or not at all (a temp file and a rename), in the mode open() would give, and advisory locks."""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path

from common.errors import CookbookError


def umask() -> int:
    """The process's umask, read without a window where it is changed where Linux tells it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: read it by setting it, and put it back at once
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write data so that readers see either the old file or the whole new one, never a part. The
    file gets the mode open() would give it (0644 under the usual umask), not mkstemp's 0600."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise CookbookError(f"cannot write to {path.parent}: {e.strerror}; choose a writable folder") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~umask())
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


@contextlib.contextmanager
def file_lock(path: Path, blocking: bool = True):
    """An advisory lock (flock) on path, created with its folder if missing; False when non-blocking and
    held elsewhere."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # a fresh clone has no data/ yet
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)

