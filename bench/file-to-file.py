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

--two-core (issue 23, the development machine: no GPU, no numpy needed):
  the target "identity 32 ch x 30 s float WAV, file to file, within 1.5x of
  cp + sync of the same file" (printed met / missed), then real filters
  (--backend cpu, 2048 and 65536 taps), a batch (12 files x 32 ch x 5 s,
  `process DIR --out-dir` against cp of the folder + sync) and the peers
  installed here (sox: a copy, and its `fir` effect with the same taps).
  --baseline DIR: a second tapstream (e.g. the branch start) timed in the
  same run, its repeats interleaved with the main one's (a shared, loaded
  machine drifts). Medians of --repeats runs; the load average is recorded
  before and after each measurement, and each command's CPU time (user +
  sys of it and its children), which a loaded machine changes far less
  than the wall time.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time

try:  # the GPU machine's runs; the 2-core run (--two-core) needs neither
    import numpy as np
    import scipy.io.wavfile
except ImportError:
    np = None

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


def write_float_wav(path, channels, seconds, seed):
    """A float WAV (WAVE_FORMAT_IEEE_FLOAT, as scipy writes it) of seeded
    noise at -12 dBFS, without numpy: one second is made and repeated."""
    import array
    import random
    rng = random.Random(seed)
    second = array.array("f", (rng.gauss(0.0, 0.25) for _ in range(RATE * channels)))
    data_bytes = len(second) * 4 * seconds
    header = b"RIFF" + (4 + 24 + 8 + data_bytes).to_bytes(4, "little") + b"WAVE"
    header += b"fmt " + (16).to_bytes(4, "little") + (3).to_bytes(2, "little")
    header += channels.to_bytes(2, "little") + RATE.to_bytes(4, "little")
    header += (RATE * channels * 4).to_bytes(4, "little") + (channels * 4).to_bytes(2, "little")
    header += (32).to_bytes(2, "little") + b"data" + data_bytes.to_bytes(4, "little")
    with open(path, "wb") as f:
        f.write(header)
        for _ in range(seconds):
            second.tofile(f)


def write_taps(path, count, seed):
    import random
    rng = random.Random(seed)
    scale = 1.0 / count ** 0.5
    with open(path, "w") as f:
        f.write("\n".join(f"{rng.gauss(0.0, scale):.9g}" for _ in range(count)) + "\n")


