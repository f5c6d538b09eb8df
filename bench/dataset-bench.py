#!/usr/bin/env python3
"""The dataset target of issue 23: reverberating a speech dataset with one
room impulse response per file, CSV-driven, in files per second.

  the dataset: FILES mono 16 kHz 16-bit WAV "utterances" of 2 to 6 s (noise
      shaped like syllables), RIRS float WAV impulse responses of 0.3 to 1.5 s
      (a direct path and an exponentially decaying noise tail), each utterance
      paired with one impulse response by tools/make-jobs.py (seeded draw);
      all made here, seeded, and in the page cache when timed
  tapstream: `tapstream process --jobs jobs.csv --overwrite -q` as a whole
      command (start-up, every filter loaded and transformed, every file read,
      filtered and written, each output renamed into place), median of REPEATS;
      and the same rows all through one impulse response (the cost of an
      engine per filter, apart)
  the peer: one warm Python process (torch, torchaudio and soundfile imported,
      CUDA initialised, the impulse responses loaded once onto the device, one
      file done untimed) looping soundfile.read -> torchaudio.functional.
      fftconvolve (cut to the input's length, as tapstream without --tail)
      -> soundfile.write 16-bit, timed over the loop alone (scipy.io.wavfile
      for both where soundfile is not installed, as on the GPU machine)

Prints files per second for each, tapstream's over the peer's, and "met" or
"missed" for the target (>= 3x). tapstream's outputs are checked against the
peer's (relative error of a few files). Without torchaudio or soundfile the
peer is skipped, saying so; without numpy the dataset is made in pure Python
(use a smaller --files then: the 2-core development machine runs it with
--files 60 --rirs 10).

usage: dataset-bench.py --tapstream PATH/TO/tapstream [--files 2000] [--rirs 100]
           [--work DIR] [--out FILE.json] [--backend auto] [--repeats 3]
"""

import argparse
import array
import datetime
import json
import math
import os
import platform
import random
import shutil
import statistics
import struct
import subprocess
import sys
import time

SEED = 23
RATE = 16000
TARGET = 3.0
HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_JOBS = os.path.join(HERE, "..", "tools", "make-jobs.py")

try:
    import numpy as np
except ImportError:
    np = None


def log(*args):
    print(*args, flush=True)


