#!/usr/bin/env python3
"""File to file on the GPU machine (issue 9): whole commands, wall time, the
way a user runs them, on 60 s of 48 kHz float WAV with 2, 32 and 256 channels
through 2048 and 65536 random taps (one filter for all channels):

  tapstream process --backend cuda / --backend cpu
  tapstream process with a 1-tap identity filter (the pipeline's own cost)
  cp IN OUT, and cp followed by an fsync of OUT (the storage floors; tapstream
      fsyncs its output before the rename)
  the user's script: scipy.io.wavfile -> cupyx.scipy.signal.oaconvolve ->
      scipy.io.wavfile, and the same with torchaudio.functional.fftconvolve
      (bench/user_fir_script.py; whole process, and its own read+filter+write)

plus a batch of 1,000 two-second stereo files: `tapstream process DIR
--out-dir OUT` against a shell loop of one `tapstream process` per file (the
loop is timed over the first LOOP_FILES files and scaled to 1,000).

Inputs are made here (numpy, seeded), in the page cache when timed (every
command reads a file just written or read). Each measurement is the median of
REPEATS runs (fewer for the big files); a global time budget skips what is
left, saying so. tapstream's CUDA output is checked against the CuPy
script's (relative error over the whole file). JSON with commit, machine,
date.

usage: file-to-file.py --tapstream DIR [--out FILE.json] [--work DIR] [--budget-s S]
  DIR holds the tapstream executable (and libtapstream_cuda.so beside it).
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import scipy.io.wavfile

SEED = 20261123
RATE = 48000
SECONDS = 60
CHANNELS = [2, 32, 256]
TAPS = [2048, 65536]
BATCH_FILES = 1000
BATCH_SECONDS = 2
LOOP_FILES = 40
HERE = os.path.dirname(os.path.abspath(__file__))


def log(*args):
    print(*args, flush=True)


class Bench:
    def __init__(self, args):
        self.args = args
        self.exe = os.path.join(args.tapstream, "tapstream")
        self.work = args.work
        self.deadline = time.monotonic() + args.budget_s
        self.results = {"benchmark": "bench/file-to-file.py", "commit": args.commit,
                        "machine": machine(), "date": datetime.datetime.now(
                            datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "job": f"{SECONDS} s, {RATE} Hz float32 WAV, random taps, one filter "
                               "for all channels; wall time of whole commands, median",
                        "files": [], "batch": None, "skipped": []}

    def save(self):
        if self.args.out:
            with open(self.args.out, "w") as f:
                json.dump(self.results, f, indent=1)

    def left(self):
        return self.deadline - time.monotonic()

    def timed(self, command, repeats, env=None):
        """Median wall time of `command` over `repeats` runs, and the last run's output."""
        times, out = [], ""
        for _ in range(repeats):
            start = time.perf_counter()
            run = subprocess.run(command, capture_output=True, text=True, env=env)
            times.append(time.perf_counter() - start)
            if run.returncode != 0:
                raise RuntimeError(f"{' '.join(command)}: exit {run.returncode}: "
                                   f"{run.stderr.strip()[-400:]}")
            out = run.stdout + run.stderr
        return statistics.median(times), out

    def measured(self, what):
        """what() -> dict, or {"error": ...} when the command failed (the bench goes on)."""
        try:
            return what()
        except Exception as e:  # noqa: BLE001 - any failure is recorded, not fatal
            log(f"  failed: {e}")
            return {"error": str(e)[-600:], "wall_s": float("nan"), "work_s": float("nan")}

    def tapstream(self, src, dst, taps, backend, repeats, extra=()):
        return self.measured(lambda: self._tapstream(src, dst, taps, backend, repeats, extra))

    def _tapstream(self, src, dst, taps, backend, repeats, extra):
        t, out = self.timed([self.exe, "-v", "process", src, dst, "--taps", taps, "--backend",
                             backend, *extra], repeats)
        startup = [l for l in out.splitlines() if "cuda start-up" in l]
        through = [l for l in out.splitlines() if " through " in l]
        return {"wall_s": t, "cuda_startup": startup[-1] if startup else None,
                "line": through[-1] if through else None}

    def user_script(self, method, src, dst, taps_npy, repeats):
        return self.measured(lambda: self._user_script(method, src, dst, taps_npy, repeats))

    def _user_script(self, method, src, dst, taps_npy, repeats):
        t, out = self.timed([sys.executable, os.path.join(HERE, "user_fir_script.py"), method,
                             src, dst, taps_npy], repeats)
        inner = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
        return {"wall_s": t, **inner}

    def cp_floor(self, src, dst, repeats):
        return self.measured(lambda: self._cp_floor(src, dst, repeats))

    def _cp_floor(self, src, dst, repeats):
        t, _ = self.timed(["cp", src, dst], repeats)
        t_sync, _ = self.timed(["sh", "-c", 'cp "$0" "$1" && sync "$1"', src, dst], repeats)
        return {"wall_s": t, "with_fsync_wall_s": t_sync}

    def files(self, channel_counts):
        rng = np.random.default_rng(SEED)
        taps = {}
        for m in TAPS:
            h = (rng.standard_normal(m) / np.sqrt(m)).astype(np.float32)
            taps[m] = (os.path.join(self.work, f"h{m}.f32"), os.path.join(self.work, f"h{m}.npy"))
            h.tofile(taps[m][0])
            np.save(taps[m][1], h)
        identity = os.path.join(self.work, "identity.txt")
        with open(identity, "w") as f:
            f.write("1.0\n")
        for channels in channel_counts:
            if self.left() < 30:
                self.results["skipped"].append(f"{channels} channels: out of time")
                continue
            repeats = 3 if channels <= 32 else 1
            src = os.path.join(self.work, f"in{channels}.wav")
            x = (0.25 * rng.standard_normal((SECONDS * RATE, channels))).astype(np.float32)
            scipy.io.wavfile.write(src, RATE, x)
            del x
            dst = os.path.join(self.work, "out.wav")
            size = os.path.getsize(src)
            log(f"== {channels} channels ({size / 1e6:.0f} MB)")
            row = {"channels": channels, "bytes": size,
                   "cp": self.cp_floor(src, dst, repeats),
                   "taps": []}
            for backend in self.args.backends:
                row[f"identity_{backend}"] = self.tapstream(src, dst, identity, backend, repeats)
            log(f"  cp {row['cp']['wall_s']:.3f} s (with fsync {row['cp']['with_fsync_wall_s']:.3f}), "
                + ", ".join(f"identity {b} {row['identity_' + b]['wall_s']:.3f} s"
                            for b in self.args.backends))
            self.results["files"].append(row)
            self.save()
            for m in TAPS:
                if self.left() < 20:
                    self.results["skipped"].append(f"{channels} ch x {m} taps: out of time")
                    continue
                entry = {"taps": m}
                main = self.args.backends[0]
                if channels == 32 and main == "cuda":
                    # Does a larger block than the factory's choice pay on the GPU?
                    entry["tapstream_cuda_block_262144"] = self.tapstream(
                        src, dst, taps[m][0], main, repeats, ("--block", "262144"))
                entry["tapstream_" + main] = self.tapstream(src, dst, taps[m][0], main, repeats)
                check = None
                if not self.args.peers:
                    pass
                elif channels <= 32:
                    entry["cupy"] = self.user_script("cupy", src, dst + ".cupy.wav", taps[m][1],
                                                     repeats)
                    try:
                        ts = scipy.io.wavfile.read(dst, mmap=True)[1]
                        ref = scipy.io.wavfile.read(dst + ".cupy.wav", mmap=True)[1]
                        check = float(np.linalg.norm(ts - ref) / np.linalg.norm(ref))
                        os.remove(dst + ".cupy.wav")
                    except Exception as e:  # noqa: BLE001
                        check = "not checked: " + str(e)
                else:
                    entry["cupy"] = self.user_script("cupy", src, dst, taps[m][1], repeats)
                entry["relative_error_cuda_vs_cupy"] = check
                if self.args.peers:
                    entry["torch"] = self.user_script("torch", src, dst, taps[m][1], repeats)
                if "cpu" not in self.args.backends or main == "cpu":
                    pass
                elif channels * m <= 32 * 65536 or self.left() > 120:
                    entry["tapstream_cpu"] = self.tapstream(src, dst, taps[m][0], "cpu",
                                                            1 if channels > 2 else repeats)
                else:
                    self.results["skipped"].append(f"{channels} ch x {m} taps cpu: out of time")
                row["taps"].append(entry)
                nan = {"wall_s": float("nan"), "work_s": float("nan")}
                ours = entry["tapstream_" + main]["wall_s"]
                cupy, torch = entry.get("cupy", nan), entry.get("torch", nan)
                entry["speedup_vs_cupy_wall"] = cupy["wall_s"] / ours
                entry["speedup_vs_cupy_work"] = cupy["work_s"] / ours
                log(f"  {m} taps: tapstream {main} {ours:.3f} s"
                    f" cpu {entry.get('tapstream_cpu', nan)['wall_s']:.3f} s;"
                    f" cupy {cupy['wall_s']:.3f} s (work {cupy['work_s']:.3f});"
                    f" torch {torch['wall_s']:.3f} s (work {torch['work_s']:.3f});"
                    f" error vs cupy {check}")
                self.save()
            for p in (src, dst):
                if os.path.exists(p):
                    os.remove(p)

    def batch(self, taps_f32):
        if self.left() < 60:
            self.results["skipped"].append("batch: out of time")
            return
        rng = np.random.default_rng(SEED + 1)
        src = os.path.join(self.work, "batch-in")
        os.makedirs(src, exist_ok=True)
        for i in range(BATCH_FILES):
            x = (0.25 * rng.standard_normal((BATCH_SECONDS * RATE, 2))).astype(np.float32)
            scipy.io.wavfile.write(os.path.join(src, f"f{i:04d}.wav"), RATE, x)
        out = os.path.join(self.work, "batch-out")
        result = {"files": BATCH_FILES, "seconds_each": BATCH_SECONDS, "taps": 2048}
        for backend in self.args.backends:
            shutil.rmtree(out, ignore_errors=True)
            run = self.measured(lambda: {"wall_s": self.timed(
                [self.exe, "-q", "process", src, "--out-dir", out, "--taps", taps_f32,
                 "--backend", backend], 1)[0]})
            result[f"batch_{backend}_s"] = run["wall_s"]
            result[f"batch_{backend}_files_written"] = (
                len(os.listdir(out)) if os.path.isdir(out) else 0)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        names = sorted(os.listdir(src))[:LOOP_FILES]
        for backend in self.args.backends:
            script = " ".join(
                f'"{self.exe}" -q process "{src}/{n}" "{out}/{n}" --taps "{taps_f32}" '
                f'--backend {backend} &&' for n in names) + " true"
            t = self.measured(lambda: {"wall_s": self.timed(["sh", "-c", script], 1)[0]})["wall_s"]
            result[f"loop_{backend}_s_per_file"] = t / LOOP_FILES
            result[f"loop_{backend}_s_scaled"] = t / LOOP_FILES * BATCH_FILES
            result[f"speedup_{backend}"] = result[f"loop_{backend}_s_scaled"] / result[f"batch_{backend}_s"]
        shutil.rmtree(src)
        shutil.rmtree(out)
        self.results["batch"] = result
        log(f"== batch of {BATCH_FILES}: " + ", ".join(f"{k} {v:.3f}" for k, v in result.items()
                                                       if isinstance(v, float)))
        self.save()


