#!/bin/bash
# A Slurm job array for tapstream: each array task filters its share of a batch
# or of a job list (`--shard slurm`: the inputs or rows whose index i, in the
# order every task computes alike, has i mod SLURM_ARRAY_TASK_COUNT equal to the
# task's place in the array), so that the array covers every file exactly once.
# The arguments are those of `tapstream process` for the whole batch:
#
#   sbatch --array=0-15 config/slurm-array.sh --jobs /data/set/jobs.csv
#   sbatch --array=0-3 config/slurm-array.sh /data/takes/ --out-dir /data/filtered/ --taps room.wav
#
# Array ids may start anywhere (--array=1-16) and step (--array=0-30:2); a
# list of ids that are not evenly spaced (--array=1,5,6) is refused. TAPSTREAM
# names the executable if it is not on the PATH. A task's exit status is
# tapstream's: 0 all done, 3 some files or rows failed (named in the task's
# log), 1 none could be done. With --jobs, a row whose output exists is refused
# (and named) unless --overwrite is given.
#SBATCH --job-name=tapstream
#SBATCH --cpus-per-task=4
#SBATCH --output=tapstream-%A_%a.log
set -euo pipefail
if [ -z "${SLURM_ARRAY_TASK_ID:-}" ]; then
  echo "slurm-array.sh: not an array task; submit it with sbatch --array=0-N" >&2
  exit 2
fi
exec "${TAPSTREAM:-tapstream}" process "$@" --shard slurm
