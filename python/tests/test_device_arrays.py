"""CUDA arrays (CuPy, PyTorch) through the CUDA engine: read and written on the
device, the same kind of array back, exact for any split into calls. Each case
skips, with the reason, where there is no GPU, no CuPy or no PyTorch."""

import unittest

import numpy as np

import tapstream
from support import causal_convolution, random_splits, relative_error, say


def cuda_engine(filters, **kwargs):
    try:
        return tapstream.Engine(filters, backend="cuda", **kwargs)
    except RuntimeError as e:
        raise unittest.SkipTest(f"no CUDA engine here: {e}")


def cupy_or_skip():
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception as e:  # ImportError, or CuPy without a usable device
        raise unittest.SkipTest(f"no CuPy with a GPU: {e}")


def torch_or_skip():
    try:
        import torch
    except ImportError as e:
        raise unittest.SkipTest(f"no PyTorch: {e}")
    if not torch.cuda.is_available():
        raise unittest.SkipTest("PyTorch sees no GPU")
    return torch


class Arrays:
    """CuPy or PyTorch behind one face: to the device, back to NumPy, the kind."""

    def __init__(self, name):
        self.name = name
        self.lib = cupy_or_skip() if name == "cupy" else torch_or_skip()

    def device(self, a):
        return self.lib.asarray(a) if self.name == "cupy" else self.lib.from_numpy(a).cuda()

    def host(self, a):
        return a.get() if self.name == "cupy" else a.cpu().numpy()

    def is_device_array(self, a):
        if self.name == "cupy":
            return isinstance(a, self.lib.ndarray)
        return isinstance(a, self.lib.Tensor) and a.is_cuda


