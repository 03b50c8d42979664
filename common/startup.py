"""Where users start: their NVIDIA driver against the CUDA their torch is built for, and their torch's
version. Standard library only, and no torch import: `make setup` runs it with the system's python3
before any venv exists, and the runners before anything else.

    python3 -m common.startup --setup [--index cu126]   # exit 2, one line: that torch could not use this GPU
    python3 -m common.startup --lock-without-cuda        # the lock less torch, torchvision and CUDA's wheels

torch 2.11 comes built for CUDA 12.6, 12.8 and 13.0 (the lock installs 13.0: cuda-toolkit 13.0.2). A
build runs where the driver is at least its CUDA major version's first release (NVIDIA's minor-version
compatibility: 525 for CUDA 12, 580 for CUDA 13) and carries kernels for the GPU's architecture (12.6:
sm_50 to sm_90; 12.8 and 13.0: sm_75 to sm_120). Elsewhere `torch.cuda.is_available()` is False, or the
first kernel fails ("no kernel image"), and a quick start would run CPU sizes on a GPU machine, or
stop, without a word that says why."""
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
# torch 2.11's builds on PyTorch's index -> their CUDA and the GPU architectures their wheels carry kernels for
INDEXES = {"cu126": ("12.6", (5, 0), (9, 0)), "cu128": ("12.8", (7, 5), (12, 0)), "cu130": ("13.0", (7, 5), (12, 0))}
CUDA_WHEELS = re.compile(r"^(torch|torchvision|cuda-[a-z-]+|nvidia-(?!ml-py)[a-z0-9-]+)==")  # not NVML's bindings


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
    span = next(((lo, hi) for c, lo, hi in INDEXES.values() if c == cuda), None)
    if span and gpu.capability and not (span[0] <= gpu.capability and gpu.capability[0] <= span[1][0]):
        reasons.append(f"has no kernels for the {gpu.name} ({gpu.sm}; it runs sm_{span[0][0]}{span[0][1]} to "
                       f"sm_{span[1][0]}{span[1][1]})")
    return f"torch built for CUDA {cuda} " + " and ".join(reasons) if reasons else None


def fallback(gpu: Gpu) -> str:
    """The index of the torch build for this GPU where the lock's is not: Blackwell needs CUDA 12.8,
    anything older than sm_75 CUDA 12.6."""
    return "cu128" if gpu.capability and gpu.capability >= (10, 0) else "cu126"


def remedy(gpu: Gpu) -> str | None:
    """What makes this GPU usable where the torch at hand cannot use it: None where another of torch's
    builds runs here (fallback), else the one thing to change."""
    if gpu.capability and gpu.capability < (5, 0):
        return (f"no torch this cookbook can use has kernels for the {gpu.name} ({gpu.sm}; torch's CUDA 12.6 build "
                "starts at sm_50): run it on another GPU, or on this CPU with --device cpu")
    if gpu.driver and _major(gpu.driver) < MIN_DRIVER[12]:  # unknown: torch's own probe
        return (f"update the NVIDIA driver ({MIN_DRIVER[12]} or newer runs torch's CUDA 12 builds, "
                f"{MIN_DRIVER[13]} or newer the lock's)")
    return None


def pip_command(index: str, lock: dict | None = None, pip: str = "python -m pip") -> str:
    """The command that installs the lock's torch and torchvision built for `index`, from PyTorch's index."""
    lock = lock or locked()
    return (f"{pip} install torch=={lock['torch']}+{index} torchvision=={lock['torchvision']}+{index} "
            f"--index-url https://download.pytorch.org/whl/{index}")


def build_for(found: list[Gpu]) -> str:
    """The index of the torch build for these GPUs: the lock's where it runs, else the fallback."""
    lock = next(i for i, (cuda, _, _) in INDEXES.items() if cuda == locked()["cuda"])
    return fallback(found[0]) if found and mismatch(found, INDEXES[lock][0]) else lock


