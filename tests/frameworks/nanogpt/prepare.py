"""Writes ./data/tiny/{train,val}.bin (uint16 token ids) and vocab_size.txt, as nanoGPT's prepare.py
scripts do, from a synthetic text: `python prepare.py` in this folder."""
import os

import numpy as np

os.makedirs(os.path.join("data", "tiny"), exist_ok=True)
rng = np.random.default_rng(0)
text = rng.integers(0, 65, size=20_000, dtype=np.uint16)  # 65 symbols, as Shakespeare's characters
text[1::7] = text[::7][: len(text[1::7])]  # some structure to learn
n = int(0.9 * len(text))
text[:n].tofile(os.path.join("data", "tiny", "train.bin"))
text[n:].tofile(os.path.join("data", "tiny", "val.bin"))
with open(os.path.join("data", "tiny", "vocab_size.txt"), "w") as f:
    f.write("65")