class TwoCore:
    """The 2-core machine's run (--two-core): see the module's docstring."""

    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.exes = {"after": os.path.join(args.tapstream, "tapstream")}
        if args.baseline:
            self.exes["before"] = os.path.join(args.baseline, "tapstream")
        self.results = {"benchmark": "bench/file-to-file.py --two-core", "commit": args.commit,
                        "baseline_commit": args.baseline_commit if args.baseline else None,
                        "machine": machine(), "date": datetime.datetime.now(
                            datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "repeats": args.repeats, "rows": []}

    def run_once(self, command):
        """Wall time and CPU time (user + sys, the command and its children)."""
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        run = subprocess.run(command, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: exit {run.returncode}: "
                               f"{run.stderr.strip()[-400:]}")
        cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
        return elapsed, cpu

    def compare(self, name, commands, before_each=None):
        """Times each command of `commands` (label -> argv) args.repeats times,
        round-robin; records medians, all times, and the load around it."""
        times = {label: [] for label in commands}
        cpu = {label: [] for label in commands}
        load_before = os.getloadavg()
        for _ in range(self.args.repeats):
            for label, command in commands.items():
                if before_each:
                    before_each()
                try:
                    wall, used = self.run_once(command)
                except Exception as e:  # noqa: BLE001 - recorded, the bench goes on
                    log(f"  {label} failed: {e}")
                    wall, used = float("nan"), float("nan")
                times[label].append(wall)
                cpu[label].append(used)
        row = {"job": name, "load_before": load_before, "load_after": os.getloadavg(),
               "median_s": {k: statistics.median(v) for k, v in times.items()},
               "times_s": times,
               "cpu_median_s": {k: statistics.median(v) for k, v in cpu.items()},
               "cpu_s": cpu, "commands": {k: " ".join(v) for k, v in commands.items()}}
        self.results["rows"].append(row)
        log(f"== {name} (load {load_before[0]:.1f} -> {row['load_after'][0]:.1f})")
        for label, median in row["median_s"].items():
            log(f"  {label:32s} {median:7.3f} s  (" + ", ".join(f"{t:.2f}" for t in times[label]) +
                f"); CPU {row['cpu_median_s'][label]:.3f} s")
        self.save()
        return row

    def save(self):
        if self.args.out:
            with open(self.args.out, "w") as f:
                json.dump(self.results, f, indent=1)

    def run(self):
        src = os.path.join(self.work, "in32.wav")
        dst = os.path.join(self.work, "out.wav")
        write_float_wav(src, 32, self.args.seconds, SEED)
        identity = os.path.join(self.work, "identity.txt")
        with open(identity, "w") as f:
            f.write("1.0\n")
        size = os.path.getsize(src)
        log(f"input: 32 ch x {self.args.seconds} s float WAV, {size / 1e6:.0f} MB")
        floor = {"cp + sync": ["sh", "-c", 'cp "$0" "$1" && sync "$1"', src, dst]}
        ours = {f"tapstream identity ({k})": [exe, "-q", "process", src, dst, "--taps", identity,
                                              "--backend", "cpu"] for k, exe in self.exes.items()}
        peers = {}
        if shutil.which("sox"):
            peers["sox copy (+ sync)"] = ["sh", "-c", 'sox "$0" "$1" && sync "$1"', src, dst]
        row = self.compare(f"identity, 32 ch x {self.args.seconds} s float WAV, file to file",
                           {**floor, **ours, **peers})
        cp = row["median_s"]["cp + sync"]
        ratio = row["median_s"]["tapstream identity (after)"] / cp
        met = ratio <= 1.5
        row["target"] = {"ratio_to_cp_sync": ratio, "limit": 1.5, "met": met}
        if "tapstream identity (before)" in row["median_s"]:
            row["target"]["before_ratio_to_cp_sync"] = row["median_s"]["tapstream identity (before)"] / cp
        cpu_ratio = row["cpu_median_s"]["tapstream identity (after)"] / row["cpu_median_s"]["cp + sync"]
        row["target"]["cpu_ratio_to_cp_sync"] = cpu_ratio
        log(f"target: identity within 1.5x of cp + sync: {ratio:.2f}x: {'met' if met else 'missed'} "
            f"(CPU time {cpu_ratio:.1f}x cp + sync's; load {row['load_before'][0]:.1f})")
        self.save()

        for taps in (2048, 65536):
            taps_file = os.path.join(self.work, f"h{taps}.txt")
            write_taps(taps_file, taps, SEED + taps)
            commands = {f"tapstream cpu ({k})": [exe, "-q", "process", src, dst, "--taps", taps_file,
                                                 "--backend", "cpu"] for k, exe in self.exes.items()}
            if shutil.which("sox"):
                commands["sox fir (+ sync)"] = ["sh", "-c", 'sox "$0" "$1" fir "$2" && sync "$1"',
                                                src, dst, taps_file]
            self.compare(f"{taps} taps, 32 ch x {self.args.seconds} s float WAV", commands)

        batch_in = os.path.join(self.work, "batch-in")
        batch_out = os.path.join(self.work, "batch-out")
        os.makedirs(batch_in, exist_ok=True)
        for i in range(12):
            write_float_wav(os.path.join(batch_in, f"f{i:02d}.wav"), 32, 5, SEED + 100 + i)
        commands = {"cp -r + sync": ["sh", "-c", 'cp -r "$0" "$1" && sync "$1"/*', batch_in, batch_out]}
        for k, exe in self.exes.items():
            commands[f"tapstream batch identity ({k})"] = [
                exe, "-q", "process", batch_in, "--out-dir", batch_out, "--taps", identity,
                "--backend", "cpu"]
        self.compare("batch: 12 files x 32 ch x 5 s float WAV, identity",
                     commands, before_each=lambda: shutil.rmtree(batch_out, ignore_errors=True))
        self.save()


def machine():
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        gpu = ""
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
    parser.add_argument("--two-core", action="store_true",
                        help="the 2-core machine's run (see above); --seconds defaults to 30")
    parser.add_argument("--baseline", help="with --two-core: a second tapstream's directory")
    parser.add_argument("--baseline-commit", default="unknown")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.two_core:
        if "--seconds" not in sys.argv:
            args.seconds = 30
        SECONDS = args.seconds
        os.makedirs(args.work, exist_ok=True)
        bench = TwoCore(args)
        try:
            bench.run()
        finally:
            bench.save()
            shutil.rmtree(args.work, ignore_errors=True)
        log(f"wrote {args.out}" if args.out else json.dumps(bench.results, indent=1))
        return
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
