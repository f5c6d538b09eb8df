#!/usr/bin/env python3
"""A filter that moves: a stereo signal through a low-pass whose cutoff sweeps
from 500 Hz to 8 kHz, a new filter every 4096 frames, crossfaded, with no
click; then the same signal through the shipped 2-way crossover matrix. Writes
sweep.wav and drivers.wav (16-bit) in the current directory.

  PYTHONPATH=build/python python3 tools/python-moving-filter.py
"""

import os
import wave

import numpy as np

import tapstream

RATE = 48000
HERE = os.path.dirname(os.path.abspath(__file__))


def lowpass(cutoff_hz, taps=511):
    """A Hann-windowed sinc low-pass, unity gain at DC."""
    n = np.arange(taps) - (taps - 1) / 2
    h = np.sinc(2 * cutoff_hz / RATE * n) * np.hanning(taps)
    return (h / h.sum()).astype(np.float32)


def write_wav(name, y):
    pcm = np.clip(np.round(y.T * 32767), -32768, 32767).astype("<i2")
    with wave.open(name, "wb") as f:
        f.setnchannels(y.shape[0])
        f.setsampwidth(2)
        f.setframerate(RATE)
        f.writeframes(pcm.tobytes())
    print(f"wrote {name}: {y.shape[0]} channels, {y.shape[1] / RATE:.1f} s")


def main():
    x = (np.random.default_rng(0).standard_normal((2, 4 * RATE)) * 0.2).astype(np.float32)

    engine = tapstream.Engine([lowpass(500)] * 2, backend="auto", max_block=4096)
    print(engine.description)
    block = engine.max_block
    out = []
    cutoffs = np.geomspace(500, 8000, x.shape[1] // block + 1)
    for k, start in enumerate(range(0, x.shape[1], block)):
        out.append(engine.process(x[:, start:start + block]))
        engine.set_filters([lowpass(cutoffs[k])] * 2, crossfade=True)  # from the next block
    write_wav("sweep.wav", np.concatenate(out, axis=1))

    matrix = tapstream.Matrix.from_toml(os.path.join(HERE, "..", "config", "matrix", "crossover-2way.toml"))
    print(matrix)
    crossover = tapstream.Engine(matrix, backend="auto")
    write_wav("drivers.wav", crossover.process(x))  # one call: split into engine blocks inside


if __name__ == "__main__":
    main()
