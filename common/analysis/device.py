"""What a device can do, decided from its compute capability (and, for a CPU, what autocast runs
there), never from what torch can emulate: `torch.cuda.is_bf16_supported()` is True on a T4 because
torch can store bf16 there, though a T4 has no bf16 tensor cores and runs it in software.

    sm_70+  fp16 tensor cores (V100, T4)      -> AMP is fp16 with a GradScaler below sm_80
    sm_75   a T4: fp16 tensor cores, no bf16, no TF32
    sm_80+  bf16 and TF32 tensor cores (A100, H100)
    sm_70+  Triton, so torch.compile's Inductor on CUDA (torch/utils/_triton.py: major >= 7)

common.measure.device reads a real device's profile (or a simulated one, for the tests); this
module holds the rules, with no torch, so that the runners and the reports can ask them too. A
profile decides dtypes and what applies, never whether CUDA is called: that is the run's device
(a simulated T4 on a CPU runs fp16 autocast and a GradScaler on the CPU)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from common import startup
from common.errors import CookbookError

# what each capability needs, and how a report says it is missing
NEEDS = {
    "tf32": "no TF32 (Ampere, sm_80, and newer)",
    "bf16": "no bf16 tensor cores (Ampere, sm_80, and newer)",
    "inductor": "no Triton, so no Inductor for torch.compile (sm_70 and newer)",
    "cuda": "a CUDA device",
    # torch._scaled_mm's float8 tensor-core matmuls: Ada (sm_89, an L4) and Hopper (sm_90) on; an A100 has none
    "float8": "no float8 tensor cores (Ada, sm_89, and newer: an L4, an H100)",
    # torch.nn.attention.flex_attention refuses a backward on a CPU; on a GPU its kernels are Triton's
    "flex_attention": "no FlexAttention training: its backward runs on a GPU only (Triton, sm_70 and newer)",
    # a layout that tensor-core convolutions want: in fp32 they are tensor-core ones from TF32 (sm_80) on;
    # below, fp32 convolutions run on the CUDA cores, where the pair's mechanism is not there (a CPU's
    # oneDNN convolutions prefer NHWC as well)
    "fp32_tensor_cores": "fp32 convolutions run on CUDA cores, not tensor cores (TF32 needs Ampere, sm_80): the "
                         "pair's mechanism, tensor-core kernels reading NHWC, is not there in fp32; the layout "
                         "pays with 16-bit tensor cores (channels_last under AMP, as the ResNet-18 lab runs it)",
}


@dataclass
class DeviceProfile:
    """Carried by every result's Stamp (common.analysis.results_run); plain data, its rules as properties."""
    kind: str  # "cuda" or "cpu"
    name: str  # "Tesla T4", or "CPU (<model>)"
    capability: list[int] | None = None  # [7, 5]
    memory_gb: float | None = None
    archs: list[str] = field(default_factory=list)  # the torch build's kernels (torch.cuda.get_arch_list())
    simulated: bool = False  # a stand-in profile (the tests' T4, A100, H100) on another device

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> DeviceProfile:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    @property
    def sm(self) -> int | None:
        return self.capability[0] * 10 + self.capability[1] if self.capability else None

    @property
    def label(self) -> str:
        """"Tesla T4 (sm_75)"; "CPU (...)"; a simulated one says so: "Tesla T4 (sm_75, simulated)"."""
        tail = ", simulated" if self.simulated else ""
        return f"{self.name} (sm_{self.sm}{tail})" if self.sm is not None else self.name + tail

    def has(self, need: str) -> bool:
        cuda = self.kind == "cuda"
        sm = self.sm or 0
        return {"tf32": cuda and sm >= 80,
                "bf16": not cuda or sm >= 80,  # a CPU's autocast runs bf16 (AVX512-BF16/AMX where present)
                "inductor": not cuda or sm >= 70,  # Inductor's C++ backend on a CPU
                "cuda": cuda,
                "float8": cuda and sm >= 89,
                "flex_attention": cuda and sm >= 70,
                "fp32_tensor_cores": not cuda or sm >= 80}[need]

    @property
    def amp_dtype(self) -> str:
        """AMP's 16-bit type: bf16 where it is native (and on a CPU), else fp16 (with a GradScaler)."""
        return "bfloat16" if self.has("bf16") else "float16"

    @property
    def grad_scaler(self) -> bool:
        """fp16's range is narrow: small gradients flush to zero unless the loss is scaled up."""
        return self.amp_dtype == "float16"

    @property
    def ceiling_dtypes(self) -> list[str]:
        """The matmul dtypes worth a measured ceiling here: those a run may use natively. TF32 is
        float32 on the tensor cores (measured with TF32 on)."""
        if self.kind != "cuda":
            return ["bfloat16", "float32"]
        # fp16 arithmetic is native on every GPU torch supports (on tensor cores from sm_70)
        return ["bfloat16"] * self.has("bf16") + ["float16"] + ["tf32"] * self.has("tf32") + ["float32"]

    def built_for(self) -> bool:
        """Whether this torch has kernels for the GPU (startup.carries_kernels). Unknown (no list): True."""
        if self.kind != "cuda" or not self.archs or self.sm is None:
            return True
        return startup.carries_kernels(self.archs, (self.sm // 10, self.sm % 10))

    def not_applicable(self, needs) -> str | None:
        """None where every need is met, else "not applicable on Tesla T4 (sm_75): no TF32 (...)"."""
        missing = [NEEDS[n] for n in needs if not self.has(n)]
        return f"not applicable on {self.label}: {'; '.join(missing)}" if missing else None

    def summary(self) -> str:
        """One line of what applies here, for gpu-check's first line and the reports' stamp."""
        memory = f", {self.memory_gb:g} GB" if self.memory_gb else ""
        scaler = " with a GradScaler" if self.grad_scaler else ""
        yes = lambda need: "yes" if self.has(need) else "no"  # noqa: E731
        line = (f"{self.label}{memory}: AMP in {self.amp_dtype}{scaler}; TF32 {yes('tf32')}; "
                f"torch.compile (Inductor) {yes('inductor')}; CUDA graphs {yes('cuda')}")
        if not self.built_for():
            line += f"; this torch has no kernels for sm_{self.sm} (built for {', '.join(self.archs)})"
        return line


# the GPUs the suite simulates (COOKBOOK_DEVICE_PROFILE=T4 ...): the seeds' T4 (Colab, Kaggle), the
# P100 Kaggle also lends, and the A100 and H100 of the reference runs
SIMULATED = {
    "T4": DeviceProfile("cuda", "Tesla T4", [7, 5], 15.6, simulated=True),
    "P100": DeviceProfile("cuda", "Tesla P100-PCIE-16GB", [6, 0], 17.1, simulated=True),
    "A100": DeviceProfile("cuda", "NVIDIA A100-SXM4-40GB", [8, 0], 42.4, simulated=True),
    "H100": DeviceProfile("cuda", "NVIDIA H100 80GB HBM3", [9, 0], 85.0, simulated=True),
    "L4": DeviceProfile("cuda", "NVIDIA L4", [8, 9], 23.6, simulated=True),
}


def simulated(name: str) -> DeviceProfile:
    if name not in SIMULATED:
        raise CookbookError(f"COOKBOOK_DEVICE_PROFILE={name!r}: choose one of {', '.join(SIMULATED)}")
    return SIMULATED[name]


def cpu(model: str) -> DeviceProfile:
    return DeviceProfile("cpu", f"CPU ({model})")
