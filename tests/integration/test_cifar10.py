import os
import pickle
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torchvision.datasets import CIFAR10

from common.errors import CookbookError
from common.workloads import cifar10
from common.workloads.device_batches import CropFlipNormalize, DeviceBatches, crop_boxes

from conftest import REPO


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    return cifar10.write_synthetic(tmp_path_factory.mktemp("cifar"), per_file=50)


def test_synthetic_files_are_in_the_real_pickle_format(small_root):
    folder = small_root / cifar10.BATCHES
    assert sorted(p.name for p in folder.iterdir()) == sorted(cifar10.ALL_FILES)
    with open(folder / "data_batch_1", "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    assert entry["data"].shape == (50, 3072) and entry["data"].dtype == np.uint8
    assert len(entry["labels"]) == 50 and set(entry) >= {"batch_label", "filenames"}


def test_torchvision_reads_them_with_only_the_checksums_swapped(small_root):
    ds = cifar10._dataset_class(verify_checksums=False)(root=str(small_root), train=True)
    assert ds.data.shape == (250, 32, 32, 3) and len(ds.targets) == 250
    assert ds.classes == cifar10.CLASSES
    img, label = ds[0]
    assert img.size == (32, 32) and 0 <= label < 10
    with pytest.raises(RuntimeError):  # the real class rejects them: md5 sums differ
        CIFAR10(root=str(small_root), train=True)


def test_a_writer_that_waited_for_the_lock_leaves_a_folder_written_meanwhile(tmp_path):
    """torchrun's ranks write the synthetic set at once: the one that waited must not replace (and so
    delete under the other's reader) the folder the first one finished."""
    from common.files import file_lock

    code = f"from common.workloads import cifar10; cifar10.write_synthetic({str(tmp_path)!r}, per_file=3)"
    with file_lock(tmp_path / ".cifar10.lock"):
        waiter = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(1.0)
        assert not list(tmp_path.glob(".cifar10-*")), "the second writer wrote without the lock"
        cifar10._write(tmp_path / cifar10.BATCHES, seed=0, per_file=2)  # the first writer's folder
        first = (tmp_path / cifar10.BATCHES / "data_batch_2").stat().st_ino
    assert waiter.wait(timeout=60) == 0
    assert (tmp_path / cifar10.BATCHES / "data_batch_2").stat().st_ino == first
    with open(tmp_path / cifar10.BATCHES / "data_batch_2", "rb") as f:
        assert len(pickle.load(f, encoding="latin1")["labels"]) == 2


def test_a_folder_with_a_missing_batch_is_a_clear_error(small_root, tmp_path):
    shutil.copytree(small_root / cifar10.BATCHES, tmp_path / cifar10.BATCHES)
    (tmp_path / cifar10.BATCHES / "data_batch_3").unlink()
    with pytest.raises(CookbookError, match="missing CIFAR-10 batch file data_batch_3"):
        cifar10.locate(str(tmp_path))


def test_a_corrupt_batch_is_a_clear_error(small_root, tmp_path):
    shutil.copytree(small_root / cifar10.BATCHES, tmp_path / cifar10.BATCHES)
    with pytest.raises(CookbookError, match="data_batch_1 is corrupt"):
        cifar10.locate(str(tmp_path / cifar10.BATCHES))


def test_a_folder_without_batches_is_a_clear_error(tmp_path):
    with pytest.raises(CookbookError, match="no cifar-10-batches-py folder"):
        cifar10.locate(str(tmp_path))


def test_crop_boxes_follow_random_resized_crop_bounds():
    g = torch.Generator().manual_seed(0)
    w, h = crop_boxes(10000, g, "cpu")
    assert (w <= 1).all() and (h <= 1).all() and (w > 0).all()
    area = w * h
    assert area.min() >= 0.08 - 1e-6
    ratio = w / h
    fitted = area < 1 - 1e-6  # the whole-image fallback has ratio 1
    assert ratio[fitted].min() >= 3 / 4 - 1e-4 and ratio[fitted].max() <= 4 / 3 + 1e-4


def test_whole_image_box_is_a_plain_bilinear_resize():
    g = torch.Generator().manual_seed(0)
    aug = CropFlipNormalize(64, g, "cpu")
    images = torch.randint(0, 256, (2, 32, 32, 3), dtype=torch.uint8)
    x = images.permute(0, 3, 1, 2).float() / 255
    theta = torch.tensor([[[1.0, 0, 0], [0, 1.0, 0]]]).repeat(2, 1, 1)
    grid = F.affine_grid(theta, [2, 3, 64, 64], align_corners=False)
    via_grid = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    resized = F.interpolate(x, size=64, mode="bilinear", align_corners=False)
    assert torch.allclose(via_grid, resized, atol=1e-5)
    out, labels = aug(images, torch.arange(2))
    assert out.shape == (2, 3, 64, 64) and out.dtype == torch.float32


def test_device_batches_shuffle_every_sample_once_per_epoch():
    g = torch.Generator().manual_seed(0)
    ids = torch.arange(10)
    it = iter(DeviceBatches((ids, ids * 2), 3, g))
    epoch = [next(it) for _ in range(3)]  # 10 // 3 full batches, the rest dropped
    seen = torch.cat([b[0] for b in epoch])
    assert len(set(seen.tolist())) == 9
    assert all(torch.equal(b[1], b[0] * 2) for b in epoch)  # rows stay aligned
    with pytest.raises(ValueError, match="larger than the data set"):
        DeviceBatches((ids,), 11, g)


DOWNLOADER = """
import hashlib, sys, time
from pathlib import Path
from common.workloads import cifar10, datasource

# a stand-in host: reachable, and a download that writes the batch files one by one, slowly, as
# torchvision's extraction does; the md5 table is the stand-in files' own
content = {name: name.encode() * 1000 for name in cifar10.ALL_FILES}
cifar10.MD5 = {name: hashlib.md5(data).hexdigest() for name, data in content.items()}
datasource.offline = lambda: False
datasource.reachable = lambda url, seconds=10: True

def download(root):
    with open(Path(sys.argv[1]), "a") as log:
        log.write("download\\n")
    folder = Path(root) / cifar10.BATCHES
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in content.items():
        (folder / name).write_bytes(data)
        time.sleep(0.3)
    return Path(root)

cifar10._download = download
root, verified, source = cifar10.locate(None)
print(source.kind, verified)
"""


def test_two_processes_downloading_at_once_train_on_one_verified_set(tmp_path):
    """Parallel targets and torchrun's ranks: without the lock, the second reads the first's half-written
    folder, fails its checksum, and trains on synthetic data (or downloads over it)."""
    log = tmp_path / "downloads.log"
    env = {**os.environ, "COOKBOOK_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", DOWNLOADER, str(log)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    said = [p.communicate(timeout=120)[0].strip().splitlines()[-1] for p in procs]
    assert said == ["real True", "real True"], said
    assert log.read_text() == "download\n"  # once: the second waited and found it whole


def test_a_failed_download_is_not_waited_out_again_by_each_process_queued_behind_it(tmp_path, monkeypatch):
    from common.workloads import datasource

    monkeypatch.setenv("COOKBOOK_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(datasource, "offline", lambda: False)
    monkeypatch.setattr(datasource, "reachable", lambda url, seconds=10: True)
    monkeypatch.setattr(cifar10, "write_synthetic", lambda root, **kw: root)  # the fallback itself, elsewhere
    tries = []

    def down(root):
        tries.append(root)
        raise TimeoutError("no answer in 900 s")

    monkeypatch.setattr(cifar10, "_download", down)
    first, second = cifar10.locate(None)[2], cifar10.locate(None)[2]
    assert len(tries) == 1 and first.synthetic and "download failed (TimeoutError)" in first.note
    assert "download failed in another process" in second.note