class DeviceArrayTest(unittest.TestCase):

    def check_exact_for_any_split(self, name, matrix):
        arrays = Arrays(name)
        rng = np.random.default_rng(71)
        say(f"seed 71, {name}, {'matrix' if matrix else 'a filter per channel'}")
        h = [rng.standard_normal(n).astype(np.float32) for n in (300, 5000)]
        if matrix:
            paths = [(0, 0, h[0]), (1, 2, h[1], -6.0, 10), (0, 2, h[0], 0.0, 0, True)]
            engine = cuda_engine(tapstream.Matrix(2, 3, paths), max_block=512)
        else:
            engine = cuda_engine(h, max_block=512)
        x = rng.standard_normal((2, 30000)).astype(np.float32)
        pieces, done = [], 0
        for n in random_splits(rng, x.shape[1], 1500):
            y = engine.process(arrays.device(x[:, done:done + n]))
            self.assertTrue(arrays.is_device_array(y), f"{type(y)} is not a {name} device array")
            self.assertEqual(tuple(y.shape), (engine.outputs, n))
            pieces.append(arrays.host(y))
            done += n
        y = np.concatenate(pieces, axis=1)
        if matrix:
            expected = np.zeros((3, x.shape[1]))
            for i, o, taps, gain_db, delay, invert in engine.matrix.paths:
                taps = np.concatenate([np.zeros(delay), taps]) * 10 ** (gain_db / 20)
                expected[o] += causal_convolution(x[i], -taps if invert else taps)
        else:
            expected = np.array([causal_convolution(x[c], h[c]) for c in range(2)])
        for o in range(expected.shape[0]):
            error = relative_error(y[o], expected[o])
            self.assertLessEqual(error, 1e-5, f"{name}, output {o}: relative error {error:.3g}")

    def test_cupy_arrays_are_filtered_exactly_on_the_device_for_any_split(self):
        self.check_exact_for_any_split("cupy", matrix=False)

    def test_torch_tensors_are_filtered_exactly_on_the_device_for_any_split(self):
        self.check_exact_for_any_split("torch", matrix=False)

    def test_a_matrix_filters_cupy_arrays_exactly(self):
        self.check_exact_for_any_split("cupy", matrix=True)

    def test_a_matrix_filters_torch_tensors_exactly(self):
        self.check_exact_for_any_split("torch", matrix=True)

    def test_device_and_host_calls_are_one_stream(self):
        arrays = Arrays("cupy")
        rng = np.random.default_rng(72)
        say("seed 72")
        h = rng.standard_normal((2, 2000)).astype(np.float32)
        engine = cuda_engine(h, max_block=256)
        x = rng.standard_normal((2, 4000)).astype(np.float32)
        y = np.concatenate([engine.process(x[:, :1000]),
                            arrays.host(engine.process(arrays.device(x[:, 1000:3000]))),
                            engine.process(x[:, 3000:])], axis=1)
        for c in range(2):
            self.assertLessEqual(relative_error(y[c], causal_convolution(x[c], h[c])), 1e-5)

    def test_filters_from_device_arrays_update_the_engine(self):
        arrays = Arrays("torch")
        rng = np.random.default_rng(73)
        say("seed 73")
        old, new = (rng.standard_normal((2, 700)).astype(np.float32) for _ in range(2))
        engine = cuda_engine(arrays.device(old), max_block=256)
        x = rng.standard_normal((2, 3000)).astype(np.float32)
        engine.process(arrays.device(x[:, :1000]))
        engine.set_filters(arrays.device(new), crossfade=True)
        y = arrays.host(engine.process(arrays.device(x[:, 1000:])))
        for c in range(2):
            expected = causal_convolution(x[c], new[c])[1000:]
            self.assertLessEqual(relative_error(y[c, 256:], expected[256:]), 1e-5)

    def check_paths_from_device_arrays(self, name):
        """Every path of a 6 x 2 matrix replaced from device arrays (float32,
        float64 and strided) before every block: each block fades from the old taps' output to the new ones'
        (weight (n + 1) / frames), so from one block after an update on, the
        output is the new filters' (float64 piecewise reference); no sample lost."""
        arrays = Arrays(name)
        rng = np.random.default_rng(74)
        say(f"seed 74, {name}")
        inputs, outputs, taps, block, blocks = 6, 2, 700, 128, 16
        h = {(i, o): rng.standard_normal(taps).astype(np.float32)
             for i in range(inputs) for o in range(outputs)}
        engine = cuda_engine(tapstream.Matrix(inputs, outputs,
                                              [(i, o, t) for (i, o), t in h.items()]),
                             max_block=block)
        x = rng.standard_normal((inputs, block * blocks)).astype(np.float32)
        expected = np.zeros((outputs, x.shape[1]))
        got = []
        for b in range(blocks):
            start, end = b * block, (b + 1) * block
            new = {key: rng.standard_normal(int(rng.integers(1, taps + 1))).astype(np.float32)
                   for key in h if b == 0 or rng.random() < 0.75}
            # Taps as float32, as float64 and as a strided view (every second element).
            forms = [lambda t: arrays.device(t), lambda t: arrays.device(t.astype(np.float64)),
                     lambda t: arrays.device(np.repeat(t, 2))[::2]]
            engine.set_paths({key: forms[(b + key[0]) % 3](t) for key, t in new.items()},
                             crossfade=True)
            w = (np.arange(block) + 1) / block
            for (i, o), old in h.items():
                y_old = causal_convolution(x[i, :end], old)[start:end]
                if (i, o) in new:
                    y_new = causal_convolution(x[i, :end], new[(i, o)])[start:end]
                    expected[o, start:end] += (1 - w) * y_old + w * y_new
                else:
                    expected[o, start:end] += y_old
            h.update(new)
            y = engine.process(arrays.device(x[:, start:end]))
            self.assertTrue(arrays.is_device_array(y))
            got.append(arrays.host(y))
        y = np.concatenate(got, axis=1)
        for o in range(outputs):
            error = relative_error(y[o], expected[o])
            self.assertLessEqual(error, 1e-5, f"{name}, output {o}: relative error {error:.3g}")
        # The engine does not keep device taps on the host: saying so beats stale taps.
        with self.assertRaises(RuntimeError) as caught:
            engine.matrix
        self.assertIn("device arrays", str(caught.exception))

    def test_paths_from_cupy_arrays_replace_many_paths_every_block_exactly(self):
        self.check_paths_from_device_arrays("cupy")

    def test_paths_from_torch_tensors_replace_many_paths_every_block_exactly(self):
        self.check_paths_from_device_arrays("torch")

    def check_rows_of_device_taps(self, name):
        arrays = Arrays(name)
        rng = np.random.default_rng(75)
        say(f"seed 75, {name}")
        pairs = [(i, o) for i in range(4) for o in range(2)]
        matrix = tapstream.Matrix(4, 2, [(i, o, rng.standard_normal(500).astype(np.float32))
                                         for i, o in pairs])
        engines = [cuda_engine(matrix, max_block=128) for _ in range(2)]
        x = rng.standard_normal((4, 1024)).astype(np.float32)
        rows = rng.standard_normal((len(pairs), 400)).astype(np.float32)
        engines[0].set_paths({pair: arrays.device(rows[k]) for k, pair in enumerate(pairs)})
        engines[1].set_paths(arrays.device(rows), pairs=pairs)
        y = [arrays.host(e.process(arrays.device(x))) for e in engines]
        np.testing.assert_allclose(y[1], y[0], rtol=0, atol=1e-6)
        with self.assertRaises(ValueError) as caught:
            engines[1].set_paths(arrays.device(rows[:3]), pairs=pairs)
        self.assertIn("3 rows of taps for 8 pairs", str(caught.exception))

    def test_rows_of_cupy_taps_replace_the_pairs_paths(self):
        self.check_rows_of_device_taps("cupy")

    def test_rows_of_torch_taps_replace_the_pairs_paths(self):
        self.check_rows_of_device_taps("torch")

    def test_device_and_host_taps_in_one_update_are_refused_naming_the_path(self):
        arrays = Arrays("cupy")
        engine = cuda_engine(tapstream.Matrix(1, 2, [(0, 0, np.ones(4, np.float32)),
                                                     (0, 1, np.ones(4, np.float32))]))
        with self.assertRaises(TypeError) as caught:
            engine.set_paths({(0, 0): arrays.device(np.ones(3, np.float32)),
                              (0, 1): np.ones(3, np.float32)})
        self.assertIn("input 0 -> output 1", str(caught.exception))

    def check_out_and_memory_order(self, name):
        arrays = Arrays(name)
        rng = np.random.default_rng(73)
        say(f"seed 73, {name}")
        h = rng.standard_normal((3, 700)).astype(np.float32)
        x = rng.standard_normal((3, 4000)).astype(np.float32)
        expected = np.array([causal_convolution(x[c], h[c]) for c in range(3)])
        engine = cuda_engine(h, max_block=256)
        wide = arrays.device(np.ascontiguousarray(np.repeat(x, 2, axis=1)))
        views = [arrays.device(x[:, :1000]),                       # C order
                 arrays.device(np.asfortranarray(x[:, 1000:2000])) if name == "cupy"
                 else arrays.device(x[:, 1000:2000].T.copy()).T,    # interleaved in memory
                 wide[:, 4000:6000:2]]                               # every second frame
        pieces = []
        for i, view in enumerate(views):
            if i == 1:
                out = arrays.device(np.full((3, 1000), 7, np.float32))
                self.assertIs(engine.process(view, out=out), out)
                pieces.append(arrays.host(out))
            else:
                pieces.append(arrays.host(engine.process(view)))
        y = np.concatenate(pieces, axis=1)
        for c in range(3):
            error = relative_error(y[c], expected[c, :3000])
            self.assertLessEqual(error, 1e-5, f"{name}, channel {c}: relative error {error:.3g}")
        block = arrays.device(np.zeros((3, 16), np.float32))
        for out, kind, words in [
                (arrays.device(np.zeros((3, 15), np.float32)), ValueError, ["(3, 16)"]),
                (np.zeros((3, 16), np.float32), TypeError, ["out", "kind"]),
                (arrays.device(np.zeros((16, 3), np.float32)).T, ValueError, ["C-ordered"]),
                (block, ValueError, ["shares memory"])]:
            with self.assertRaises(kind) as caught:
                engine.process(block, out=out)
            for word in words:
                self.assertIn(word, str(caught.exception))

    def test_out_and_any_memory_order_with_cupy_arrays(self):
        self.check_out_and_memory_order("cupy")

    def test_out_and_any_memory_order_with_torch_tensors(self):
        self.check_out_and_memory_order("torch")

    def test_a_device_block_of_another_channel_count_names_both_counts(self):
        arrays = Arrays("cupy")
        engine = cuda_engine([np.ones(4, np.float32)] * 2)
        with self.assertRaises(ValueError) as caught:
            engine.process(arrays.device(np.zeros((3, 8), np.float32)))
        self.assertIn("3 channels", str(caught.exception))
        self.assertIn("2 inputs", str(caught.exception))
        with self.assertRaises(TypeError) as caught:
            engine.process(arrays.device(np.zeros((2, 8), np.float64)))
        self.assertIn("float64", str(caught.exception))

    def test_a_device_array_on_the_cpu_engine_is_refused_with_the_remedy(self):
        arrays = Arrays("cupy")
        engine = tapstream.Engine([np.ones(4, np.float32)], backend="cpu")
        with self.assertRaises(TypeError) as caught:
            engine.process(arrays.device(np.zeros((1, 8), np.float32)))
        self.assertIn("host memory", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
