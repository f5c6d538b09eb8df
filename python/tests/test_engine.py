"""Engine on per-channel filters, CPU engine: exact output for any split into
calls and any memory order, updates with and without a crossfade, the GIL."""

import sys
import threading
import time
import unittest

import numpy as np

import tapstream
from support import causal_convolution, random_splits, relative_error, say


def stream(engine, x, splits):
    """Runs x through engine in calls of the given lengths; the outputs side by side."""
    out, done = [], 0
    for n in splits:
        out.append(engine.process(x[:, done:done + n]))
        done += n
    return np.concatenate(out, axis=1)


class EngineTest(unittest.TestCase):

    def check_exact(self, engine, x, filters, y):
        for c, h in enumerate(filters):
            error = relative_error(y[c], causal_convolution(x[c], h))
            self.assertLessEqual(error, 1e-5, f"channel {c}: relative error {error:.3g}")

    def test_output_equals_the_float64_causal_convolution_for_any_split_into_calls(self):
        for seed in (1, 2, 3):
            rng = np.random.default_rng(seed)
            filters = [rng.standard_normal(n).astype(np.float32) for n in (1, 37, 700, 3001)]
            x = rng.standard_normal((4, 20000)).astype(np.float32)
            splits = random_splits(rng, x.shape[1], 3 * 512)  # calls up to 3 engine blocks
            say(f"seed {seed}: {len(splits)} calls, the first {splits[:6]}")
            engine = tapstream.Engine(filters, backend="cpu", max_block=512)
            y = stream(engine, x, splits)
            self.assertEqual(y.shape, (4, 20000))
            self.assertEqual(y.dtype, np.float32)
            self.check_exact(engine, x, filters, y)

    def test_long_filters_and_one_call_of_many_blocks_are_exact(self):
        rng = np.random.default_rng(7)
        say("seed 7")
        filters = rng.standard_normal((2, 65536)).astype(np.float32) * 0.01
        x = rng.standard_normal((2, 100000)).astype(np.float32)
        engine = tapstream.Engine(filters, backend="cpu", max_block=4096)
        self.check_exact(engine, x, filters, engine.process(x))

    def test_a_block_in_any_memory_order_gives_the_same_output(self):
        rng = np.random.default_rng(11)
        say("seed 11")
        filters = rng.standard_normal((3, 300)).astype(np.float32)
        x = rng.standard_normal((3, 5000)).astype(np.float32)
        reference = tapstream.Engine(filters, backend="cpu", max_block=1024)
        expected = np.concatenate([reference.process(x[:, :700].copy()),
                                   reference.process(x[:, 700:].copy())], 1)
        views = {
            "Fortran order (interleaved)": np.asfortranarray(x),
            "every second frame of a wider array": np.repeat(x, 2, axis=1)[:, ::2],
            "frames reversed twice": x[:, ::-1].copy()[:, ::-1],
            "the first frames of longer rows": np.hstack([x, x])[:, :5000],
        }
        for name, view in views.items():
            engine = tapstream.Engine(filters, backend="cpu", max_block=1024)
            y = np.concatenate([engine.process(view[:, :700]), engine.process(view[:, 700:])], 1)
            np.testing.assert_array_equal(y, expected, err_msg=name)

    def test_a_2d_array_is_a_filter_per_channel(self):
        h = np.array([[1.0, 0.5], [0.0, 2.0]], dtype=np.float32)
        engine = tapstream.Engine(h, backend="cpu", max_block=64)
        y = engine.process(np.array([[1, 0, 0], [1, 0, 0]], dtype=np.float32))
        np.testing.assert_allclose(y, [[1.0, 0.5, 0.0], [0.0, 2.0, 0.0]], atol=1e-6)
        self.assertEqual((engine.inputs, engine.outputs, engine.max_block), (2, 2, 64))
        self.assertEqual(engine.backend, "cpu")

    def test_float64_filters_are_taken_as_float32(self):
        h = [np.array([0.25, 0.5]), np.array([1.0])]
        y = tapstream.Engine(h, backend="cpu").process(np.ones((2, 3), dtype=np.float32))
        np.testing.assert_allclose(y, [[0.25, 0.75, 0.75], [1, 1, 1]], atol=1e-6)

    def test_no_frames_give_no_frames(self):
        engine = tapstream.Engine([np.ones(4, np.float32)], backend="cpu")
        self.assertEqual(engine.process(np.zeros((1, 0), np.float32)).shape, (1, 0))

    def check_update(self, crossfade, call_frames):
        rng = np.random.default_rng(21 + call_frames)
        say(f"seed {21 + call_frames}, crossfade {crossfade}, calls of {call_frames} frames")
        old = [rng.standard_normal(n).astype(np.float32) for n in (200, 900)]
        new = [rng.standard_normal(n).astype(np.float32) for n in (1000, 50)]
        x = rng.standard_normal((2, 12000)).astype(np.float32)
        engine = tapstream.Engine(old, backend="cpu", max_block=256, max_taps=1000)
        before = stream(engine, x[:, :5000], [call_frames] * (5000 // call_frames) +
                        ([5000 % call_frames] if 5000 % call_frames else []))
        engine.set_filters(new, crossfade=crossfade)
        after = stream(engine, x[:, 5000:], [call_frames] * (7000 // call_frames) +
                       ([7000 % call_frames] if 7000 % call_frames else []))
        fade = min(call_frames, 256) if crossfade else 0
        for c in range(2):
            y_old = causal_convolution(x[c], old[c])
            y_new = causal_convolution(x[c], new[c])
            self.assertLessEqual(relative_error(before[c], y_old[:5000]), 1e-5)
            error = relative_error(after[c, fade:], y_new[5000 + fade:])
            self.assertLessEqual(error, 1e-5, f"channel {c} after the first block: {error:.3g}")
            if crossfade:
                # Within the fade: between the two filters' outputs, leaving the old one.
                head = after[c, :fade].astype(np.float64)
                lo = np.minimum(y_old[5000:5000 + fade], y_new[5000:5000 + fade]) - 1e-3
                hi = np.maximum(y_old[5000:5000 + fade], y_new[5000:5000 + fade]) + 1e-3
                self.assertTrue(np.all((head >= lo) & (head <= hi)), f"channel {c}: fade")
                self.assertGreater(np.max(np.abs(head - y_new[5000:5000 + fade])), 1e-3)

    def test_after_a_crossfaded_update_the_output_is_the_new_filters_from_one_block_on(self):
        for call_frames in (256, 100, 1000):
            self.check_update(True, call_frames)

    def test_an_update_without_crossfade_is_the_new_filters_at_once(self):
        self.check_update(False, 128)

    def test_set_paths_replaces_one_channels_filter(self):
        rng = np.random.default_rng(5)
        say("seed 5")
        filters = [rng.standard_normal(64).astype(np.float32) for _ in range(3)]
        replacement = rng.standard_normal(80).astype(np.float32)
        x = rng.standard_normal((3, 4000)).astype(np.float32)
        engine = tapstream.Engine(filters, backend="cpu", max_block=128, max_taps=80)
        engine.process(x[:, :1000])
        engine.set_paths({(1, 1): replacement}, crossfade=False)
        y = engine.process(x[:, 1000:])
        expected = [filters[0], replacement, filters[2]]
        for c in range(3):
            self.assertLessEqual(
                relative_error(y[c], causal_convolution(x[c], expected[c])[1000:]), 1e-5)
        np.testing.assert_array_equal(engine.matrix.paths[1][2], replacement)

    def test_reset_starts_the_stream_again(self):
        engine = tapstream.Engine([np.ones(8, np.float32)], backend="cpu")
        x = np.ones((1, 5), np.float32)
        first = engine.process(x)
        engine.process(x)
        engine.reset()
        np.testing.assert_array_equal(engine.process(x), first)

    def test_the_gil_is_released_while_the_engine_works(self):
        filters = np.random.default_rng(3).standard_normal((8, 65536)).astype(np.float32)
        engine = tapstream.Engine(filters, backend="cpu", max_block=4096)
        x = np.ones((8, 1 << 19), np.float32)
        started = threading.Event()
        checked = threading.Event()
        done = []
        seen_while_processing = []

        def work():
            started.set()
            # Calls until this thread has looked (at most 40: a few seconds).
            for _ in range(40):
                engine.process(x)
                if checked.is_set():
                    break
            done.append(True)

        interval = sys.getswitchinterval()
        # No time-slicing: a thread holding the GIL keeps it until it waits.
        sys.setswitchinterval(1000.0)
        try:
            worker = threading.Thread(target=work)
            begin = time.monotonic()
            worker.start()
            started.wait()
            time.sleep(0.001)  # lets the worker into process(); back only when the GIL is free
            seen_while_processing.append(not done)
            checked.set()
            worker.join()
            took = time.monotonic() - begin
        finally:
            sys.setswitchinterval(interval)
        say(f"the worker's calls took {took:.2f} s")
        self.assertTrue(seen_while_processing[0],
                        "this thread ran only after the worker's process() calls returned: "
                        "the GIL was held")


if __name__ == "__main__":
    unittest.main()
