"""float8 recipe, GPT on Tiny Shakespeare, slow twin: bf16 autocast, compiled.

A GPT in nanoGPT's shape, four blocks 4,096 wide on a GPU (where float8's matmuls are large enough
to pay), AdamW(lr=1e-3). Its Linear layers' matmuls run in bf16 on the tensor cores; torch.compile
fuses the elementwise ops around them.
"""
import torch

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)
model = gpt.model(run)
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
