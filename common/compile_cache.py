"""torch.compile's caches, for the cold-start pairs (recipes/cold_start).

fresh(run): this process compiles into an empty Inductor and Triton cache of its own (both twins), so the
only cache a twin has is the one its script loads. Artefacts(run): the mega-cache of compiled artefacts
(torch.compiler.save_cache_artifacts / load_cache_artifacts: Inductor's compiled graphs with their
Triton kernels, AOTAutograd's, autotuning's), saved by one process and loaded by the next before its
first step. A saved file built by another torch, CUDA, Triton, GPU or CPU instruction set, or for
another batch, image size or autocast dtype, is refused in one line and the process compiles cold,
never loaded into a crash; a loaded file that still left graphs to compile is saved again."""
import atexit
import json
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import torch

from common import env
from common.files import atomic_write_bytes, atomic_write_text

FOLDER = "compile_artefacts"  # under the data folder (env.data_dir)


def fresh(run) -> Path | None:
    """An empty Inductor cache (FX graphs, AOTAutograd, generated code, C++'s precompiled header) and
    Triton cache for this process, removed at its end: what a machine that never compiled this model has.
    Under COOKBOOK_COMPILE_CACHE=shared the default caches stay, and the run's result says it is no cold start."""
    if os.environ.get(env.COMPILE_CACHE_ENV) == "shared":
        run.notices.append(f"{env.COMPILE_CACHE_ENV}=shared: Inductor's and Triton's default caches were kept, so "
                           "the first step is not a cold start")
        return None
    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # a user's own location: its file system, not /tmp's
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="cookbook-inductor-", dir=base))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)  # Inductor reads it at each use
    os.environ["TRITON_CACHE_DIR"] = str(folder / "triton")  # Triton reads it lazily
    from torch._inductor import codecache  # its precompiled header's folder is fixed at import: moved too

    codecache._HEADER_DIR = str(folder / "precompiled_headers")
    codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def built_for(device: torch.device) -> dict:
    """What compiled code depends on beyond the graph: torch, Triton, and the GPU (its name and
    architecture, and CUDA's version: Inductor's own cache key holds both) or the CPU's vector ISA."""
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        target = f"{torch.cuda.get_device_name(device)} sm_{major}{minor} CUDA {torch.version.cuda}"
    else:
        target = f"cpu {torch.backends.cpu.get_cpu_capability()}"
    return {"torch": torch.__version__, "triton": triton, "target": target}


def stale(saved: dict, here: dict) -> str | None:
    """Why artefacts built for `saved` cannot serve `here` (None: they can)."""
    for key, what in (("torch", "torch"), ("triton", "Triton"), ("target", "target"), ("graph", "graph")):
        if saved.get(key) != here.get(key):
            return f"built by {what} {saved.get(key)}, this process has {here.get(key)}"
    return None


def _compiled() -> int:
    """Graphs this process compiled because no cache held them: Inductor's and AOTAutograd's misses."""
    from torch._dynamo.utils import counters

    return counters["inductor"].get("fxgraph_cache_miss", 0) + counters["aot_autograd"].get("autograd_cache_miss", 0)


class Artefacts:
    """One pair's saved artefacts on one device type: <data>/compile_artefacts/<pair>-<device>.bin and
    the .json that says what built them and for which graph (batch, image size, autocast dtype). `state`
    goes in the run's result (extra["compile_cache"])."""

    def __init__(self, run, folder: Path | None = None):
        self.device = run.device
        c = run.config
        self.graph = f"batch {c.batch_size}, {c.image_size or '-'} px, autocast {run.profile.amp_dtype}"
        base = (folder or env.data_dir() / FOLDER) / f"{run.pair}-{run.device.type}"
        self.blob, self.meta = base.with_suffix(".bin"), base.with_suffix(".json")
        self.state: dict = {"file": str(self.blob), "loaded": False}

    def here(self) -> dict:
        return {**built_for(self.device), "graph": self.graph}

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
        why = stale(saved, self.here())
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
        self.state.update(loaded=True, bytes=len(data), why=None)
        print(f"compile cache: loaded {len(data) / 2**20:.1f} MiB of compiled artefacts from {self.blob}", flush=True)
        return True

    def save(self) -> None:
        """Save what this process compiled, for the next one: unless what it loaded served every graph."""
        compiled = _compiled()
        self.state["compiled_anyway"] = compiled if self.state["loaded"] else None
        if self.state["loaded"] and not compiled:
            return
        saved = torch.compiler.save_cache_artifacts()  # every graph this process used, hits included
        if saved is None:
            self.state["why"] = "nothing to save: no compiled artefacts"
            return
        data, _ = saved
        self.blob.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.blob, data)  # the blob first: a meta file always describes a whole blob
        atomic_write_text(self.meta, json.dumps(self.here(), indent=1) + "\n")
        self.state["saved_bytes"] = len(data)
