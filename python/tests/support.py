"""What the Python suites share: the float64 reference convolution and where things are."""

import os
import sys

import numpy as np

SOURCE_DIR = os.environ.get("TAPSTREAM_SOURCE_DIR",
                            os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("TAPSTREAM_BINARY", os.path.join(SOURCE_DIR, "build", "daemon",
                                                         "tapstream"))


def causal_convolution(x, h):
    """The first len(x) samples of x * h, in float64."""
    x = np.asarray(x, dtype=np.float64)
    h = np.asarray(h, dtype=np.float64)
    n = len(x) + len(h) - 1
    size = 1 << (n - 1).bit_length()
    y = np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(h, size), size)
    return y[:len(x)]


def relative_error(actual, expected):
    """max |actual - expected| over max |expected| (over the whole block); where
    nothing is expected (an output no path reaches), max |actual| itself, so
    that silence must be exact silence instead of 0 / 0."""
    expected = np.asarray(expected, dtype=np.float64)
    error = float(np.max(np.abs(np.asarray(actual, dtype=np.float64) - expected)))
    scale = float(np.max(np.abs(expected)))
    return error / scale if scale > 0 else error


def random_splits(rng, frames, most):
    """Cuts `frames` into consecutive call lengths of 1..most frames, at random."""
    cuts = []
    done = 0
    while done < frames:
        n = int(rng.integers(1, most + 1))
        n = min(n, frames - done)
        cuts.append(n)
        done += n
    return cuts


def say(message):
    print(message, file=sys.stderr, flush=True)
