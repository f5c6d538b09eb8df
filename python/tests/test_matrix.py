"""Matrix: paths with gain, delay and polarity summed where they meet, matrix
files, per-path updates; CPU engine."""

import os
import unittest

import numpy as np

import tapstream
from support import SOURCE_DIR, causal_convolution, random_splits, relative_error, say


def expected_output(matrix_paths, outputs, x):
    y = np.zeros((outputs, x.shape[1]))
    for i, o, taps, gain_db, delay, invert in matrix_paths:
        h = np.concatenate([np.zeros(delay), np.asarray(taps, np.float64)])
        h *= 10.0 ** (gain_db / 20.0) * (-1.0 if invert else 1.0)
        y[o] += causal_convolution(x[i], h)
    return y


class MatrixTest(unittest.TestCase):

    def test_paths_with_gain_delay_and_polarity_sum_at_their_outputs(self):
        rng = np.random.default_rng(31)
        say("seed 31")
        h = [rng.standard_normal(n).astype(np.float32) for n in (100, 2000, 17, 600)]
        paths = [(0, 0, h[0]), (1, 2, h[1], -6.0, 10), (0, 2, h[2], 3.5, 0, True),
                 (1, 1, h[3], 0.0, 333, False)]
        matrix = tapstream.Matrix(2, 3, paths)
        self.assertEqual((matrix.inputs, matrix.outputs, len(matrix.paths)), (2, 3, 4))
        self.assertEqual(matrix.max_taps, 2010)
        x = rng.standard_normal((2, 9000)).astype(np.float32)
        engine = tapstream.Engine(matrix, backend="cpu", max_block=512)
        self.assertEqual((engine.inputs, engine.outputs), (2, 3))
        splits = random_splits(rng, x.shape[1], 1500)
        y = np.concatenate([engine.process(x[:, a:a + n])
                            for a, n in zip(np.cumsum([0] + splits[:-1]), splits)], axis=1)
        expected = expected_output(matrix.paths, 3, x)
        for o in range(3):
            error = relative_error(y[o], expected[o])
            self.assertLessEqual(error, 1e-5, f"output {o}: relative error {error:.3g}")

    def test_an_output_no_path_reaches_is_silent(self):
        matrix = tapstream.Matrix(1, 2, [(0, 1, np.ones(3, np.float32))])
        y = tapstream.Engine(matrix, backend="cpu").process(np.ones((1, 10), np.float32))
        np.testing.assert_array_equal(y[0], 0.0)

    def test_a_matrix_file_runs_as_its_paths_say(self):
        file = os.path.join(SOURCE_DIR, "config", "matrix", "crossover-2way.toml")
        matrix = tapstream.Matrix.from_toml(file)
        self.assertEqual((matrix.inputs, matrix.outputs), (2, 4))
        self.assertEqual(matrix.file, file)
        rng = np.random.default_rng(41)
        say("seed 41")
        x = rng.standard_normal((2, 6000)).astype(np.float32)
        y = tapstream.Engine(matrix, backend="cpu", max_block=1024).process(x)
        expected = expected_output(matrix.paths, 4, x)
        for o in range(4):
            self.assertLessEqual(relative_error(y[o], expected[o]), 1e-5, f"output {o}")

    def test_set_paths_changes_only_the_named_paths_from_one_block_on(self):
        rng = np.random.default_rng(51)
        say("seed 51")
        h0, h1, h0b = (rng.standard_normal(n).astype(np.float32) for n in (300, 400, 500))
        matrix = tapstream.Matrix(2, 3, [(0, 0, h0), (1, 2, h1, -6.0, 10), (0, 1, h1)])
        engine = tapstream.Engine(matrix, backend="cpu", max_block=256, max_taps=600)
        x = rng.standard_normal((2, 8000)).astype(np.float32)
        engine.process(x[:, :3000])
        engine.set_paths({(0, 0): h0b}, crossfade=True)
        y = np.concatenate([engine.process(x[:, 3000:3200]), engine.process(x[:, 3200:])], 1)
        paths = engine.matrix.paths
        np.testing.assert_array_equal(paths[0][2], h0b)
        self.assertEqual(paths[1][3:], (-6.0, 10, False))  # gain and delay stay
        expected = expected_output(paths, 3, x)[:, 3000:]
        for o in range(3):
            self.assertLessEqual(relative_error(y[o, 200:], expected[o, 200:]), 1e-5, f"output {o}")
        # Paths not named never change, not even in the fade.
        self.assertLessEqual(relative_error(y[1:], expected[1:]), 1e-5)

    def test_set_paths_takes_rows_of_taps_for_a_list_of_pairs(self):
        rng = np.random.default_rng(53)
        say("seed 53")
        h = [rng.standard_normal(300).astype(np.float32) for _ in range(3)]
        matrix = tapstream.Matrix(2, 3, [(0, 0, h[0]), (1, 2, h[1], -6.0, 10), (0, 1, h[2])])
        engines = [tapstream.Engine(matrix, backend="cpu", max_block=256, max_taps=600)
                   for _ in range(2)]
        x = rng.standard_normal((2, 4000)).astype(np.float32)
        rows = rng.standard_normal((2, 450))  # float64 rows are taken as float32
        engines[0].set_paths({(1, 2): rows[0].astype(np.float32),
                              (0, 0): rows[1].astype(np.float32)})
        engines[1].set_paths(rows, pairs=[(1, 2), (0, 0)])
        y = [e.process(x) for e in engines]
        np.testing.assert_array_equal(y[1], y[0])
        np.testing.assert_array_equal(engines[1].matrix.paths[0][2], rows[1].astype(np.float32))
        for call, kind, words in [
                (lambda: engines[1].set_paths(rows, pairs=[(0, 0)]), ValueError,
                 ["2 rows", "1 pairs"]),
                (lambda: engines[1].set_paths(rows, pairs=[(0, 0), (0, 0)]), ValueError,
                 ["(0, 0) twice"]),
                (lambda: engines[1].set_paths(rows[0], pairs=[(0, 0)]), ValueError, ["2-D"]),
                (lambda: engines[1].set_paths(rows), TypeError, ["dict", "pairs="]),
                (lambda: engines[1].set_paths(rows, pairs=[(0, 0), (1, 1)]), ValueError,
                 ["no path"])]:
            with self.assertRaises(kind) as caught:
                call()
            for word in words:
                self.assertIn(word, str(caught.exception))

    def test_set_paths_before_every_call_matches_the_piecewise_crossfaded_reference(self):
        rng = np.random.default_rng(52)
        say("seed 52")
        taps = [rng.standard_normal(n).astype(np.float32) for n in (200, 50, 120)]
        matrix = tapstream.Matrix(2, 2, [(0, 0, taps[0]), (1, 0, taps[1], -3.0, 4),
                                         (1, 1, taps[2], 0.0, 0, True)])
        block, calls = 64, 30
        engine = tapstream.Engine(matrix, backend="cpu", max_block=block, max_taps=300)
        x = rng.standard_normal((2, block * calls)).astype(np.float32)
        running = [list(p) for p in matrix.paths]
        want = np.zeros((2, block * calls))
        got = []
        for call in range(calls):
            span = slice(call * block, (call + 1) * block)
            before = expected_output([tuple(p) for p in running], 2, x)[:, span]
            if call % 2:
                new = {(0, 0): rng.standard_normal(int(rng.integers(1, 250))).astype(np.float32),
                       (1, 1): rng.standard_normal(int(rng.integers(1, 250))).astype(np.float32)}
                engine.set_paths(new, crossfade=True)
                running[0][2], running[2][2] = new[(0, 0)], new[(1, 1)]
            after = expected_output([tuple(p) for p in running], 2, x)[:, span]
            w = np.arange(1, block + 1) / block
            want[:, span] = before + w * (after - before)
            got.append(engine.process(x[:, span]))
        got = np.concatenate(got, 1)
        for o in range(2):
            self.assertLessEqual(relative_error(got[o], want[o]), 1e-5, f"output {o}")
        np.testing.assert_array_equal(engine.matrix.paths[2][2], running[2][2])

    def test_set_filters_takes_a_matrix_with_the_same_paths(self):
        a = tapstream.Matrix(1, 2, [(0, 0, np.ones(2, np.float32)), (0, 1, np.ones(1, np.float32))])
        b = tapstream.Matrix(1, 2, [(0, 0, np.full(2, 3, np.float32)), (0, 1, [2.0], 0.0, 1)])
        engine = tapstream.Engine(a, backend="cpu", max_taps=4)
        engine.set_filters(b, crossfade=False)
        y = engine.process(np.array([[1, 0, 0]], np.float32))
        np.testing.assert_allclose(y, [[3, 3, 0], [0, 2, 0]], atol=1e-6)


if __name__ == "__main__":
    unittest.main()