def write_wav(path, samples, pcm16):
    """Mono WAV from a list/array of floats (or a numpy array)."""
    if np is not None:
        x = np.asarray(samples, dtype=np.float32)
        data = (np.clip(np.round(x * 32767), -32768, 32767).astype("<i2").tobytes() if pcm16
                else x.astype("<f4").tobytes())
    else:
        values = (array.array("h", (max(-32768, min(32767, round(v * 32767))) for v in samples))
                  if pcm16 else array.array("f", samples))
        if sys.byteorder != "little":
            values.byteswap()
        data = values.tobytes()
    fmt, bits = (1, 16) if pcm16 else (3, 32)
    header = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE"
    header += b"fmt " + struct.pack("<IHHIIHH", 16, fmt, 1, RATE, RATE * bits // 8, bits // 8, bits)
    header += b"data" + struct.pack("<I", len(data))
    with open(path, "wb") as out:
        out.write(header + data)


def utterance(rng, n):
    if np is not None:
        g = np.random.default_rng(rng.getrandbits(32))
        t = np.arange(n) / RATE
        envelope = np.abs(np.sin(np.pi * rng.uniform(2, 5) * t)) ** 0.7
        return 0.3 * envelope * np.clip(g.standard_normal(n), -3, 3) / 3
    syllables = rng.uniform(2, 5)
    return [0.3 * abs(math.sin(math.pi * syllables * i / RATE)) ** 0.7
            * max(-1.0, min(1.0, rng.gauss(0, 1) / 3)) for i in range(n)]


def impulse_response(rng, n):
    decay = n / RATE / 3
    if np is not None:
        g = np.random.default_rng(rng.getrandbits(32))
        t = np.arange(n) / RATE
        ir = 0.1 * g.standard_normal(n) * np.exp(-6.9 * t / decay)
        ir[0] = 1.0
        return ir / np.sqrt(np.sum(ir * ir))
    ir = [0.1 * rng.gauss(0, 1) * math.exp(-6.9 * (i / RATE) / decay) for i in range(n)]
    ir[0] = 1.0
    norm = math.sqrt(sum(v * v for v in ir))
    return [v / norm for v in ir]


def make_dataset(work, files, rirs):
    """Folders clean/ and rirs/ and jobs.csv under `work` (made once per size)."""
    stamp = os.path.join(work, "made-%d-%d-%d" % (files, rirs, SEED))
    csv_path = os.path.join(work, "jobs.csv")
    if os.path.exists(stamp):
        return csv_path
    shutil.rmtree(work, ignore_errors=True)
    for folder in ("clean", "rirs", "reverb"):
        os.makedirs(os.path.join(work, folder))
    rng = random.Random(SEED)
    started = time.monotonic()
    for k in range(rirs):
        write_wav(os.path.join(work, "rirs", "rir-%03d.wav" % k),
                  impulse_response(rng, int(rng.uniform(0.3, 1.5) * RATE)), False)
    for k in range(files):
        write_wav(os.path.join(work, "clean", "utt-%05d.wav" % k),
                  utterance(rng, int(rng.uniform(2.0, 6.0) * RATE)), True)
    subprocess.run([sys.executable, MAKE_JOBS, os.path.join(work, "clean"), os.path.join(work, "rirs"),
                    os.path.join(work, "reverb"), "--seed", str(SEED), "-o", csv_path], check=True)
    open(stamp, "w").close()
    log("dataset: %d utterances, %d impulse responses made in %.1f s under %s"
        % (files, rirs, time.monotonic() - started, work))
    return csv_path


def read_jobs(csv_path):
    import csv
    folder = os.path.dirname(csv_path)
    with open(csv_path, newline="") as f:
        return [{k: os.path.join(folder, v) for k, v in row.items()} for row in csv.DictReader(f)]


def run_tapstream(exe, csv_path, backend, repeats):
    times = []
    for _ in range(repeats):
        started = time.monotonic()
        done = subprocess.run([exe, "process", "--jobs", csv_path, "--overwrite", "-q",
                               "--backend", backend], capture_output=True, text=True)
        times.append(time.monotonic() - started)
        if done.returncode != 0:
            sys.exit("tapstream failed (%d): %s" % (done.returncode, done.stderr[-2000:]))
    return statistics.median(times), times


def sound_io():
    """(read, write, name): soundfile where installed, else scipy.io.wavfile
    (the GPU machine has scipy and no soundfile); read(path) gives float32
    samples and the rate, write(path, y, rate) writes 16-bit PCM."""
    try:
        import soundfile

        def read(path):
            return soundfile.read(path, dtype="float32")

        def write(path, y, rate):
            soundfile.write(path, y, rate, subtype="PCM_16")

        return read, write, "soundfile %s" % soundfile.__version__
    except ImportError:
        import scipy
        from scipy.io import wavfile

        def read(path):
            rate, x = wavfile.read(path)
            if x.dtype == np.int16:
                return x.astype(np.float32) / 32768.0, rate
            if x.dtype == np.int32:
                return x.astype(np.float32) / 2147483648.0, rate
            return x.astype(np.float32, copy=False), rate

        def write(path, y, rate):
            wavfile.write(path, rate, np.clip(np.round(y * 32768.0), -32768, 32767).astype(np.int16))

        return read, write, "scipy.io.wavfile %s (no soundfile here)" % scipy.__version__


def run_peer(jobs, peer_dir):
    """Files per second of the warm torchaudio loop, or None (and why)."""
    try:
        import torch
        import torchaudio.functional
        read, write, io_name = sound_io()
    except ImportError as e:
        return None, "peer skipped: %s (pip install torch torchaudio soundfile)" % e
    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(peer_dir, exist_ok=True)
    rirs = {}
    for job in jobs:
        if job["filter"] not in rirs:
            h, _ = read(job["filter"])
            rirs[job["filter"]] = torch.from_numpy(h).to(device)

    def one(job):
        x, rate = read(job["input"])
        y = torchaudio.functional.fftconvolve(torch.from_numpy(x).to(device), rirs[job["filter"]])
        y = y[: x.shape[0]].cpu().numpy()
        write(os.path.join(peer_dir, os.path.basename(job["output"])), y, rate)

    one(jobs[0])  # warm: kernels compiled, plans made
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.monotonic()
    for job in jobs:
        one(job)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.monotonic() - started, "torchaudio %s on %s, I/O by %s" % (
        torchaudio.__version__, device, io_name)


def relative_error(a_path, b_path):
    read, _, _ = sound_io()
    a, _ = read(a_path)
    b, _ = read(b_path)
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    n = min(len(a), len(b))
    den = float(np.sum(b[:n] ** 2))
    return math.sqrt(float(np.sum((a[:n] - b[:n]) ** 2)) / den) if den > 0 else 0.0


def machine():
    gpu = ""
    if shutil.which("nvidia-smi"):
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"gpu": gpu, "cpu": cpu, "cores": os.cpu_count(), "host": platform.node()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tapstream", required=True, help="the tapstream executable")
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rirs", type=int, default=100)
    parser.add_argument("--work", default="/tmp/tapstream-dataset-bench")
    parser.add_argument("--out", help="results as JSON")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--commit", default=os.environ.get("TAPSTREAM_COMMIT", "unknown"))
    args = parser.parse_args()

    work = os.path.join(args.work, "set")
    csv_path = make_dataset(work, args.files, args.rirs)
    jobs = read_jobs(csv_path)
    audio_s = sum(os.path.getsize(j["input"]) - 44 for j in jobs) / 2 / RATE
    log("%d jobs, %.0f s of audio" % (len(jobs), audio_s))

    seconds, times = run_tapstream(os.path.abspath(args.tapstream), csv_path, args.backend, args.repeats)
    ours = len(jobs) / seconds
    log("tapstream --jobs (--backend %s): %.2f s, %.0f files/s (runs: %s)"
        % (args.backend, seconds, ours, ", ".join("%.2f" % t for t in times)))
    # The same rows through one impulse response: what making an engine per
    # filter costs, apart from the files' own reading, filtering and writing.
    one_csv = os.path.join(work, "one-filter.csv")
    import csv
    with open(csv_path, newline="") as f, open(one_csv, "w", newline="") as out:
        rows = list(csv.reader(f))
        column = rows[0].index("filter")
        for row in rows[1:]:
            row[column] = rows[1][column]
        csv.writer(out, lineterminator="\n").writerows(rows)
    one_seconds, _ = run_tapstream(os.path.abspath(args.tapstream), one_csv, args.backend, args.repeats)
    log("the same rows through one impulse response: %.2f s, %.0f files/s"
        % (one_seconds, len(jobs) / one_seconds))
    results = {"benchmark": "bench/dataset-bench.py", "commit": args.commit, "machine": machine(),
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "files": len(jobs), "rirs": args.rirs, "audio_s": audio_s,
               "tapstream": {"backend": args.backend, "seconds": seconds, "runs": times,
                             "files_per_s": ours, "one_filter_seconds": one_seconds}}

    peer_seconds, peer_note = run_peer(jobs, os.path.join(args.work, "peer"))
    if peer_seconds is None:
        log(peer_note)
        results["peer"] = {"skipped": peer_note}
    else:
        theirs = len(jobs) / peer_seconds
        ratio = ours / theirs
        errors = [relative_error(j["output"], os.path.join(args.work, "peer",
                                                          os.path.basename(j["output"])))
                  for j in jobs[:: max(1, len(jobs) // 5)]]
        log("peer, one warm Python process (%s): %.2f s, %.0f files/s" % (peer_note, peer_seconds, theirs))
        log("tapstream / peer: %.2fx (target >= %.0fx): %s" % (ratio, TARGET, "met" if ratio >= TARGET else "missed"))
        log("outputs against the peer's: relative error at most %.1e" % max(errors))
        results["peer"] = {"what": peer_note, "seconds": peer_seconds, "files_per_s": theirs,
                           "ratio": ratio, "target": TARGET, "met": ratio >= TARGET,
                           "max_relative_error": max(errors)}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