def without_cuda(lock: Path = LOCK) -> str:
    """The lock less torch, torchvision and the CUDA wheels of its build: what a venv of another build
    installs after that build's torch, so that two builds' CUDA libraries never share a folder."""
    return "".join(line for line in lock.read_text().splitlines(keepends=True) if not CUDA_WHEELS.match(line))


def _major(driver: str) -> int:
    found = re.match(r"(\d+)", driver)
    return int(found[1]) if found else 0


def setup_problem(found: list[Gpu], lock: dict, index: str | None = None) -> str | None:
    """`make setup`'s one line where the torch it would install (the lock's, or `index`'s build of the
    same version) could not use this GPU, with what to run instead."""
    cuda = INDEXES[index][0] if index else lock["cuda"]
    why = mismatch(found, cuda)
    if not why:
        return None
    which = f"torch {lock['torch']}+{index}" if index else f"the locked torch {lock['torch']}"
    other = fallback(found[0])
    fix = remedy(found[0]) or (f"run `make setup TORCH_INDEX={other}` (the same torch built for CUDA "
                               f"{INDEXES[other][0]}, from PyTorch's own package index)" if other != index else
                               "update the NVIDIA driver")
    return (f"{which} would not see this GPU: {why}; {fix}, or use an environment whose torch sees the GPU with "
            "PYTHON=python3 (`make setup SKIP_GPU_CHECK=1` builds the venv anyway)")


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
        return f"{head}: {why}; " + (remedy(gpu) or f"rebuild the venv with the same torch for CUDA "
                                     f"{INDEXES[fallback(gpu)][0]}: `rm -rf .venv && make setup "
                                     f"TORCH_INDEX={fallback(gpu)}`")
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


def carries_kernels(arch_list: list[str], capability: tuple[int, int]) -> bool:
    """Whether a build with these architectures (torch.cuda.get_arch_list()) runs on a GPU of this
    compute capability, as torch's own check has it: an sm_XY cubin on the same major at minor Y or
    above, a compute_XY PTX on anything at XY or above (the driver compiles it). An empty list: True."""
    major, minor = capability
    for arch in arch_list:
        kind, _, digits = arch.partition("_")
        digits = digits.rstrip("af")  # sm_90a, sm_100f: the same architecture's own features
        if not digits.isdigit() or len(digits) < 2:
            continue
        m, n = int(digits[:-1]), int(digits[-1])
        if (kind == "sm" and m == major and n <= minor) or (kind == "compute" and (m, n) <= (major, minor)):
            return True
    return not arch_list


def no_kernels(torch_version: str, torch_cuda: str | None, capability: tuple[int, int], name: str,
               arch_list: list[str]) -> str | None:
    """One line where torch sees the GPU but carries no kernel it can run (a V100 under the CUDA 13
    build on driver 580: available, then "no kernel image" at the first op), else None."""
    if carries_kernels(arch_list, capability):
        return None
    gpu = Gpu(name, "", capability)
    other = fallback(gpu)
    return (f"torch {torch_version} (CUDA {torch_cuda}) has no kernels for the {name} ({gpu.sm}; it carries "
            f"{' '.join(arch_list) or 'none'}): " + (remedy(gpu) or f"`rm -rf .venv && make setup TORCH_INDEX={other}` "
                                                     f"(the same torch built for CUDA {INDEXES[other][0]})"))


def main(argv: list[str]) -> int:
    if argv == ["--lock-without-cuda"]:
        sys.stdout.write(without_cuda())
        return 0
    index = argv[2] if argv[:2] == ["--setup", "--index"] and len(argv) == 3 else None
    if argv != ["--setup"] and index is None:
        print("usage: python3 -m common.startup --setup [--index cu126] | --lock-without-cuda", file=sys.stderr)
        return 2
    if index is not None and index not in INDEXES:
        print(f"make setup: TORCH_INDEX={index}: choose one of {', '.join(INDEXES)} (torch "
              f"{locked()['torch']}'s builds)", file=sys.stderr)
        return 2
    why = setup_problem(gpus(), locked(), index)
    if why:
        print(f"make setup: {why}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
