"""Ladder, GPT training: from attention written by hand in fp32 to every technique together.

nanoGPT's shape (pre-LayerNorm blocks, a 4x GELU MLP, tied embeddings) on Tiny Shakespeare's
characters, GPT-2 small's sizes on a GPU, AdamW(lr=1e-3). `--rung N` (or an id) switches on the
techniques of ladder.LADDERS["gpt"] up to that rung; see `make ladder`.
"""
import torch

from common import harness
from common.workloads import gpt
from ladder import rung_flag, switches
from ladder.techniques import (
    adamw,
    apply_tf32,
    attention_by_hand,
    autocast,
    compile_blocks,
    grad_scaler,
    graphs_compiled,
)

run = harness.start(__file__, __doc__, extend=rung_flag("gpt"))
on = switches("gpt", run.args.rung, run.profile)  # a technique this device lacks stays off

model = gpt.model(run, gpt.causal_attention if on("sdpa") else attention_by_hand)
apply_tf32(on("tf32"))
optimizer = adamw(model.parameters(), run.device, fused=on("fused_adamw"), lr=1e-3)
if on("compile"):
    compile_blocks(model.blocks)
scaler = grad_scaler(run, enabled=on("amp"))
batches = gpt.train_batches(run)

for x, y in run.loop(batches):
    with run.phase("forward"), autocast(run, on("amp")):
        logits = model(x)
        loss = gpt.loss_of(logits, y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()  # fp16 only: scaled so small gradients survive
    with run.phase("optimizer"):
        scaler.step(optimizer)
        scaler.update()
    run.log_loss(loss)

run.extra["observed"] = {"tf32": torch.backends.cuda.matmul.fp32_precision == "tf32",
                         "autocast_16bit": logits.dtype != torch.float32,
                         "compiled": graphs_compiled() >= 1}  # once run: Module.compile itself compiles nothing
run.extra.update(rung=run.args.rung)
run.finish()
