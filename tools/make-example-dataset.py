#!/usr/bin/env python3
"""Writes the tiny example dataset that config/examples/dataset/ ships:
clean/ holds 6 synthetic "utterances" (mono, 16 kHz, 16-bit PCM, 0.4 to
0.9 s: a voiced buzz whose pitch glides, through two moving formant
resonators, with syllable-like loudness), rirs/ 3 synthetic room impulse
responses (mono, 16 kHz, float, 0.1 to 0.25 s: a direct path, a few early
reflections and an exponentially decaying noise tail whose decay time is the
room's). Seeded: the same files every run. A real dataset puts its own
recordings and measured impulse responses in their place.

    tools/make-example-dataset.py OUT_DIR [--seed 23]

Pure Python (no numpy), so it runs wherever tapstream's tests run."""

import argparse
import math
import os
import random
import struct

RATE = 16000


def write_wav(path, samples, float_samples):
    """A mono WAV: 16-bit PCM, or 32-bit float (format 3)."""
    if float_samples:
        data = struct.pack("<%df" % len(samples), *samples)
        fmt, bits = 3, 32
    else:
        data = struct.pack("<%dh" % len(samples),
                           *(max(-32768, min(32767, round(x * 32767))) for x in samples))
        fmt, bits = 1, 16
    block = bits // 8
    header = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE"
    header += b"fmt " + struct.pack("<IHHIIHH", 16, fmt, 1, RATE, RATE * block, block, bits)
    header += b"data" + struct.pack("<I", len(data))
    with open(path, "wb") as out:
        out.write(header + data)


def resonator(signal, frequencies, bandwidth):
    """A two-pole resonator whose centre frequency follows `frequencies`."""
    y1 = y2 = 0.0
    r = math.exp(-math.pi * bandwidth / RATE)
    out = []
    for x, f in zip(signal, frequencies):
        y = (1 - r) * x + 2 * r * math.cos(2 * math.pi * f / RATE) * y1 - r * r * y2
        y2, y1 = y1, y
        out.append(y)
    return out


def utterance(rng):
    n = int(rng.uniform(0.4, 0.9) * RATE)
    pitch0, pitch1 = rng.uniform(90, 220), rng.uniform(90, 220)
    phase, buzz = 0.0, []
    for i in range(n):
        phase += (pitch0 + (pitch1 - pitch0) * i / n) / RATE
        buzz.append(2 * (phase % 1.0) - 1 + rng.gauss(0, 0.05))
    f1 = [rng.uniform(300, 800) + 200 * math.sin(7 * i / RATE) for i in range(n)]
    f2 = [rng.uniform(900, 2200) + 400 * math.sin(11 * i / RATE) for i in range(n)]
    voiced = [a + 0.5 * b for a, b in zip(resonator(buzz, f1, 90), resonator(buzz, f2, 120))]
    syllables = rng.uniform(3, 6)
    shaped = [v * max(0.0, math.sin(math.pi * syllables * i / n)) ** 0.7 for i, v in enumerate(voiced)]
    peak = max(abs(x) for x in shaped) or 1.0
    return [0.5 * x / peak for x in shaped]


def impulse_response(rng):
    n = int(rng.uniform(0.1, 0.25) * RATE)
    decay_s = n / RATE / 3  # 60 dB over about the whole response
    ir = [0.0] * n
    ir[0] = 1.0
    for _ in range(6):
        ir[rng.randrange(int(0.002 * RATE), int(0.03 * RATE))] += rng.uniform(-0.6, 0.6)
    for i in range(int(0.005 * RATE), n):
        ir[i] += rng.gauss(0, 0.15) * math.exp(-6.9 * (i / RATE) / decay_s)
    # The utterances peak at 0.5: with the sum of |taps| at most 1.9 no
    # output sample can clip, whatever the pairing.
    scale = min(1.0, 1.9 / sum(abs(x) for x in ir))
    return [x * scale for x in ir]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=23)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    for folder in ("clean", "rirs"):
        os.makedirs(os.path.join(args.out_dir, folder), exist_ok=True)
    for k in range(6):
        write_wav(os.path.join(args.out_dir, "clean", "utterance-%02d.wav" % k), utterance(rng), False)
    for name in ("booth", "office", "hall"):
        write_wav(os.path.join(args.out_dir, "rirs", name + ".wav"), impulse_response(rng), True)


if __name__ == "__main__":
    main()
