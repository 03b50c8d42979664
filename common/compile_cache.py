"""torch.compile's caches, for the cold-start pairs (recipes/cold_start).

fresh(): this process compiles into an empty Inductor and Triton cache of its own (both twins), so the
only cache a twin has is the one its script loads. Artefacts: the mega-cache of compiled artefacts
(torch.compiler.save_cache_artifacts / load_cache_artifacts: Inductor's compiled graphs, AOTAutograd's,
autotuning's and the dynamic-shape profiles), saved by one process and loaded by the next before its
first step. A saved file built by another torch, Triton, GPU architecture or CPU instruction set is
refused in one line and the process compiles cold, never loaded into a crash."""
import atexit
import json
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import torch

from common import env
from common.analysis.results import atomic_write_bytes, atomic_write_text

FOLDER = "compile_artefacts"  # under the data folder (env.data_dir)


def fresh(run) -> Path | None:
    """An empty Inductor cache (FX graphs, AOTAutograd, generated code) and Triton cache for this
    process, removed at its end: what a machine that never compiled this model has. Under
    COOKBOOK_COMPILE_CACHE=shared the default caches stay, and the run's result says it is no cold start."""
    if os.environ.get(env.COMPILE_CACHE_ENV) == "shared":
        run.notices.append(f"{env.COMPILE_CACHE_ENV}=shared: Inductor's and Triton's default caches were kept, so "
                           "the first step is not a cold start")
        return None
    folder = Path(tempfile.mkdtemp(prefix="cookbook-inductor-"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)  # Inductor reads it at each use
    os.environ["TRITON_CACHE_DIR"] = str(folder / "triton")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def built_for(device: torch.device) -> dict:
    """What compiled code depends on: torch, Triton, and the GPU's architecture or the CPU's vector ISA."""
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        target = f"sm_{major}{minor}"
    else:
        from torch._inductor import cpu_vec_isa

        target = f"cpu {cpu_vec_isa.pick_vec_isa() or 'no vector ISA'}"
    return {"torch": torch.__version__, "triton": triton, "target": target}


def stale(saved: dict, here: dict) -> str | None:
    """Why artefacts built for `saved` cannot serve `here` (None: they can)."""
    for key, what in (("torch", "torch"), ("triton", "Triton"), ("target", "target")):
        if saved.get(key) != here[key]:
            return f"built by {what} {saved.get(key)}, this process has {here[key]}"
    return None


class Artefacts:
    """One pair's saved artefacts on one device type: <data>/compile_artefacts/<name>-<device>.bin and
    the .json that says what built them. `state` goes in the run's result (extra["compile_cache"])."""

    def __init__(self, name: str, device: torch.device, folder: Path | None = None):
        self.device = device
        base = (folder or env.data_dir() / FOLDER) / f"{name}-{device.type}"
        self.blob, self.meta = base.with_suffix(".bin"), base.with_suffix(".json")
        self.state: dict = {"file": str(self.blob), "loaded": False}

    def load(self) -> bool:
        """Load the artefacts an earlier process saved, before the first step; one line where there are
        none, or they are refused."""
        if not self.blob.exists() or not self.meta.exists():
            self.state["why"] = "none saved yet"
            print(f"compile cache: no artefacts at {self.blob} yet: compiling cold (this process saves them)",
                  flush=True)
            return False
        try:
            saved = json.loads(self.meta.read_text())
        except (OSError, ValueError) as e:
            saved = {"unreadable": str(e)}
        why = stale(saved, built_for(self.device))
        if why:
            self.state["why"] = why
            print(f"compile cache: {self.blob} ignored: {why}; compiling cold (this process saves new ones)",
                  flush=True)
            return False
        data = self.blob.read_bytes()
        info = torch.compiler.load_cache_artifacts(data)
        if info is None:  # torch could not read them (its own warning says why)
            self.state["why"] = "torch could not read them"
            print(f"compile cache: {self.blob} unreadable by this torch: compiling cold", flush=True)
            return False
        self.state.update(loaded=True, bytes=len(data), **{"why": None})
        print(f"compile cache: loaded {len(data) / 2**20:.1f} MiB of compiled artefacts from {self.blob}", flush=True)
        return True

    def save(self) -> None:
        """Save what this process compiled, for the next one (kept as they are where they were loaded)."""
        if self.state["loaded"]:
            return
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            self.state["why"] = (self.state.get("why") or "") + "; nothing to save (no compiled artefacts)"
            return
        data, _ = saved
        self.blob.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.blob, data)  # the blob first: a meta file always describes a whole blob
        atomic_write_text(self.meta, json.dumps(built_for(self.device), indent=1) + "\n")
        self.state["saved_bytes"] = len(data)