def machine():
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"gpu": gpu, "cpu": cpu, "cores": os.cpu_count(), "host": platform.node()}


def main():
    global SECONDS, BATCH_FILES
    parser = argparse.ArgumentParser()
    parser.add_argument("--tapstream", required=True)
    parser.add_argument("--out")
    parser.add_argument("--work", default="/tmp/file-to-file")
    parser.add_argument("--budget-s", type=float, default=300)
    parser.add_argument("--commit", default=os.environ.get("TAPSTREAM_COMMIT", "unknown"))
    parser.add_argument("--backends", default="cuda,cpu", help="the first is the main one")
    parser.add_argument("--no-peers", dest="peers", action="store_false",
                        help="skip the CuPy and torchaudio scripts (machines without a GPU)")
    parser.add_argument("--seconds", type=int, default=SECONDS)
    parser.add_argument("--batch-files", type=int, default=BATCH_FILES)
    args = parser.parse_args()
    args.backends = args.backends.split(",")
    SECONDS, BATCH_FILES = args.seconds, args.batch_files
    os.makedirs(args.work, exist_ok=True)
    bench = Bench(args)
    try:
        # The 32-channel job (the target) and the batch come before the
        # 256-channel files, which take the longest.
        bench.files([c for c in CHANNELS if c <= 32])
        bench.batch(os.path.join(args.work, "h2048.f32"))
        bench.files([c for c in CHANNELS if c > 32])
    finally:
        bench.save()
        shutil.rmtree(args.work, ignore_errors=True)
    log(f"wrote {args.out}" if args.out else json.dumps(bench.results, indent=1))


if __name__ == "__main__":
    main()
