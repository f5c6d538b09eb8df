#!/usr/bin/env python3
"""Writes a synthetic wave-field-synthesis routing matrix for tapstream:
16 virtual point sources behind a straight array of 128 loudspeakers
(10 cm apart), each path a delay and a gain of the 2.5D point-source driving
function (delay r/c, amplitude cos(phi)/sqrt(r)), the fractional part of the
delay a 32-tap Kaiser-windowed sinc. Writes OUT_DIR/wfs-16x128.toml and one
128-channel float WAV per source (source-NN.wav, channel l for loudspeaker l).

    tools/make-wfs-matrix.py OUT_DIR [--rate 48000]

Pure Python (no numpy), so it runs wherever tapstream's tests run."""

import argparse
import math
import os
import struct
import sys

SOURCES = 16
SPEAKERS = 128
SPACING_M = 0.10
SPEED_OF_SOUND = 343.0
FRACTION_TAPS = 32  # windowed-sinc fractional delay
KAISER_BETA = 8.0


def bessel_i0(x):
    total, term, k = 1.0, 1.0, 1
    while term > 1e-12 * total:
        term *= (x / (2 * k)) ** 2
        total += term
        k += 1
    return total


def fractional_delay(frac):
    """Taps delaying by FRACTION_TAPS/2 - 1 + frac samples (0 <= frac < 1)."""
    centre = FRACTION_TAPS / 2 - 1 + frac
    taps = []
    for n in range(FRACTION_TAPS):
        t = n - centre
        sinc = 1.0 if abs(t) < 1e-12 else math.sin(math.pi * t) / (math.pi * t)
        ratio = (n - centre) / (FRACTION_TAPS / 2)
        window = bessel_i0(KAISER_BETA * math.sqrt(max(0.0, 1 - ratio * ratio))) / bessel_i0(KAISER_BETA)
        taps.append(sinc * window)
    return taps


def write_float_wav(path, rate, channels):
    frames = len(channels[0])
    data = bytearray()
    for f in range(frames):
        data += struct.pack("<%df" % len(channels), *(c[f] for c in channels))
    fmt = struct.pack("<HHIIHH", 3, len(channels), rate, rate * 4 * len(channels), 4 * len(channels), 32)
    fact = struct.pack("<I", frames)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"fact" + struct.pack("<I", 4) + fact
    body += b"data" + struct.pack("<I", len(data)) + bytes(data)
    with open(path, "wb") as out:
        out.write(b"RIFF" + struct.pack("<I", len(body)) + body)


def source_position(s):
    # Spread across the array's width, 1 to 6 m behind it.
    width = (SPEAKERS - 1) * SPACING_M
    return (width * (s + 0.5) / SOURCES, -1.0 - 5.0 * ((s * 7) % SOURCES) / (SOURCES - 1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--rate", type=int, default=48000)
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    lines = [
        "# 16 virtual sources -> 128 loudspeakers, made by tools/make-wfs-matrix.py",
        "inputs = %d" % SOURCES,
        "outputs = %d" % SPEAKERS,
    ]
    for s in range(SOURCES):
        sx, sy = source_position(s)
        channels, delays = [], []
        for l in range(SPEAKERS):
            dx, dy = l * SPACING_M - sx, -sy
            r = math.hypot(dx, dy)
            delay = r / SPEED_OF_SOUND * args.rate
            whole = int(math.floor(delay))
            gain = (dy / r) / math.sqrt(r)
            channels.append([gain * t for t in fractional_delay(delay - whole)])
            delays.append(whole)
        name = "source-%02d.wav" % s
        write_float_wav(os.path.join(args.out_dir, name), args.rate, channels)
        for l in range(SPEAKERS):
            lines += ["", "[[path]]", "input = %d" % s, "output = %d" % l, 'file = "%s"' % name,
                      "channel = %d" % l, "delay_frames = %d" % delays[l]]
    with open(os.path.join(args.out_dir, "wfs-16x128.toml"), "w") as out:
        out.write("\n".join(lines) + "\n")
    print("wrote %s (%d paths)" % (os.path.join(args.out_dir, "wfs-16x128.toml"), SOURCES * SPEAKERS))


if __name__ == "__main__":
    sys.exit(main())
