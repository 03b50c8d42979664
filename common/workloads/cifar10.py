"""CIFAR-10: the real download, a folder the user gives, or synthetic images in the real
`cifar-10-batches-py` pickle format, always read by torchvision's own CIFAR10 class."""
import hashlib
import os
import pickle
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from common import env
from common.errors import CookbookError
from common.files import file_lock
from common.workloads import datasource

BATCHES = "cifar-10-batches-py"
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
ALL_FILES = TRAIN_FILES + ["test_batch", "batches.meta"]
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
PER_FILE = 10000
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"  # torchvision's source
DOWNLOAD_S = 900  # the download's own timeout
RETRY_AFTER_S = 3600  # a failed download is tried again after this long, not by every process queued behind it


def _dataset_class(verify_checksums: bool):
    from torchvision.datasets import CIFAR10

    if verify_checksums:
        return CIFAR10

    class SyntheticCIFAR10(CIFAR10):
        """torchvision's loader unchanged; only its checksum table is dropped, because the
        synthetic files cannot match the real files' md5 sums."""

        train_list = [[name, None] for name, _ in CIFAR10.train_list]
        test_list = [[name, None] for name, _ in CIFAR10.test_list]
        meta = {**CIFAR10.meta, "md5": None}

    return SyntheticCIFAR10


def write_synthetic(root: Path, seed: int = 0, per_file: int = PER_FILE) -> Path:
    """Write class-dependent images (a smooth per-class template + noise) in the real format.

    Under a lock: the ranks of a torchrun launch all come here at once, and one must not replace the
    folder while another reads it."""
    root = Path(root)
    final = root / BATCHES
    if _complete(final):
        return root
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / ".cifar10.lock"):
        if not _complete(final):  # else another process wrote it while this one waited
            _write(final, seed, per_file)
    return root


def _complete(folder: Path) -> bool:
    return all((folder / f).exists() for f in ALL_FILES)


def _write(final: Path, seed: int, per_file: int) -> None:
    rng = np.random.default_rng(seed)
    # low-frequency colour templates, one per class, upsampled from 4x4 to 32x32
    templates = rng.integers(0, 256, (10, 4, 4, 3)).repeat(8, axis=1).repeat(8, axis=2).astype(np.float32)
    tmp = Path(tempfile.mkdtemp(prefix=".cifar10-", dir=final.parent))
    try:
        for name in TRAIN_FILES + ["test_batch"]:
            labels = rng.integers(0, 10, per_file)
            noise = rng.normal(0, 40, (per_file, 32, 32, 3)).astype(np.float32)
            images = np.clip(templates[labels] + noise, 0, 255).astype(np.uint8)
            entry = {
                "batch_label": f"synthetic {name}",
                "labels": labels.tolist(),
                # the real layout: one row per image, 1024 red, then green, then blue values
                "data": images.transpose(0, 3, 1, 2).reshape(per_file, 3072),
                "filenames": [f"synthetic_{name}_{i}.png" for i in range(per_file)],
            }
            with open(tmp / name, "wb") as f:
                pickle.dump(entry, f, protocol=4)
        with open(tmp / "batches.meta", "wb") as f:
            pickle.dump({"label_names": CLASSES, "num_cases_per_batch": per_file, "num_vis": 3072}, f, protocol=4)
        if final.exists():  # a partial folder from an interrupted run
            shutil.rmtree(final)
        tmp.chmod(0o755)  # mkdtemp makes it private
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# torchvision's CIFAR10.train_list, test_list and meta md5 sums (tests/integration/test_errors.py holds them
# equal), here so that a runner checks a folder before any run without importing torch
MD5 = {"data_batch_1": "c99cafc152244af753f735de768cd75f", "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
       "data_batch_3": "54ebc095f3ab1f0389bbae665268c751", "data_batch_4": "634d18415352ddfa80567beed471001a",
       "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb", "test_batch": "40351d587109b95175f43aff81a1287e",
       "batches.meta": "5ff9c542aee3614f3951f8cda6e48888"}


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def check_folder(root: Path) -> Path:
    """The torchvision root for a user's folder (it or its parent), with each batch file checked
    (present, md5 as torchvision checks it); no torch, so the runners check a --data folder first."""
    root = Path(root)
    if root.name == BATCHES:
        root = root.parent
    folder = root / BATCHES
    if not folder.is_dir():
        raise CookbookError(f"--data {root}: no {BATCHES} folder there; give the folder that holds it")
    missing = [name for name in MD5 if not (folder / name).is_file()]
    if missing:
        raise CookbookError(f"--data {root}: missing CIFAR-10 batch file {', '.join(missing)} in {folder}")
    for name, md5 in MD5.items():
        try:
            ok = _md5(folder / name) == md5
        except OSError as e:
            raise CookbookError(f"--data {root}: CIFAR-10 batch file {name} cannot be read ({e.strerror})") from None
        if not ok:
            raise CookbookError(f"--data {root}: CIFAR-10 batch file {name} is corrupt (md5 mismatch); "
                                "download it again")
    return root



