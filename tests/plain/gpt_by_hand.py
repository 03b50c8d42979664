"""A plain GPT training script, nanoGPT's model.py as its users write it where flash attention is off:
each head's attention by hand (scores, a causal mask from a registered buffer, a softmax, the weighted
sum). `--sdpa` takes nanoGPT's other branch, F.scaled_dot_product_attention(is_causal=True)."""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

SDPA = "--sdpa" in sys.argv
VOCAB, T, WIDTH, HEADS, LAYERS = 65, 64, 64, 4, 2


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, L, C = x.size()
        q, k, v = self.c_attn(x).split(WIDTH, dim=2)
        q, k, v = (t.view(B, L, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        if SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :L, :L] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, L, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(WIDTH), CausalSelfAttention(), nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(T, WIDTH)
        self.h, self.ln_f = nn.ModuleList(Block() for _ in range(LAYERS)), nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


torch.manual_seed(0)
data = torch.randint(VOCAB, (10_000,))
model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(10_000):
    i = torch.randint(len(data) - T - 1, (8,))
    x, y = torch.stack([data[j:j + T] for j in i]), torch.stack([data[j + 1:j + T + 1] for j in i])
    loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
