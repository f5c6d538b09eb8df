#!/usr/bin/env python3
"""The script a user would write instead of tapstream: read a float WAV,
filter every channel with one FIR on the GPU, write a float WAV. Used by
bench/file-to-file.py as the peer to beat; prints one JSON line with its own
timings (imports, read, filter, write) so that the comparison can be made on
the whole process or on the work alone.

usage: user_fir_script.py cupy|torch IN.wav OUT.wav TAPS.npy
  cupy:  scipy.io.wavfile -> cupyx.scipy.signal.oaconvolve -> scipy.io.wavfile
  torch: scipy.io.wavfile -> torchaudio.functional.fftconvolve -> scipy.io.wavfile
"""

import json
import sys
import time

t0 = time.perf_counter()
method, src, dst, taps_file = sys.argv[1:5]
import numpy as np  # noqa: E402
import scipy.io.wavfile  # noqa: E402

if method == "cupy":
    import cupy as cp
    import cupyx.scipy.signal
else:
    import torch
    import torchaudio.functional
t_import = time.perf_counter()

rate, x = scipy.io.wavfile.read(src)  # (frames, channels) float32
if x.ndim == 1:
    x = x[:, None]
h = np.load(taps_file).astype(np.float32)
t_read = time.perf_counter()

frames = x.shape[0]
if method == "cupy":
    y_dev = cupyx.scipy.signal.oaconvolve(cp.asarray(x), cp.asarray(h)[:, None], axes=0)[:frames]
    y = cp.asnumpy(y_dev)
else:
    xt = torch.from_numpy(np.ascontiguousarray(x.T)).cuda()
    ht = torch.from_numpy(h).cuda()
    y = torchaudio.functional.fftconvolve(xt, ht.expand(xt.shape[0], -1))[:, :frames].T.cpu().numpy()
t_filter = time.perf_counter()

scipy.io.wavfile.write(dst, rate, np.ascontiguousarray(y, dtype=np.float32))
t_write = time.perf_counter()
print(json.dumps({"import_s": t_import - t0, "read_s": t_read - t_import,
                  "filter_s": t_filter - t_read, "write_s": t_write - t_filter,
                  "work_s": t_write - t_import}))
