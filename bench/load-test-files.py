#!/usr/bin/env python3
"""The same-period (zero latency) load test through file endpoints, for a
machine without JACK (the GPU machine): `tapstream run --latency zero` reads
a sound file paced at the sample rate (`realtime = true`, so its driver thread
acts as a device callback and counts late periods as one would), filters it
with the CUDA engine (or --backend cpu) and writes the output file, while this
script swaps the filters every 3 s (`tapstream ctl load all FILE`) and reads
`ctl status` and the daemon's resident memory every 10 s. Beside it runs
`tapstream probe` (a busy thread that records the machine's own stalls); when
the late periods grow, `ctl trace` dumps the daemon's per-period timestamps,
and at the end every late period is lined up with the engine's call and the
probe's gaps (bench/trace_lineup.py): a stall of the machine, or the engine's
own (not begun by the deadline, or too slow).

  bench/load-test-files.py [--tapstream PATH] [--seconds 600] [--backend cuda]
      [--kernel auto|partitioned] [--channels 8] [--period 64] [--taps 65536] [--spin-us 0]
      [--out DIR]

Prints a table (time, RSS, blocks, swaps, late periods, xruns, engine p99 and
max) and a summary, writes DIR/load-test-files-<backend>-<date>.json (DIR:
$OUT, else bench/results) and exits 0 when it passed: no late period, no
underrun or overrun counted by tapstream, every swap counted and none
rejected, the blocks equal to the wall clock's periods (1 % + 8), resident
memory after the first minute within 1 MiB (plus 1 % for the GPU's driver
allocations) of its value at 60 s, and exit status 143 on SIGTERM.
Only the Python standard library; the input is int16 noise from os.urandom
(any sample value is valid), made in a scratch directory and removed after.
"""

import argparse
import datetime
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_lineup  # noqa: E402

SWAP_INTERVAL_S = 3.0
SAMPLE_INTERVAL_S = 10.0
RATE = 48000


def write_noise_wav(path, channels, frames):
    """int16 PCM white noise; written in chunks so memory stays small."""
    data_bytes = frames * channels * 2
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVE")
        f.write(b"fmt " + struct.pack("<IHHIIHH", 16, 1, channels, RATE, RATE * channels * 2,
                                      channels * 2, 16))
        f.write(b"data" + struct.pack("<I", data_bytes))
        left = data_bytes
        while left:
            n = min(left, 1 << 22)
            f.write(os.urandom(n))
            left -= n


def write_taps(path, taps, seed):
    rng = random.Random(seed)
    scale = 1.0 / taps ** 0.5
    with open(path, "w") as f:
        f.write("# load test filter, seed %d\n" % seed)
        f.write("\n".join(repr(rng.uniform(-scale, scale)) for _ in range(taps)) + "\n")


