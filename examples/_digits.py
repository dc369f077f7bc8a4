"""The 8x8 digits data set from scikit-learn (no download), split the same way by every example."""
from __future__ import annotations

import numpy as np


def load(seed: int = 0, n_test: int = 360):
    """((x_train, y_train), (x_test, y_test)): float32 pixels in [0, 1], int64 labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int64")
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])
