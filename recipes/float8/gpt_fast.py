"""float8 recipe, GPT on Tiny Shakespeare, fast twin: torchao's float8 training, compiled.

A GPT in nanoGPT's shape, four blocks 4,096 wide on a GPU, AdamW(lr=1e-3), bf16 autocast around it.
convert_to_float8_training swaps each Linear whose sides divide by 16 for a Float8Linear: its input,
weight and output gradient are cast to float8 (e4m3 forward, e5m2 for gradients) with a scale per
tensor, and its three matmuls run on float8 tensor cores (torch._scaled_mm); the weights, the optimizer
and everything else stay as they were. torch.compile fuses the casts and scalings into their neighbours.
"""
import torch
from torchao.float8 import convert_to_float8_training  # torchao: float8 training as one module swap

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)
model = gpt.model(run)


def float8_eligible(module, name):  # the modules torchao swaps: Linear layers _scaled_mm can take
    linear = isinstance(module, torch.nn.Linear) and name != "head"  # the tied output layer (65 wide) stays bf16
    return linear and module.in_features % 16 == 0 and module.out_features % 16 == 0  # _scaled_mm's rule


convert_to_float8_training(model, module_filter_fn=float8_eligible)  # Linear -> Float8Linear, in place
compiled = torch.compile(model)  # the same in both twins: float8's casts need it to be cheap
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = gpt.train_batches(run)
amp = torch.autocast(run.device.type, dtype=torch.bfloat16)  # bf16: every float8 GPU has it

for x, y in run.loop(batches):
    with run.phase("forward"):
        with amp:
            loss = gpt.loss_of(compiled(x), y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
