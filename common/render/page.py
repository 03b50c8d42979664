"""Writing a page of the reports. A page's links into the repository are written as from reports/
("../recipes/amp/README.md"); a page that lands in another folder of the repository (a local run's
reports/local/) gets them rebased to its own folder, so that they resolve there."""
import os
from pathlib import Path

from common import env
from common.files import atomic_write_text


def write(path: Path, text: str) -> None:
    folder = Path(path).absolute().parent
    rel = Path(os.path.relpath(env.REPO_ROOT, folder)).as_posix()
    inside = folder.is_relative_to(env.REPO_ROOT)  # elsewhere no relative link reaches the repository for sure
    atomic_write_text(path, text.replace("](../", f"]({rel}/") if inside and rel != ".." else text)
