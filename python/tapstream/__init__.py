"""tapstream in Python: long FIR filters on many channels, on the GPU or the CPU.

    import numpy as np, tapstream
    e = tapstream.Engine(filters, backend="auto", max_block=4096)
    y = e.process(x)                     # x: (channels, frames) float32 -> (outputs, frames)
    e.set_filters(new, crossfade=True)   # from the next process() on, crossfaded over a block
    m = tapstream.Matrix(2, 3, [(0, 0, h0), (1, 2, h1, -6.0, 10)])
    e = tapstream.Engine(m)
    e.set_paths({(0, 0): h0b}, crossfade=True)
    tapstream.process_file("in.wav", "out.wav", filters="lowpass.txt")

Engine and Matrix are the engines' own (tapstream._tapstream); process_file
runs `tapstream process`. See help(tapstream.Engine) and README.md, "Python".
"""

import errno as _errno
import os as _os

from ._tapstream import Engine, Matrix

__all__ = ["Engine", "Matrix", "process_file"]


def _path(value, name):
    if isinstance(value, (str, bytes, _os.PathLike)):
        return _os.fsdecode(value)
    raise TypeError(
        f"process_file: {name} must be a file name (str or os.PathLike), got {type(value).__name__}"
        + (": the file pipeline reads its filters from files; filter arrays in memory "
           "with Engine.process" if name in ("filters", "matrix") else ""))


def process_file(input, output, filters=None, matrix=None, backend="auto", *, gain_db=None,
                 block=None, format=None, type=None, dither=None, tail=False, strict=False,
                 ignore_rate=False, normalize=None, max_taps=None, engine_options=()):
    """Filters the sound file `input` into `output`, as `tapstream process` does.

    filters: a coefficient file (text, .f32, .f64, an impulse response), or
    matrix: a matrix file (TOML) or a Matrix read by Matrix.from_toml; exactly
    one of them. backend: "cpu", "cuda" or "auto". The keywords are the
    command's options (README, "Filtering a file"): gain_db (--gain), block,
    format ("float", "pcm16", "pcm24", "pcm32"), type, dither, tail, strict,
    ignore_rate, normalize (dBFS), max_taps, engine_options (["KEY=VALUE", ...]).

    The output appears only when the whole job succeeded; `input` is never
    modified. Returns the command's exit status: 0 done, 3 done from damaged
    input (cut short, or NaN/infinite samples filtered as 0; the warning names
    them). Raises FileNotFoundError for a missing input, ValueError for a bad
    argument (what the command refuses as a usage error), RuntimeError or
    ValueError (naming the file and the reason) when the job fails,
    KeyboardInterrupt when interrupted.
    """
    if (filters is None) == (matrix is None):
        raise ValueError("process_file: give filters=FILE or matrix=FILE.toml (one of them)")
    arguments = [_path(input, "input"), _path(output, "output")]
    if arguments[0] != "-" and not _os.path.exists(arguments[0]):
        raise FileNotFoundError(_errno.ENOENT, "process_file: no such input file", arguments[0])
    if filters is not None:
        arguments += ["--taps", _path(filters, "filters")]
    else:
        if isinstance(matrix, Matrix):
            if not matrix.file:
                raise TypeError("process_file: matrix must come from a file (Matrix.from_toml "
                                "or its name); this Matrix was made in Python")
            matrix = matrix.file
        arguments += ["--matrix", _path(matrix, "matrix")]
    arguments += ["--backend", str(backend)]
    options = [("--gain", gain_db), ("--block", block), ("--format", format), ("--type", type),
               ("--dither", dither), ("--normalize", normalize), ("--max-taps", max_taps)]
    for flag, value in options:
        if value is not None:
            arguments += [flag, str(value)]
    for flag, on in [("--tail", tail), ("--strict", strict), ("--ignore-rate", ignore_rate)]:
        if on:
            arguments.append(flag)
    for assignment in engine_options:
        arguments += ["--engine-option", str(assignment)]
    status = _tapstream._process_command(arguments)
    if status in (130, 129, 143):
        raise KeyboardInterrupt(f"process_file: interrupted (exit status {status}); "
                                f"nothing written to {arguments[1]}")
    return status


from . import _tapstream  # noqa: E402  (process_file's way to the command)
