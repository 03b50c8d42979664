"""A nanoGPT-style training loop (karpathy/nanoGPT's train.py, cut to one process): the config
exec'd from ./configurator.py, batches drawn from np.memmap files under ./data/, autocast with a
GradScaler, gradient accumulation, clipping, an evaluation at step 0, loss.item() for logging.
Every path is relative: it runs from its own folder, as `cd folder && python train.py`."""
import os
from contextlib import nullcontext

import numpy as np
import torch
from model import GPT

dataset = "tiny"
batch_size, block_size = 8, 32
n_layer, n_head, n_embd = 2, 2, 64
learning_rate, max_iters, eval_interval, eval_iters = 1e-3, 200, 100, 2
gradient_accumulation_steps, grad_clip = 2, 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = "float16" if device == "cuda" else "float32"
exec(open("configurator.py").read())  # overrides from the command line, as nanoGPT does

data_dir = os.path.join("data", dataset)
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device == "cpu" else torch.amp.autocast(device_type=device, dtype=ptdtype)
vocab_size = int(open(os.path.join(data_dir, "vocab_size.txt")).read())


def get_batch(split):
    data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")  # a fresh memmap per batch
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    if device == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


model = GPT(vocab_size, block_size, n_layer, n_head, n_embd).to(device)
scaler = torch.amp.GradScaler(device, enabled=(dtype == "float16"))
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95))


@torch.no_grad()
def estimate_loss():
    model.eval()
    out = {}
    for split in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            with ctx:
                _, loss = model(*get_batch(split))
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


X, Y = get_batch("train")
for iter_num in range(max_iters):
    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    for _ in range(gradient_accumulation_steps):
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch("train")  # the next batch while the GPU works on this one
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    lossf = loss.item() * gradient_accumulation_steps  # note: a sync point, for the log line
    if iter_num % 20 == 0:
        print(f"iter {iter_num}: loss {lossf:.4f}")
