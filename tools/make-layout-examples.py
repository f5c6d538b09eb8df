#!/usr/bin/env python3
"""Writes the small synthetic impulse responses behind tapstream's layout
examples (config/matrix/): a true-stereo reverb (4 channels: LL, LR, RL, RR),
a HeSuVi virtual-surround set (14 channels in HeSuVi's order) and a SOFA HRTF
set of 16 directions (SimpleFreeFieldHRIR, written as netCDF-4 by ncgen from
netcdf-bin, which libmysofa reads). None is a measurement: they exist to show
the forms and to test them exactly.

    tools/make-layout-examples.py OUT_DIR

Pure Python (no numpy); the SOFA file needs `ncgen` (Debian: netcdf-bin)."""

import math
import os
import shutil
import struct
import subprocess
import sys

RATE = 48000


def write_wav(path, channels):
    """A float32 WAV, one list of samples per channel (equal lengths)."""
    frames = len(channels[0])
    data = b"".join(struct.pack("<%df" % len(channels), *(c[i] for c in channels))
                    for i in range(frames))
    fmt = struct.pack("<HHIIHH", 3, len(channels), RATE, RATE * 4 * len(channels),
                      4 * len(channels), 32)
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(data)) + b"WAVE")
        f.write(b"fmt " + struct.pack("<I", len(fmt)) + fmt)
        f.write(b"data" + struct.pack("<I", len(data)) + data)


def noise(seed):
    """A deterministic uniform generator in [-1, 1) (a 32-bit LCG)."""
    state = seed
    while True:
        state = (1664525 * state + 1013904223) % (1 << 32)
        yield state / float(1 << 31) - 1.0


def decaying_noise(seed, length, start, level, decay_frames):
    gen = noise(seed)
    out = [0.0] * length
    for n in range(start, length):
        out[n] = round(level * next(gen) * math.exp(-(n - start) / decay_frames), 6)
    return out


def true_stereo(out_dir):
    # A small room's tail: direct sound on LL and RR, the cross paths later and weaker.
    length = 1024
    ll = decaying_noise(1, length, 0, 0.3, 180.0)
    ll[0] = 1.0
    lr = decaying_noise(2, length, 23, 0.2, 180.0)
    rl = decaying_noise(3, length, 29, 0.2, 180.0)
    rr = decaying_noise(4, length, 0, 0.3, 180.0)
    rr[0] = 1.0
    write_wav(os.path.join(out_dir, "true-stereo-room-48k.wav"), [ll, lr, rl, rr])


HESUVI_ORDER = ["FL-left", "FL-right", "SL-left", "SL-right", "BL-left", "BL-right", "FC-left",
                "FR-right", "FR-left", "SR-right", "SR-left", "BR-right", "BR-left", "FC-right"]
AZIMUTH = {"FL": 30, "FR": -30, "FC": 0, "SL": 90, "SR": -90, "BL": 150, "BR": -150}


def hesuvi(out_dir):
    # Each speaker-ear: a spike delayed by a crude interaural time difference
    # (the far ear later and weaker), then a short decaying tail.
    length = 256
    channels = []
    for k, name in enumerate(HESUVI_ORDER):
        speaker, ear = name.split("-")
        lateral = math.sin(math.radians(AZIMUTH[speaker]))  # +1: fully left
        far = (lateral < 0) if ear == "left" else (lateral > 0)
        delay = int(round(abs(lateral) * 30)) if far else 0
        ir = decaying_noise(100 + k, length, delay + 1, 0.1, 40.0)
        ir[delay] = 0.5 if far else 1.0
        channels.append(ir)
    write_wav(os.path.join(out_dir, "hesuvi-synthetic-48k.wav"), channels)


SOFA_DIRECTIONS = [(az, 0.0) for az in range(0, 360, 30)] + [(0.0, 45.0), (180.0, 45.0),
                                                             (0.0, -45.0), (90.0, 60.0)]
SOFA_TAPS = 32


