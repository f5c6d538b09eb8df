"""Errors are Python exceptions naming the problem, and leave the engine as it was."""

import os
import unittest

import numpy as np

import tapstream
from support import SOURCE_DIR


class ErrorTest(unittest.TestCase):

    def setUp(self):
        self.engine = tapstream.Engine([np.ones(4, np.float32)] * 2, backend="cpu", max_block=64)

    def assert_raises(self, kind, words, call, *args, **kwargs):
        with self.assertRaises(kind) as caught:
            call(*args, **kwargs)
        for word in words:
            self.assertIn(word, str(caught.exception))

    def test_a_block_of_another_channel_count_names_both_counts(self):
        self.assert_raises(ValueError, ["3 channels", "2 inputs"], self.engine.process,
                           np.zeros((3, 10), np.float32))

    def test_a_block_of_another_dtype_is_refused_with_its_dtype(self):
        self.assert_raises(TypeError, ["float32", "float64"], self.engine.process,
                           np.zeros((2, 10)))
        self.assert_raises(TypeError, ["float32", "int16"], self.engine.process,
                           np.zeros((2, 10), np.int16))
        self.assert_raises(TypeError, ["float32", ">f4"], self.engine.process,
                           np.zeros((2, 10), ">f4"))

    def test_a_block_of_another_shape_is_refused(self):
        self.assert_raises(ValueError, ["2-D", "1 dimensions"], self.engine.process,
                           np.zeros(10, np.float32))
        self.assert_raises(TypeError, ["float32", "str"], self.engine.process, "samples")

    def test_an_out_array_that_is_the_block_or_the_wrong_shape_is_refused(self):
        x = np.zeros((2, 10), np.float32)
        self.assert_raises(ValueError, ["shares memory"], self.engine.process, x, out=x)
        self.assert_raises(ValueError, ["(2, 10)"], self.engine.process, x,
                           out=np.zeros((2, 9), np.float32))
        self.assert_raises(TypeError, ["float32"], self.engine.process, x,
                           out=np.zeros((2, 10)))
        out = np.full((2, 10), 7, np.float32)
        self.assertIs(self.engine.process(x, out=out), out)
        np.testing.assert_array_equal(out, 0)

    def test_process_takes_x_and_out_by_position_or_name_and_nothing_else(self):
        x = np.ones((2, 10), np.float32)
        expected = tapstream.Engine([np.ones(4, np.float32)] * 2, backend="cpu").process(x)
        np.testing.assert_array_equal(self.engine.process(x=x), expected)
        self.engine.reset()
        out = np.empty((2, 10), np.float32)
        self.assertIs(self.engine.process(x, out), out)
        np.testing.assert_array_equal(out, expected)
        self.assert_raises(TypeError, ["missing", "'x'"], self.engine.process)
        self.assert_raises(TypeError, ["missing", "'x'"], self.engine.process, out=out)
        self.assert_raises(TypeError, ["unexpected", "'y'"], self.engine.process, x, y=1)
        self.assert_raises(TypeError, ["multiple values", "'x'"], self.engine.process, x, x=x)
        self.assert_raises(TypeError, ["multiple values", "'out'"], self.engine.process, x, out,
                           out=out)
        self.assert_raises(TypeError, ["3 positional"], self.engine.process, x, out, 3)
        self.assertIn("out=None", tapstream.Engine.process.__doc__)

    def test_misaligned_samples_are_refused_with_the_remedy(self):
        records = np.zeros((2, 10), dtype=[("a", "u1"), ("x", "<f4")])
        self.assert_raises(ValueError, ["aligned", "ascontiguousarray"], self.engine.process,
                           records["x"])

    def test_empty_and_bad_filters_are_refused_by_name(self):
        self.assert_raises(ValueError, ["no channels"], tapstream.Engine, [])
        self.assert_raises(ValueError, ["filter 1", "no taps"], tapstream.Engine,
                           [np.ones(3, np.float32), np.zeros(0, np.float32)])
        self.assert_raises(ValueError, ["0 columns"], tapstream.Engine,
                           np.zeros((2, 0), np.float32))
        self.assert_raises(ValueError, ["filter 0", "tap 1", "not finite"], tapstream.Engine,
                           [np.array([1.0, np.nan], np.float32)])
        self.assert_raises(TypeError, ["float32 or float64", "int64"], tapstream.Engine,
                           [np.ones(3, np.int64)])
        self.assert_raises(ValueError, ["2-D", "[taps]"], tapstream.Engine,
                           np.ones(3, np.float32))
        self.assert_raises(TypeError, ["filter 0", "str"], tapstream.Engine, ["taps.txt"])

    def test_bad_engine_options_are_refused_by_name(self):
        h = [np.ones(3, np.float32)]
        self.assert_raises(ValueError, ["gpu", "cpu, cuda or auto"], tapstream.Engine, h,
                           backend="gpu")
        self.assert_raises(ValueError, ["max_block", "0"], tapstream.Engine, h, max_block=0)
        self.assert_raises(ValueError, ["max_taps", "2", "3 taps"], tapstream.Engine, h,
                           max_taps=2)

    def test_filters_longer_than_the_engine_holds_are_refused_and_the_old_ones_run_on(self):
        x = np.zeros((2, 8), np.float32)
        x[:, 0] = 1
        self.assert_raises(ValueError, ["taps"], self.engine.set_filters,
                           [np.ones(5, np.float32)] * 2)
        self.assert_raises(ValueError, ["channel"], self.engine.set_filters,
                           [np.ones(4, np.float32)] * 3)
        np.testing.assert_allclose(self.engine.process(x)[:, :5], [[1, 1, 1, 1, 0]] * 2)

    def test_wrong_matrix_indices_are_refused_by_path(self):
        h = np.ones(3, np.float32)
        self.assert_raises(ValueError, ["path 1", "output 3"], tapstream.Matrix, 2, 3,
                           [(0, 0, h), (1, 3, h)])
        self.assert_raises(ValueError, ["path 0", "input", "-1"], tapstream.Matrix, 2, 3,
                           [(-1, 0, h)])
        self.assert_raises(ValueError, ["path 1", "input 0 -> output 0"], tapstream.Matrix, 1,
                           1, [(0, 0, h), (0, 0, h)])
        self.assert_raises(ValueError, ["path 0", "2 items"], tapstream.Matrix, 1, 1, [(0, 0)])
        self.assert_raises(TypeError, ["path 0", "invert"], tapstream.Matrix, 1, 1,
                           [(0, 0, h, 0.0, 0, "yes")])
        self.assert_raises(ValueError, ["no paths"], tapstream.Matrix, 1, 1, [])

    def test_set_paths_refuses_a_pair_that_is_no_path_and_keeps_the_matrix(self):
        matrix = tapstream.Matrix(2, 2, [(0, 1, np.ones(3, np.float32))])
        engine = tapstream.Engine(matrix, backend="cpu")
        self.assert_raises(ValueError, ["input 1 -> output 1", "no path"], engine.set_paths,
                           {(1, 1): np.ones(3, np.float32)})
        self.assert_raises(ValueError, ["indices count from 0"], engine.set_paths,
                           {(0, -1): np.ones(3, np.float32)})
        self.assert_raises(TypeError, ["(input, output)"], engine.set_paths,
                           {0: np.ones(3, np.float32)})
        self.assert_raises(ValueError, ["set_paths", "Matrix"], engine.set_filters,
                           [np.ones(3, np.float32)] * 2)
        np.testing.assert_array_equal(engine.matrix.paths[0][2], np.ones(3, np.float32))

    def test_a_bad_matrix_file_is_named(self):
        self.assert_raises(ValueError, ["nowhere.toml", "no such file"],
                           tapstream.Matrix.from_toml, "nowhere.toml")
        bad = os.path.join(SOURCE_DIR, "config", "live-default.toml")
        self.assert_raises(ValueError, ["live-default.toml"], tapstream.Matrix.from_toml, bad)

    def test_the_cuda_backend_without_a_gpu_says_why(self):
        try:
            engine = tapstream.Engine([np.ones(3, np.float32)], backend="cuda")
        except RuntimeError as e:
            self.assertIn("backend cuda", str(e))
            return
        self.skipTest(f"a GPU is here: {engine.description}")


if __name__ == "__main__":
    unittest.main()
