"""CUDA arrays in and out of Engine.process (the compiled Engine hands them here).

A CuPy array, a PyTorch tensor on the GPU, or anything with
__cuda_array_interface__ (Numba, ...) or DLPack: the CUDA engine reads it and
writes the output in device memory, with no copy through the host, and the
output comes back as the same kind of array on the same device (a CuPy array
for an object that only speaks __cuda_array_interface__ or DLPack). The engine's
work is ordered after what the array's stream had enqueued, and is complete on
return. A PyTorch tensor on the CPU goes through NumPy and comes back a tensor.
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


def _check(engine, shape, dtype_name):
    if dtype_name != "float32":
        raise TypeError(f"process: the block must be float32, got {dtype_name}")
    if len(shape) != 2:
        raise ValueError(f"process: expected a 2-D (channels, frames) block, got {len(shape)} "
                         "dimensions")
    if shape[0] != engine.inputs:
        raise ValueError(f"process: the block has {shape[0]} channels; the engine has "
                         f"{engine.inputs} inputs")


def _process_torch(engine, x):
    import torch
    _check(engine, tuple(x.shape), str(x.dtype).replace("torch.", ""))
    if not x.is_cuda:
        return torch.from_numpy(engine.process(x.detach().numpy()))
    x = x.detach().contiguous()
    out = torch.empty((engine.outputs, x.shape[1]), dtype=torch.float32, device=x.device)
    if x.shape[1]:
        stream = torch.cuda.current_stream(x.device).cuda_stream
        engine._process_device(x.data_ptr(), out.data_ptr(), x.shape[1], stream, x.device.index)
    return out


def _process_cupy(engine, x):
    import cupy
    _check(engine, x.shape, str(x.dtype))
    with x.device:
        x = cupy.ascontiguousarray(x)
        out = cupy.empty((engine.outputs, x.shape[1]), dtype=cupy.float32)
        if x.shape[1]:
            stream = cupy.cuda.get_current_stream().ptr
            engine._process_device(x.data.ptr, out.data.ptr, x.shape[1], stream, x.device.id)
    return out


def process(engine, x):
    if _module_of(x) == "torch":
        return _process_torch(engine, x)
    if _module_of(x) == "cupy":
        return _process_cupy(engine, x)
    if hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__"):
        return _process_cupy(engine, _as_cupy(x))
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