def sofa_response(m, ear, n):
    az = SOFA_DIRECTIONS[m][0]
    return round(0.8 ** n * math.cos(0.37 * m + 1.3 * ear + 0.9 * n + az / 57.3), 6)


def values(seq):
    return ", ".join(repr(float(v)) for v in seq)


def sofa(out_dir):
    if shutil.which("ncgen") is None:
        sys.exit("make-layout-examples: ncgen is missing (Debian: netcdf-bin); no SOFA file written")
    m_count = len(SOFA_DIRECTIONS)
    attributes = {
        "Conventions": "SOFA", "Version": "1.0", "SOFAConventions": "SimpleFreeFieldHRIR",
        "SOFAConventionsVersion": "1.0", "APIName": "tapstream tools/make-layout-examples.py",
        "APIVersion": "1.0", "ApplicationName": "tapstream", "AuthorContact": "none",
        "Comment": "synthetic responses for tests, not a measurement", "DataType": "FIR",
        "History": "generated", "License": "CC0", "Organization": "tapstream",
        "References": "none", "RoomType": "free field", "Origin": "synthetic",
        "DateCreated": "2026-11-26 00:00:00", "DateModified": "2026-11-26 00:00:00",
        "Title": "tiny synthetic HRTF", "DatabaseName": "tapstream", "ListenerShortName": "tiny",
    }
    cdl = ["netcdf tiny {", "dimensions:", "\tI = 1 ;", "\tC = 3 ;", "\tR = 2 ;", "\tE = 1 ;",
           "\tN = %d ;" % SOFA_TAPS, "\tM = %d ;" % m_count, "\tS = 1 ;", "variables:"]
    for name, dims, attrs in [
            ("ListenerPosition", "I, C", {"Type": "cartesian", "Units": "metre"}),
            ("ReceiverPosition", "R, C, I", {"Type": "cartesian", "Units": "metre"}),
            ("SourcePosition", "M, C", {"Type": "spherical", "Units": "degree, degree, metre"}),
            ("EmitterPosition", "E, C, I", {"Type": "cartesian", "Units": "metre"}),
            ("ListenerUp", "I, C", {}),
            ("ListenerView", "I, C", {"Type": "cartesian", "Units": "metre"}),
            ("Data.IR", "M, R, N", {}),
            ("Data.SamplingRate", "I", {"Units": "hertz"}),
            ("Data.Delay", "I, R", {})]:
        cdl.append("\tdouble %s(%s) ;" % (name, dims))
        cdl += ['\t\t%s:%s = "%s" ;' % (name, k, v) for k, v in attrs.items()]
    cdl += ['\t\t:%s = "%s" ;' % (k, v) for k, v in attributes.items()]
    ir = (sofa_response(m, r, n) for m in range(m_count) for r in range(2) for n in range(SOFA_TAPS))
    cdl += ["data:",
            " ListenerPosition = 0, 0, 0 ;",
            " ReceiverPosition = 0, 0.09, 0, 0, -0.09, 0 ;",
            " SourcePosition = %s ;" % values(v for d in SOFA_DIRECTIONS for v in (d[0], d[1], 1.2)),
            " EmitterPosition = 0, 0, 0 ;",
            " ListenerUp = 0, 0, 1 ;",
            " ListenerView = 1, 0, 0 ;",
            " Data.IR = %s ;" % values(ir),
            " Data.SamplingRate = %d ;" % RATE,
            " Data.Delay = 0, 0 ;",
            "}"]
    cdl_path = os.path.join(out_dir, "tiny-hrtf-48k.cdl")
    with open(cdl_path, "w") as f:
        f.write("\n".join(cdl) + "\n")
    subprocess.run(["ncgen", "-k", "nc4", "-o", os.path.join(out_dir, "tiny-hrtf-48k.sofa"),
                    cdl_path], check=True)
    os.remove(cdl_path)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    true_stereo(out_dir)
    hesuvi(out_dir)
    sofa(out_dir)


if __name__ == "__main__":
    main()
