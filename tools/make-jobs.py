#!/usr/bin/env python3
"""Writes a job list for `tapstream process --jobs`: every recording under
RECORDINGS (sorted, subfolders included) paired with one impulse response
under RIRS drawn at random with a fixed seed, its output under OUT_DIR at the
recording's own relative path. The same folders and seed give the same list.

    tools/make-jobs.py RECORDINGS RIRS OUT_DIR [--seed 1] [--per-file 1]
        [--gain-db G] [-o jobs.csv]

Paths are written relative to the CSV's folder (tapstream reads them from
there), or absolute where they cannot be; -o - (the default) writes the
list to standard output with absolute paths. With --per-file K each
recording gets K different impulse responses, and its outputs are named
NAME.RIR.EXT. Standard library only."""

import argparse
import csv
import os
import random
import sys

SOUND_EXTENSIONS = {".wav", ".flac", ".aiff", ".aif", ".au", ".caf", ".w64", ".rf64", ".ogg"}
FILTER_EXTENSIONS = SOUND_EXTENSIONS | {".txt", ".f32", ".f64", ".raw", ".bin", ".toml"}


def files_under(folder, extensions):
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if not name.startswith(".") and os.path.splitext(name)[1].lower() in extensions:
                found.append(os.path.relpath(os.path.join(root, name), folder))
    return sorted(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings")
    parser.add_argument("rirs")
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per-file", type=int, default=1,
                        help="impulse responses per recording, all different (default 1)")
    parser.add_argument("--gain-db", type=float, help="a gain_db column with this value")
    parser.add_argument("-o", "--output", default="-", help="the CSV file (default: standard output)")
    args = parser.parse_args()

    recordings = files_under(args.recordings, SOUND_EXTENSIONS)
    rirs = files_under(args.rirs, FILTER_EXTENSIONS)
    if not recordings:
        sys.exit("make-jobs: no sound files under %s" % args.recordings)
    if not rirs:
        sys.exit("make-jobs: no impulse responses (or other filters) under %s" % args.rirs)
    if not 1 <= args.per_file <= len(rirs):
        sys.exit("make-jobs: --per-file %d: there are %d impulse responses" % (args.per_file, len(rirs)))

    base = None if args.output == "-" else os.path.dirname(os.path.abspath(args.output))

    def spelled(path):
        path = os.path.abspath(path)
        if base is None:
            return path
        try:
            return os.path.relpath(path, base)
        except ValueError:  # another drive
            return path

    rng = random.Random(args.seed)
    header = ["input", "filter", "output"] + (["gain_db"] if args.gain_db is not None else [])
    rows = []
    for recording in recordings:
        for rir in rng.sample(rirs, args.per_file):
            output = recording
            if args.per_file > 1:
                stem, ext = os.path.splitext(recording)
                output = "%s.%s%s" % (stem, os.path.splitext(os.path.basename(rir))[0], ext)
            row = [spelled(os.path.join(args.recordings, recording)),
                   spelled(os.path.join(args.rirs, rir)),
                   spelled(os.path.join(args.out_dir, output))]
            if args.gain_db is not None:
                row.append("%g" % args.gain_db)
            rows.append(row)

    out = sys.stdout if args.output == "-" else open(args.output, "w", newline="")
    with out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    if args.output != "-":
        print("make-jobs: %d jobs, %d recordings x %d of %d impulse responses (seed %d) -> %s"
              % (len(rows), len(recordings), args.per_file, len(rirs), args.seed, args.output),
              file=sys.stderr)


if __name__ == "__main__":
    main()
