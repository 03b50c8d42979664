"""Where users start: their NVIDIA driver against the CUDA their torch is built for, and their torch's
version. Standard library only, and no torch import: `make setup` runs it with the system's python3
before any venv exists, and the runners before anything else.

    python3 -m common.startup --setup     # exit 2 and one line where the locked torch could not use this GPU

torch 2.11 comes built for CUDA 12.6, 12.8 and 13.0 (the lock installs 13.0: cuda-toolkit 13.0.2). A
build runs where the driver is at least its CUDA major version's first release (NVIDIA's minor-version
compatibility: 525 for CUDA 12, 580 for CUDA 13) and carries kernels for the GPU's architecture (CUDA
13 dropped everything before sm_75, torch's CUDA 12.8 build everything before sm_70). Elsewhere
`torch.cuda.is_available()` is False, or the first kernel fails, and a quick start would run CPU sizes
on a GPU machine without a word."""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LOCK = Path(__file__).resolve().parent.parent / "requirements.lock"  # no common.env: any python3 runs this
MIN_TORCH = (2, 9)  # torch.backends' fp32_precision, which the TF32 reads use
MIN_DRIVER = {12: 525, 13: 580}  # CUDA major version -> the oldest driver release that runs its builds
MIN_ARCH = {"12.8": (7, 0), "13.0": (7, 5)}  # a build -> the oldest GPU it has kernels for (12.6: sm_50)
FALLBACK = "cu126"  # torch's build for the oldest drivers (525) and GPUs (sm_50) it supports


@dataclass
class Gpu:
    name: str
    driver: str
    capability: tuple[int, int] | None  # None where this driver's nvidia-smi cannot say

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}" if self.capability else "an unknown architecture"


def gpus(run=subprocess.run) -> list[Gpu]:
    """The GPUs nvidia-smi sees (none where it is missing, fails or hangs)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    for fields in ("name,driver_version,compute_cap", "name,driver_version"):  # compute_cap: drivers 510+
        try:
            out = run([exe, f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True, text=True,
                      timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return []
        if out.returncode == 0:
            return [_gpu([part.strip() for part in line.split(",")]) for line in out.stdout.splitlines()
                    if line.count(",") >= 1]
    return []


def _gpu(parts: list[str]) -> Gpu:
    cap = re.fullmatch(r"(\d+)\.(\d+)", parts[2]) if len(parts) > 2 else None
    return Gpu(parts[0], parts[1], (int(cap[1]), int(cap[2])) if cap else None)


def locked(lock: Path = LOCK) -> dict[str, str | None]:
    """The lock's torch, torchvision and the CUDA its torch is built for (cuda-toolkit's, or the CUDA 12
    runtime's), as `make setup` installs them."""
    text = lock.read_text()

    def pinned(name):
        found = re.search(rf"^{re.escape(name)}==([^\s;]+)", text, re.M)
        return found[1] if found else None

    toolkit = pinned("cuda-toolkit") or pinned("nvidia-cuda-runtime-cu12")
    return {"torch": pinned("torch"), "torchvision": pinned("torchvision"),
            "cuda": ".".join(toolkit.split(".")[:2]) if toolkit else None}


def mismatch(found: list[Gpu], cuda: str | None) -> str | None:
    """Why a torch built for `cuda` cannot use these GPUs (None where it can, or nothing is known)."""
    if not found or not cuda:
        return None
    gpu, reasons = found[0], []
    need = MIN_DRIVER.get(int(cuda.split(".")[0]))
    if need and _major(gpu.driver) < need:
        reasons.append(f"needs NVIDIA driver {need} or newer, and this machine's is {gpu.driver}")
    oldest = MIN_ARCH.get(cuda)
    if oldest and gpu.capability and gpu.capability < oldest:
        reasons.append(f"has no kernels for the {gpu.name} ({gpu.sm}; it starts at sm_{oldest[0]}{oldest[1]})")
    return f"torch built for CUDA {cuda} " + " and ".join(reasons) if reasons else None


def remedy(gpu: Gpu) -> str | None:
    """What makes this GPU usable where the torch at hand cannot use it: None where torch's CUDA 12.6
    build runs here (driver 525+, sm_50+), else the one thing to change."""
    if gpu.capability and gpu.capability < (5, 0):
        return (f"no torch this cookbook can use has kernels for the {gpu.name} ({gpu.sm}; torch's CUDA 12.6 build "
                "starts at sm_50): run it on another GPU, or on this CPU with --device cpu")
    if _major(gpu.driver) < MIN_DRIVER[12]:
        return (f"update the NVIDIA driver ({MIN_DRIVER[12]} or newer runs torch's CUDA 12.6 build, "
                f"{MIN_DRIVER[13]} or newer the lock's)")
    return None


def _major(driver: str) -> int:
    found = re.match(r"(\d+)", driver)
    return int(found[1]) if found else 0


def setup_problem(found: list[Gpu], lock: dict) -> str | None:
    """`make setup`'s one line where the locked torch could not use this GPU, with what to run instead."""
    why = mismatch(found, lock["cuda"])
    if not why:
        return None
    fix = remedy(found[0]) or (f"run `make setup TORCH_INDEX={FALLBACK}` (the same torch {lock['torch']} built "
                               "for CUDA 12.6, from PyTorch's own package index)")
    return (f"the locked torch {lock['torch']} would not see this GPU: {why}; {fix}, or use an environment whose "
            "torch sees the GPU with PYTHON=python3 (`make setup SKIP_GPU_CHECK=1` builds the locked venv anyway)")


def unseen(torch_version: str, torch_cuda: str | None, found: list[Gpu] | None = None) -> str | None:
    """One line where nvidia-smi sees a GPU and torch does not (ask once torch found no CUDA device);
    None where no GPU is there, or CUDA_VISIBLE_DEVICES hides it on purpose."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return None
    found = gpus() if found is None else found
    if not found:
        return None
    gpu = found[0]
    head = (f"nvidia-smi sees {gpu.name} (driver {gpu.driver}) but torch {torch_version} "
            f"({'CUDA ' + torch_cuda if torch_cuda else 'a CPU-only build'}) does not, so this runs on the CPU")
    why = mismatch(found, torch_cuda)
    if why:
        return f"{head}: {why}; " + (remedy(gpu) or "rebuild the venv with the same torch for CUDA 12.6: "
                                     f"`rm -rf .venv && make setup TORCH_INDEX={FALLBACK}`")
    if not torch_cuda:
        return f"{head}: install a CUDA build of torch (`make setup` installs the lock's)"
    return f"{head}: check that the driver is loaded (nvidia-smi works) and CUDA_VISIBLE_DEVICES"


def torch_too_old(version: str | None = None) -> str | None:
    """One line where the installed torch predates MIN_TORCH (read from its metadata: torch is not
    imported), else None."""
    if version is None:
        try:
            version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            return None
    release = tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:2])
    if release >= MIN_TORCH:
        return None
    want = ".".join(map(str, MIN_TORCH))
    return (f"torch {version} is older than {want}, which the cookbook needs (its TF32 reads use fp32_precision): "
            f"`make setup` installs the locked torch, or install torch>={want} where PYTHON= points")


def check_torch(prog: str) -> None:
    """Exit 2 with one line where torch is too old: at a command's start, not at the end of every run."""
    why = torch_too_old()
    if why:
        print(f"{prog}: error: {why}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str]) -> int:
    if argv != ["--setup"]:
        print("usage: python3 -m common.startup --setup", file=sys.stderr)
        return 2
    why = setup_problem(gpus(), locked())
    if why:
        print(f"make setup: {why}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
