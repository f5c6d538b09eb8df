"""process_file is `tapstream process`: the same output file, bit for bit."""

import os
import subprocess
import tempfile
import unittest
import wave

import numpy as np

import tapstream
from support import BINARY, SOURCE_DIR, say

LOWPASS = os.path.join(SOURCE_DIR, "config", "filters", "lowpass-4k-48k.txt")
CROSSOVER = os.path.join(SOURCE_DIR, "config", "matrix", "crossover-2way.toml")


def write_wav(path, samples, rate=48000):
    """samples: (channels, frames) in -1..1, written as 16-bit PCM."""
    pcm = np.clip(np.round(samples.T * 32767), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as f:
        f.setnchannels(samples.shape[0])
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class ProcessFileTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="tapstream-python-")
        self.input = os.path.join(self.dir.name, "in.wav")
        rng = np.random.default_rng(61)
        say("seed 61")
        write_wav(self.input, rng.uniform(-0.5, 0.5, (2, 30000)))

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def command(self, *arguments):
        done = subprocess.run([BINARY, "process", *arguments], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)

    def test_filters_write_what_the_command_writes(self):
        for extra, kwargs in [([], {}), (["--format", "float", "--tail"],
                                         {"format": "float", "tail": True}),
                              (["--gain", "-3", "--block", "1000"], {"gain_db": -3, "block": 1000})]:
            self.command(self.input, self.path("cli.wav"), "--taps", LOWPASS, "--backend", "cpu",
                         *extra)
            status = tapstream.process_file(self.input, self.path("py.wav"), filters=LOWPASS,
                                            backend="cpu", **kwargs)
            self.assertEqual(status, 0)
            self.assertEqual(read_bytes(self.path("py.wav")), read_bytes(self.path("cli.wav")),
                             f"options {extra}")

    def test_a_matrix_writes_what_the_command_writes(self):
        self.command(self.input, self.path("cli.flac"), "--matrix", CROSSOVER, "--backend", "cpu")
        tapstream.process_file(self.input, self.path("py.flac"), matrix=CROSSOVER, backend="cpu")
        self.assertEqual(read_bytes(self.path("py.flac")), read_bytes(self.path("cli.flac")))
        tapstream.process_file(self.input, self.path("py2.flac"),
                               matrix=tapstream.Matrix.from_toml(CROSSOVER), backend="cpu")
        self.assertEqual(read_bytes(self.path("py2.flac")), read_bytes(self.path("cli.flac")))

    def test_a_failed_job_names_the_culprit_and_writes_nothing(self):
        out = self.path("out.wav")
        with self.assertRaises(FileNotFoundError) as caught:
            tapstream.process_file(self.path("missing.wav"), out, filters=LOWPASS, backend="cpu")
        self.assertIn("missing.wav", str(caught.exception))
        with self.assertRaises(RuntimeError) as caught:  # a job that fails while it runs
            tapstream.process_file(self.input, out, filters=self.path("missing.txt"),
                                   backend="cpu")
        self.assertIn("missing.txt", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            tapstream.process_file(self.input, self.input, filters=LOWPASS, backend="cpu")
        self.assertIn("refusing to overwrite the input", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            tapstream.process_file(self.input, out, filters=LOWPASS, format="pcm12")
        self.assertIn("pcm12", str(caught.exception))
        with self.assertRaises(TypeError) as caught:
            tapstream.process_file(self.input, out, filters=np.ones(3, np.float32))
        self.assertIn("Engine.process", str(caught.exception))
        with self.assertRaises(ValueError):
            tapstream.process_file(self.input, out, filters=LOWPASS, matrix=CROSSOVER)
        self.assertFalse(os.path.exists(out))
        self.assertEqual(sorted(os.listdir(self.dir.name)), ["in.wav"])


if __name__ == "__main__":
    unittest.main()
