"""Data and NumPy reference of the Horovod elastic workers (elastic_loop.py, elastic_keras.py):
the weights plain gradient descent reaches, whatever the world sizes the job went through.

A global step uses G = 12 rows; rank r of a world of size s trains on rows r*G/s..(r+1)*G/s of
them (G is divisible by 1, 2, 3, 4 and 6). Each rank's loss is the mean squared error over its
rows and Horovod averages the gradients, so every step applies the full-batch gradient of its 12
rows at any world size.

    python elastic_reference.py loop TOTAL    # custom loop: batches 0..TOTAL-1, once each
    python elastic_reference.py keras STEPS   # Keras fit: batch 0, STEPS times
print the reference weights as JSON ({"kernel": [...], "bias": [...]}).
"""
import json
import sys
from typing import Dict, List, Tuple

import numpy as np

G = 12            # rows per global step
FEATURES = 3
BATCHES = 5       # distinct global batches; the custom loop's step n uses batch n % BATCHES
LR = 0.125     # exact in float32 (Keras keeps the learning rate as a float32 variable)
INITIAL_KERNEL = 0.1
INITIAL_BIAS = 0.0


def data() -> Tuple[np.ndarray, np.ndarray]:
    """Every row of every batch: X (BATCHES*G, FEATURES) and y (BATCHES*G, 1), float64."""
    rng = np.random.default_rng(18)
    x = rng.normal(size=(BATCHES * G, FEATURES))
    y = x @ np.array([[0.5], [-1.0], [2.0]]) + 0.3 + 0.1 * rng.normal(size=(BATCHES * G, 1))
    return x, y


def rows(batch: int, rank: int, size: int) -> slice:
    """The rows of global batch ``batch`` that ``rank`` of a world of ``size`` trains on."""
    if G % size:
        raise ValueError(f"a world of {size} cannot split {G} rows evenly; use 1, 2, 3, 4 or 6")
    per_rank = G // size
    start = batch * G + rank * per_rank
    return slice(start, start + per_rank)


def initial_weights() -> Tuple[np.ndarray, np.ndarray]:
    return np.full((FEATURES, 1), INITIAL_KERNEL), np.full((1,), INITIAL_BIAS)


def gradient_descent(batches: List[int]) -> Dict[str, List[float]]:
    """The weights after one full-batch SGD step (MSE loss) on each of ``batches`` in turn."""
    x_all, y_all = data()
    kernel, bias = initial_weights()
    for b in batches:
        x, y = x_all[b * G:(b + 1) * G], y_all[b * G:(b + 1) * G]
        err = x @ kernel + bias - y
        kernel = kernel - LR * (2.0 / G) * (x.T @ err)
        bias = bias - LR * 2.0 * err.mean(axis=0)
    return {"kernel": kernel.ravel().tolist(), "bias": bias.ravel().tolist()}


def loop_reference(total: int) -> Dict[str, List[float]]:
    """elastic_loop.py after ``total`` steps: batches 0..total-1 (mod BATCHES), each step once
    (steps rolled back to a commit are redone from the committed weights)."""
    return gradient_descent([n % BATCHES for n in range(total)])


def keras_reference(steps: int) -> Dict[str, List[float]]:
    """elastic_keras.py whose committed step counter reads ``steps``: batch 0, ``steps`` times."""
    return gradient_descent([0] * steps)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("loop", "keras"):
        sys.exit("usage: elastic_reference.py loop|keras STEPS")
    fn = loop_reference if sys.argv[1] == "loop" else keras_reference
    print(json.dumps(fn(int(sys.argv[2]))))
