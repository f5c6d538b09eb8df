#pragma once
// Per-path updates of the CUDA routing matrix (MatrixEngine::set_paths): the
// new taps of a batch of paths, wherever they are on the device (the
// caller's arrays, or the engine's copy of host taps), become the time-domain
// partitions of their effective filters ([update][partition][2P]: P
// samples, then P zeros), a batched real FFT transforms them, and the
// spectra go into their places in the spare set of H (kernels/device/
// matrix_mac.hpp), every partition of each named path (so a shorter filter
// clears the old tail). Only the named paths' entries are read or written:
// an update costs its paths, not the matrix.
//
// The crossfade of a per-path update needs only the changed paths: the old
// output is the new one plus sum over changed paths of (H_old - H_new) X, so
// installing a path also keeps its difference to the running set (the
// "fade delta", [slot][partition][bins]), and the call after the update adds
// those products to a copy of the new output (launch_add_fade_delta).

#include <cuda_runtime.h>

#include <climits>

#include "kernels/device/matrix_chunks.hpp"
#include "kernels/device/matrix_mac.hpp"

namespace tapstream::cuda {

// What the `bad` flag holds while no tap was found non-finite (a
// cudaMemsetAsync of 0x7f bytes).
constexpr int kNoBadTap = 0x7f7f7f7f;

// One path's new taps: `count` floats at `taps` (device memory), run as
// effective taps `delay` zeros then float(double(tap) * gain) (gain in
// linear units, the polarity's sign included), scaled by 1/(2P) as H holds
// them. H's place: input, output. `index`: the path's position in the
// caller's update (what a non-finite tap reports); `slot`: its fade delta's
// row. Also names a path to copy (copy_path_spectra: input, output only).
struct PathUpdate {
  const float* taps = nullptr;
  long long count = 0;
  long long delay = 0;  // leading zeros (the remainder of a delay read segments back)
  int segments = 0;     // whole segments of delay: the fade reads X that far back
  double gain = 1.0;
  int input = 0, output = 0;
  int index = 0, slot = 0;
};

// A path that the next call crossfades: its place in H (its fade delta is
// the row of its position in the list).
struct FadePath {
  int input = 0, output = 0;
  int segments = 0;  // the path's whole segments of delay
};

// Sets *bad (device memory, kNoBadTap before) to the smallest index among
// the `updates` entries of `update` (device memory) whose taps hold a NaN
// or an infinity; `longest` is the largest count.
void launch_find_non_finite_taps(const PathUpdate* update, int updates, long long longest, int* bad,
                                 cudaStream_t stream);

// time[u][j][0..2P) for the `updates` entries of `update` (device memory),
// partitions j < partitions; with `bad` set, also find_non_finite_taps.
void launch_expand_path_taps(const PathUpdate* update, int updates, int partitions, int partition,
                             float* time, int* bad, cudaStream_t stream);

// Writes the `updates` paths' spectra ([u][j][bins], j < shape.partitions)
// into `spare` at their places; with `delta` set, also delta[slot][j][b] =
// running - new at the same place and fade[slot] = the path. Nothing at all
// when *bad (device memory) is not kNoBadTap, so that a bad tap anywhere in
// the update leaves the spare set as it was. Coalesced on both sides (a
// shared-memory transpose), when the updates are in H's order (input, then
// output).
void launch_install_path_spectra(const PathUpdate* update, int updates, const float2* spectra,
                                 const float2* running, float2* spare, float2* delta,
                                 FadePath* fade, const int* bad, const MatrixMacShape& shape,
                                 cudaStream_t stream);

// H's entries of the `paths` paths (input and output of each entry of
// `path`, device memory) from `from` into `to`.
void launch_copy_path_spectra(const PathUpdate* path, int paths, const float2* from, float2* to,
                              const MatrixMacShape& shape, cudaStream_t stream);

// For the chunk: y_old[o][b] += sum over the `count` fade paths (input i,
// output o, q whole segments of delay) and partitions j of delta[u][j][b] *
// X_{s-q-j}[i][b] (X: the mirrored delay line `fdl` of `slots` segments, read
// as the MAC reads it). y_old must hold the new set's output for the chunk
// before.
void launch_add_fade_delta(const FadePath* fade, int count, const float2* delta, const float2* fdl,
                           int slots, const MatrixChunk* chunk, const MatrixMacShape& shape,
                           float2* y_old, cudaStream_t stream);

}  // namespace tapstream::cuda