def _cached(real: Path) -> tuple[Path, bool, datasource.DataSource] | None:
    """The real set downloaded before and whole (every file's md5), else None."""
    if (real / BATCHES).is_dir():
        try:
            return check_folder(real), True, datasource.source("real", "torchvision.datasets.CIFAR10 (cached)")
        except CookbookError:
            pass  # incomplete: download again
    return None


def _download(root: Path) -> Path:
    """torchvision's download and extraction into a folder of its own, then moved into place whole: a
    download cut by its timeout (its thread may go on writing) never leaves files where they are read."""
    from torchvision.datasets import CIFAR10

    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=root))
    try:
        datasource.call_with_timeout(lambda: CIFAR10(root=str(tmp), train=True, download=True), DOWNLOAD_S)
        shutil.rmtree(root / BATCHES, ignore_errors=True)
        os.replace(tmp / BATCHES, root / BATCHES)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def locate(data_arg: str | None) -> tuple[Path, bool, datasource.DataSource]:
    """(torchvision root, whether checksums apply, source record)."""
    synthetic_root = env.data_dir() / "cifar10-synthetic"
    if data_arg == "synthetic":
        return write_synthetic(synthetic_root), False, datasource.source(
            "synthetic", None, "synthetic images in the CIFAR-10 pickle format (not real data)")
    if data_arg:
        return check_folder(Path(data_arg)), True, datasource.source("local", str(data_arg))
    if chosen := datasource.decided("cifar10"):  # the parent probed once: no child asks the network again
        return Path(chosen[0]), chosen[1].kind != "synthetic", chosen[1]
    reason = "offline mode"
    real = env.data_dir() / "cifar10"
    cached = _cached(real)
    if cached:  # downloaded before: no network needed
        return cached
    if not datasource.offline() and not datasource.reachable(CIFAR_URL):
        reason = "download host unreachable"
    elif not datasource.offline():
        # one download at a time, as the synthetic write: parallel targets and torchrun's ranks come here
        # at once, and one that read another's half-written files would fall back to synthetic data
        with file_lock(env.data_dir() / ".cifar10-download.lock"):
            cached = _cached(real)  # another process downloaded it while this one waited
            if cached:
                return cached
            failed = env.data_dir() / ".cifar10-download-failed"
            if failed.exists() and time.time() - failed.stat().st_mtime < RETRY_AFTER_S:
                reason = f"download failed in another process {time.time() - failed.stat().st_mtime:.0f} s ago"
            else:  # one failure is not waited out again by each process queued behind it
                try:
                    found = _download(real), True, datasource.source("real", "torchvision.datasets.CIFAR10")
                    failed.unlink(missing_ok=True)
                    return found
                except Exception as e:
                    failed.touch()
                    reason = f"download failed ({type(e).__name__})"
    return write_synthetic(synthetic_root), False, datasource.source(
        "synthetic", None, f"synthetic images in the CIFAR-10 pickle format (not real data); {reason}")


def train_dataset(data_arg: str | None, transform=None):
    """torchvision's CIFAR10 train split (PIL images through `transform`), source record."""
    root, verify, src = locate(data_arg)
    try:
        ds = _dataset_class(verify)(root=str(root), train=True, download=False, transform=transform)
    except (RuntimeError, pickle.UnpicklingError, EOFError, KeyError, ValueError) as e:
        raise CookbookError(f"CIFAR-10 at {root} could not be read ({type(e).__name__}: {e})") from None
    src.images, src.classes = len(ds), len(ds.classes)
    return ds, src


def load_train(data_arg: str | None):
    """uint8 images (N, 32, 32, 3), int64 labels (N,), source record."""
    ds, src = train_dataset(data_arg)
    return ds.data, np.asarray(ds.targets, dtype=np.int64), src
