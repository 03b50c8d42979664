"""Writing a page of the reports. A page's links into the repository are written as from reports/
("../recipes/amp/README.md"); a page that lands elsewhere (a local run's reports/local/, a folder given
with --reports-dir) gets them rebased to its own folder, so that they resolve wherever it is."""
import os
from pathlib import Path

from common import env
from common.analysis.results import atomic_write_text


def write(path: Path, text: str) -> None:
    rel = Path(os.path.relpath(env.REPO_ROOT, Path(path).parent)).as_posix()
    atomic_write_text(path, text if rel == ".." else text.replace("](../", f"]({rel}/"))
