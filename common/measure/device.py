"""This device's profile (common.analysis.device): read from its compute capability and torch's
build, the one place every recipe, the ladder, the doctor's fixes, the ceilings and the stamp ask
what the device can do.

    python -m common.measure.device [--device cuda|cpu]   # prints the profile as JSON (for the runners)

COOKBOOK_DEVICE_PROFILE=T4 (or P100, A100, H100) stands a simulated GPU's profile in for the real
one: the run still happens on its own device, but every choice is the one that GPU would get (AMP
in fp16 with a GradScaler on a T4, TF32 "not applicable"...), so a CPU runs the GPU's branches."""
import json
import os
import sys

import torch

from common import env
from common.analysis import device as rules
from common.analysis.device import DeviceProfile


def profile(device: torch.device, simulate: bool = True) -> DeviceProfile:
    """simulate=False: this hardware's own, whatever env.DEVICE_PROFILE_ENV says (its ceilings)."""
    name = os.environ.get(env.DEVICE_PROFILE_ENV) if simulate else None
    if name:
        return rules.simulated(name)
    if device.type != "cuda":
        return rules.cpu(env.cpu_model())
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return DeviceProfile("cuda", props.name, [props.major, props.minor], round(props.total_memory / 1e9, 1),
                         archs=list(torch.cuda.get_arch_list()))


def amp_dtype(p: DeviceProfile) -> torch.dtype:
    return getattr(torch, p.amp_dtype)


if __name__ == "__main__":
    args = sys.argv[1:]
    which = torch.device(args[args.index("--device") + 1] if "--device" in args else
                         "cuda" if torch.cuda.is_available() else "cpu")
    print(json.dumps(profile(which).to_json()))
