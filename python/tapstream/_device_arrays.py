"""CUDA arrays the compiled module hands here: in Engine.process, those it
does not read itself (python/device_arrays.cpp reads CuPy arrays and PyTorch
tensors on the GPU), and the taps of Engine.set_paths and Engine's filters.

Anything with __cuda_array_interface__ (Numba, ...) or DLPack is read through
CuPy: the CUDA engine reads it and writes the output in device memory, with no
copy through the host, and the output comes back as a CuPy array on the same
device. The engine's work is ordered after what the array's stream had
enqueued, and is complete on return. A PyTorch tensor on the CPU goes through
NumPy and comes back a tensor.
"""

import numpy as np


def _module_of(x):
    return type(x).__module__.split(".")[0]


def _as_cupy(x):
    try:
        import cupy
    except ImportError as e:
        raise TypeError(f"process: a {type(x).__name__} is read through CuPy, which is not "
                        "installed; pass a CuPy array or a PyTorch tensor") from e
    if hasattr(x, "__cuda_array_interface__"):
        return cupy.asarray(x)
    return cupy.from_dlpack(x)


def process(engine, x):
    """Engine.process for the arrays the compiled module does not read itself
    (it reads CuPy arrays and PyTorch tensors on the GPU): a PyTorch tensor in
    host memory goes through NumPy and comes back a tensor; anything else with
    __cuda_array_interface__ or DLPack is read through CuPy and comes back a
    CuPy array."""
    if _module_of(x) == "torch":
        import torch
        return torch.from_numpy(engine.process(x.detach().numpy()))
    if hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__"):
        return engine.process(_as_cupy(x))
    raise TypeError(f"process: expected a (channels, frames) float32 array, got "
                    f"{type(x).__name__}")


def host_taps(taps):
    """Filters for set_filters / set_paths / Engine as NumPy (from device arrays)."""
    module = _module_of(taps)
    if module == "torch":
        return taps.detach().cpu().numpy()
    if module == "cupy":
        return taps.get()
    return np.asarray(taps)


def _device_taps(key, taps):
    """(pointer, count, stream, device, array) of 1-D float32 taps on a GPU,
    contiguous (`array` keeps them alive); float64 is converted on the device."""
    what = f"set_paths: input {key[0]} -> output {key[1]}" if isinstance(key, tuple) and \
        len(key) == 2 else f"set_paths: {key!r}"
    if _module_of(taps) == "torch":
        import torch
        if not taps.is_cuda:
            raise TypeError(f"{what}: a CPU tensor among device arrays; give all taps on the "
                            "GPU or all in host memory")
        t = taps.detach()
        if t.dtype == torch.float64:
            t = t.to(torch.float32)
        if t.dtype != torch.float32:
            raise TypeError(f"{what}: taps must be float32 or float64, got {t.dtype}")
        if t.dim() != 1:
            raise ValueError(f"{what}: expected a 1-D array of taps, got {t.dim()} dimensions")
        t = t.contiguous()
        return (t.data_ptr(), t.numel(), torch.cuda.current_stream(t.device).cuda_stream,
                t.device.index, t)
    import cupy
    x = taps if _module_of(taps) == "cupy" else _as_cupy(taps)
    with x.device:
        if x.dtype == cupy.float64:
            x = x.astype(cupy.float32)
        if x.dtype != cupy.float32:
            raise TypeError(f"{what}: taps must be float32 or float64, got {x.dtype}")
        if x.ndim != 1:
            raise ValueError(f"{what}: expected a 1-D array of taps, got {x.ndim} dimensions")
        x = cupy.ascontiguousarray(x)
        return x.data.ptr, x.size, cupy.cuda.get_current_stream().ptr, x.device.id, x


def _synchronize(stream, module):
    if module == "torch":
        import torch
        torch.cuda.ExternalStream(stream).synchronize()
    else:
        import cupy
        cupy.cuda.ExternalStream(stream).synchronize()


def _on_gpu(x):
    """Whether x is an array in GPU memory (a CPU tensor speaks DLPack too)."""
    if isinstance(x, np.ndarray):
        return False
    if _module_of(x) == "torch":
        return bool(x.is_cuda)
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack_device__"):
        return x.__dlpack_device__()[0] in (2, 13)  # kDLCUDA, kDLCUDAManaged
    return False


def device_paths(taps):
    """For Engine.set_paths with CUDA arrays: ([(input, output, pointer, count)],
    stream, device, arrays), or None when no taps are in GPU memory. Every array
    must be on one GPU; the engine waits for the first one's stream, and any
    other stream is waited for here."""
    on_gpu = {key: _on_gpu(value) for key, value in taps.items()}
    if not any(on_gpu.values()):
        return None
    entries, arrays, streams = [], [], {}
    device = None
    for key, value in taps.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise TypeError(f"set_paths: keys are (input, output) pairs, got {key!r}")
        if not on_gpu[key]:
            raise TypeError(f"set_paths: input {key[0]} -> output {key[1]}: taps in host memory "
                            "among device arrays; give all taps on the GPU or all in host memory")
        pointer, count, stream, on, array = _device_taps(key, value)
        if device is None:
            device = on
        elif on != device:
            raise ValueError(f"set_paths: input {key[0]} -> output {key[1]}: taps on GPU {on}, "
                             f"others on GPU {device}")
        entries.append((int(key[0]), int(key[1]), pointer, count))
        arrays.append(array)
        streams.setdefault(stream, _module_of(array))
    first = next(iter(streams))
    for stream, module in list(streams.items())[1:]:
        _synchronize(stream, module)
    return entries, first, device, arrays
