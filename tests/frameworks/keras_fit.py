"""A Keras 3 script on the PyTorch backend, in the style of its guides: a `Sequential` model compiled
with Keras's own Adam (not a torch.optim optimizer) and trained with `model.fit` on NumPy arrays.
`--epochs`."""
import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
args = parser.parse_args()

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
X = rng.standard_normal((4096, 32)).astype("float32")
y = (X[:, 0] + X[:, 1] > 0).astype("int64")
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(256, activation="relu"),
                          keras.layers.Dense(256, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(X, y, batch_size=32, epochs=args.epochs, verbose=0)
print("done")