def find(obj, key):
    """The first value named `key` anywhere in a JSON object."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            r = find(v, key)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = find(v, key)
            if r is not None:
                return r
    return None


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


VMSTAT_KEYS = ("thp_fault_alloc", "thp_collapse_alloc", "thp_split_pmd", "compact_stall",
               "compact_migrate_scanned", "pgmigrate_success", "numa_hint_faults",
               "numa_pages_migrated", "pgmajfault", "pgfault", "nr_dirty", "nr_writeback",
               "pgsteal_kswapd", "pgscan_kswapd", "pgsteal_direct")


def machine_sample(pid):
    """What the machine and the daemon did, as counters: /proc/vmstat's memory
    management (huge-page collapses, compaction, migration, faults, dirty
    pages), the daemon's own faults and, per thread, its involuntary context
    switches (a thread preempted while it had work)."""
    row = {"t_ns": time.monotonic_ns()}
    with open("/proc/vmstat") as f:
        for line in f:
            key, value = line.split()
            if key in VMSTAT_KEYS:
                row[key] = int(value)
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        row["daemon_minflt"], row["daemon_majflt"] = int(fields[7]), int(fields[9])
        switches = {}
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                    name = f.read().strip()
                with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                    for line in f:
                        if line.startswith("nonvoluntary_ctxt_switches"):
                            switches["%s/%s" % (name, tid)] = int(line.split()[1])
            except OSError:
                pass
        row["nonvoluntary"] = switches
    except OSError:
        pass
    return row


def machine_deltas(samples, t_ns, before_ns=150_000_000, after_ns=150_000_000):
    """The counters' changes over the samples around t_ns (only those that
    changed), for lining a late period up with what the machine did."""
    inside = [s for s in samples if t_ns - before_ns <= s["t_ns"] <= t_ns + after_ns]
    if len(inside) < 2:
        return {}
    first, last = inside[0], inside[-1]
    out = {"span_ms": round((last["t_ns"] - first["t_ns"]) / 1e6, 1)}
    for key, value in last.items():
        if key in ("t_ns", "nonvoluntary") or key not in first:
            continue
        if value != first[key]:
            out[key] = value - first[key]
    for thread, n in last.get("nonvoluntary", {}).items():
        d = n - first.get("nonvoluntary", {}).get(thread, n)
        if d:
            out.setdefault("nonvoluntary", {})[thread] = d
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tapstream", default=os.environ.get("TAPSTREAM", "build/daemon/tapstream"))
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--kernel", default="auto")
    ap.add_argument("--channels", type=int, default=8)
    ap.add_argument("--period", type=int, default=64)
    ap.add_argument("--taps", type=int, default=65536)
    ap.add_argument("--spin-us", type=int, default=0,
                    help="[engine] spin_us: the engine thread polls this long for input")
    ap.add_argument("--probe-threshold-us", type=float, default=200.0,
                    help="the stalls `tapstream probe` records beside the daemon (0: no probe)")
    ap.add_argument("--no-thp", action="store_true",
                    help="start the daemon with transparent huge pages disabled for its process "
                         "(prctl PR_SET_THP_DISABLE): no khugepaged collapse of its memory")
    ap.add_argument("--sample-ms", type=float, default=50.0,
                    help="how often the machine's memory counters and the daemon's threads' "
                         "context switches are sampled (0: never)")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = ap.parse_args()
    if args.seconds < 20:
        ap.error("--seconds: at least 20")
    tapstream = os.path.abspath(args.tapstream)
    if not os.access(tapstream, os.X_OK):
        sys.exit("load-test-files: %s is not an executable (--tapstream)" % tapstream)
    os.makedirs(args.out, exist_ok=True)

    work = tempfile.mkdtemp(prefix="tapstream-load-files-")
    lengths = [args.taps, args.taps, max(1, args.taps * 3 // 4)]
    filters = []
    for i, n in enumerate(lengths):
        filters.append(os.path.join(work, "taps-%d-%d.txt" % (i, n)))
        write_taps(filters[-1], n, 4242 + i)
    input_frames = int((args.seconds + 5) * RATE)
    write_noise_wav(os.path.join(work, "in.wav"), args.channels, input_frames)
    socket = os.path.join(work, "ctl.sock")
    with open(os.path.join(work, "load.toml"), "w") as f:
        f.write('sample_rate = %d\nblock_frames = %d\nchannels = %d\nlatency = "zero"\n'
                '[input]\nfile = "in.wav"\nrealtime = true\n[output]\nfile = "out.wav"\n'
                '[filter]\nfile = "%s"\nwatch = false\nmax_taps = %d\n'
                '[engine]\nbackend = "%s"\nkernel = "%s"\nspin_us = %d\n[control]\nsocket = "%s"\n'
                % (RATE, args.period, args.channels, filters[0], args.taps, args.backend,
                   args.kernel, args.spin_us, socket))
    print("SLOW: %.0f s of %d ch at %d-frame periods, %d-tap filters, a swap every %.0f s, "
          "zero latency, %s engine, work dir %s" % (args.seconds, args.channels, args.period,
                                                    args.taps, SWAP_INTERVAL_S, args.backend,
                                                    work), flush=True)

    log = open(os.path.join(work, "daemon.log"), "w")
    def no_thp():
        import ctypes
        PR_SET_THP_DISABLE = 41
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_THP_DISABLE)")

    daemon = subprocess.Popen([tapstream, "run", "--config", os.path.join(work, "load.toml")],
                              stdout=log, stderr=subprocess.STDOUT,
                              preexec_fn=no_thp if args.no_thp else None)

    def ctl(*words):
        r = subprocess.run([tapstream, "ctl", "--socket", socket] + list(words),
                           capture_output=True, text=True, timeout=20)
        return r.returncode, r.stdout + r.stderr

    for _ in range(600):  # FFTW plans and CUDA start-up may take a while
        if os.path.exists(socket) or daemon.poll() is not None:
            break
        time.sleep(0.1)
    if daemon.poll() is not None or not os.path.exists(socket):
        daemon.kill()
        sys.exit("load-test-files: the daemon did not start:\n" +
                 open(os.path.join(work, "daemon.log")).read())

    probe = None
    if args.probe_threshold_us > 0:
        probe_out = open(os.path.join(work, "probe.csv"), "w")
        probe = subprocess.Popen([tapstream, "probe", "--seconds", str(args.seconds + 60),
                                  "--threshold-us", str(args.probe_threshold_us)],
                                 stdout=probe_out, stderr=subprocess.PIPE, text=True)
    traces = []
    traced_late = [0]

    def dump_trace():
        rc, text = ctl("trace", "32768")
        if rc == 0:
            traces.append(json.loads(text))

    samples, sampling = [], threading.Event()

    def sample_machine():
        while not sampling.wait(args.sample_ms / 1e3):
            samples.append(machine_sample(daemon.pid))

    sampler = None
    if args.sample_ms > 0:
        sampler = threading.Thread(target=sample_machine, daemon=True)
        sampler.start()
    rows, failures = [], []
    start = time.monotonic()
    ticks0 = cpu_ticks(daemon.pid)
    hz = os.sysconf("SC_CLK_TCK")

    def take_row():
        t = time.monotonic() - start
        rc, text = ctl("status")
        if rc != 0:
            failures.append("ctl status failed at %.0f s: %s" % (t, text))
            return
        s = json.loads(text)
        row = {"t_s": round(t, 1), "rss_kib": rss_kib(daemon.pid),
               "cpu_percent": round(100.0 * (cpu_ticks(daemon.pid) - ticks0) / hz / max(t, 1e-3), 1),
               "load_average": os.getloadavg()[0]}
        for key in ("blocks", "swaps", "rejected_swaps", "underruns", "overruns", "late_periods",
                    "late_unstarted", "p99", "max"):
            row[key] = find(s, key)
        row["requested"] = requested
        rows.append(row)
        # The trace holds the last 32768 periods (43 s at 64 frames): dumped
        # whenever late periods came since the last dump, they are all kept.
        if (row["late_periods"] or 0) > traced_late[0]:
            dump_trace()
            traced_late[0] = row["late_periods"]
        print("%7.1f %9d %9s %6s %6d %6s %6s %6s %6s %8s %8s %6.1f %5.2f" % (
            row["t_s"], row["rss_kib"], row["blocks"], row["swaps"], requested,
            row["underruns"], row["overruns"], row["late_periods"], row["rejected_swaps"],
            row["p99"], row["max"], row["cpu_percent"], row["load_average"]), flush=True)

    requested = 0
    print("%7s %9s %9s %6s %6s %6s %6s %6s %6s %8s %8s %6s %5s" % (
        "t_s", "rss_kib", "blocks", "swaps", "asked", "under", "over", "late", "reject",
        "p99_us", "max_us", "cpu%", "load"), flush=True)
    take_row()
    next_swap, next_row = SWAP_INTERVAL_S, SAMPLE_INTERVAL_S
    while time.monotonic() - start < args.seconds:
        if daemon.poll() is not None:
            failures.append("the daemon exited early with status %d" % daemon.returncode)
            break
        t = time.monotonic() - start
        if t >= next_row:
            take_row()
            next_row += SAMPLE_INTERVAL_S
        if t >= next_swap and next_swap + 1.0 < args.seconds:
            requested += 1
            rc, text = ctl("load", "all", filters[requested % len(filters)])
            if rc != 0 or '"ok":true' not in text.replace(" ", ""):
                failures.append("swap %d: %s" % (requested, text.strip()))
            next_swap += SWAP_INTERVAL_S
        time.sleep(0.02)
    time.sleep(1.0)  # the last swap lands
    take_row()
    dump_trace()
    wall_s = time.monotonic() - start
    sampling.set()
    if sampler is not None:
        sampler.join()
    daemon.send_signal(signal.SIGTERM)
    try:
        status = daemon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        daemon.kill()
        status = daemon.wait()
    log.close()
    daemon_log = open(os.path.join(work, "daemon.log")).read()
    probe_summary, gaps = "no probe", []
    if probe is not None:
        probe.send_signal(signal.SIGINT)
        try:
            _, probe_err = probe.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            probe.kill()
            _, probe_err = probe.communicate()
        probe_out.close()
        probe_summary = probe_err.strip().splitlines()[-1] if probe_err.strip() else "(silent)"
        gaps = trace_lineup.read_probe(os.path.join(work, "probe.csv"))
    lined_up, lineup_summary = trace_lineup.lineup(traces, gaps) if traces else ([], {})
    for r in lined_up:
        r["machine"] = machine_deltas(samples, r["start_ns"])
    thp = {}
    for name in ("enabled", "defrag", "khugepaged/scan_sleep_millisecs",
                 "khugepaged/pages_to_scan", "khugepaged/defrag"):
        try:
            with open("/sys/kernel/mm/transparent_hugepage/" + name) as f:
                thp[name] = f.read().strip()
        except OSError:
            pass

    first, last = rows[0], rows[-1]
    span = last["t_s"] - first["t_s"]
    blocks = last["blocks"] - first["blocks"]
    wall_blocks = span * RATE / args.period
    after = [r for r in rows if r["t_s"] + 0.5 >= min(60.0, args.seconds / 2)]
    base_rss = after[0]["rss_kib"]
    max_rss = max(r["rss_kib"] for r in after)
    tolerance = 1024 + base_rss // 100
    if last["late_periods"] != 0:
        failures.append("tapstream counted %s late periods" % last["late_periods"])
    if last["underruns"] != 0 or last["overruns"] != 0:
        failures.append("underruns %s, overruns %s" % (last["underruns"], last["overruns"]))
    if last["swaps"] != requested or last["rejected_swaps"] != 0:
        failures.append("swaps %s of %d requested, %s rejected" % (
            last["swaps"], requested, last["rejected_swaps"]))
    if abs(blocks - wall_blocks) > 0.01 * wall_blocks + 8:
        failures.append("%d blocks in %.1f s, the wall clock's periods are %.0f" % (
            blocks, span, wall_blocks))
    if max_rss > base_rss + tolerance:
        failures.append("resident memory grew from %d KiB at %.0f s to %d KiB" % (
            base_rss, after[0]["t_s"], max_rss))
    if status != 128 + signal.SIGTERM and status != -signal.SIGTERM:
        failures.append("the daemon's exit status on SIGTERM was %d, not 143" % status)
    print("summary: %.1f s, %d blocks (wall clock %.1f), swaps %s of %d, rejected %s" % (
        span, blocks, wall_blocks, last["swaps"], requested, last["rejected_swaps"]))
    print("summary: late periods %s (%s not begun by the engine thread at the deadline, the rest "
          "still being computed), underruns %s, overruns %s; engine p99 %s us, max %s us "
          "(period %.0f us); CPU %.1f %% of one core over the run" % (
              last["late_periods"], last["late_unstarted"], last["underruns"], last["overruns"],
              last["p99"], last["max"],
              1e6 * args.period / RATE, last["cpu_percent"]))
    print("summary: RSS %d KiB at %.0f s, max %d KiB after it (tolerance %d KiB)" % (
        base_rss, after[0]["t_s"], max_rss, tolerance))
    print("summary: " + probe_summary)
    print("summary: transparent huge pages %s%s" % (
        json.dumps(thp), ", disabled for the daemon" if args.no_thp else ""))
    if lineup_summary:
        print("summary: late periods lined up: %s" % json.dumps(lineup_summary))
        for r in lined_up[:40]:
            print("  late " + json.dumps(r))
    print("daemon log (last lines):\n" + "\n".join(daemon_log.splitlines()[-5:]))

    commit = os.environ.get("TAPSTREAM_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"test": "zero-latency load through paced file endpoints", "commit": commit,
              "machine": os.uname().nodename, "date": datetime.datetime.utcnow().isoformat() + "Z",
              "backend": args.backend, "kernel": args.kernel, "spin_us": args.spin_us, "channels": args.channels,
              "no_thp": args.no_thp, "transparent_hugepage": thp,
              "period": args.period, "taps": args.taps, "seconds": wall_s,
              "swaps_requested": requested, "passed": not failures, "failures": failures,
              "rows": rows, "probe": probe_summary, "probe_gaps": gaps,
              "late_lineup": lined_up, "late_lineup_summary": lineup_summary}
    out = os.path.join(args.out, "load-test-files-%s-%s.json" % (
        args.backend, datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")))
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print("saved %s" % out)
    for line in failures:
        print("FAILED: " + line)
    subprocess.run(["rm", "-rf", work])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
