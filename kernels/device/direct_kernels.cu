// Direct-form FIR kernels (see direct_kernels.hpp). Accumulation is blocked: each
// chunk of at most kAccumulationChunk taps is summed into a fresh partial that is
// then added to the total, which keeps float32 rounding of 131072-tap filters well
// inside the 1e-5 relative error bound.
//
// The production kernels (tuned, its streaming and persistent forms, the
// carry and the (de)interleaving copy) live here; the teaching variants of
// PMPP chapter 7 live in kernels/teaching/ and are compiled into this
// translation unit, since they read the same __constant__ banks (a
// __constant__ variable belongs to one translation unit without relocatable
// device code, which would change how every kernel is compiled).

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/device/direct_kernels.hpp"
#include "kernels/device/direct_primitives.cuh"
#include "kernels/teaching/pmpp_chapter7_kernels.cuh"

namespace tapstream::cuda {

namespace {

// The carry (see launch_carry_history) for history samples [begin, end) of channel c.
__device__ __forceinline__ void carry_range(const DirectArgs& a, int c, int begin, int end,
                                            int thread, int threads) {
  const float* in_c = a.in.data + c * a.in.channel_stride;
  const float* old_c = a.history + c * a.history_stride + a.history_end;
  float* new_c = a.carry_to + c * a.history_stride + a.history_end;
  for (int i = begin + thread; i < end; i += threads) {
    const long long p = (long long)i - a.history_len;  // -history_len .. -1
    const long long j = a.frames + p;
    new_c[p] = j >= 0 ? in_c[j * a.in.frame_stride] : old_c[j];
  }
}

// The register window of the tuned kernels: eight floats from shared memory
// (two float4 loads; `p` 16-byte aligned).
__device__ __forceinline__ void load_eight(const float* p, float v[8]) {
  const float4* src = reinterpret_cast<const float4*>(p);
  const float4 a = src[0], b = src[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// Eight taps h into eight outputs: with lo = w[base + K - kk - 8, +8) and
// hi = w[base + K - kk, +8), output base + r with tap kk + u needs
// w[base + K - kk + r - u]; then the window slides down by eight (hi = lo).
__device__ __forceinline__ void accumulate_eight(const float h[8], const float lo[8], float hi[8],
                                                 float acc[kOutputsPerThread]) {
#pragma unroll
  for (int u = 0; u < 8; ++u) {
#pragma unroll
    for (int r = 0; r < kOutputsPerThread; ++r) {
      const int idx = 8 + r - u;
      acc[r] = fmaf(h[u], idx >= 8 ? hi[idx - 8] : lo[idx], acc[r]);
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) hi[i] = lo[i];
}

// A thread's eight outputs from frame f0 of channel c: two float4 stores when
// the output is planar, aligned, whole and not blended.
__device__ __forceinline__ void store_eight(const DirectArgs& a, int c, long long f0,
                                            const float y[kOutputsPerThread]) {
  float* dst = a.out + c * a.out_channel_stride + f0 * a.out_frame_stride;
  if (!a.blend && a.out_frame_stride == 1 && f0 + kOutputsPerThread <= a.frames &&
      (reinterpret_cast<std::uintptr_t>(dst) & 15) == 0) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(y[0], y[1], y[2], y[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(y[4], y[5], y[6], y[7]);
  } else {
#pragma unroll
    for (int r = 0; r < kOutputsPerThread; ++r)
      if (f0 + r < a.frames) store_y(a, c, f0 + r, y[r]);
  }
}

// tuned: the block's kThreads threads form G = kThreads / P groups of P threads.
// All groups work on the same T = P * 8 consecutive outputs of one channel, each
// on its own chunks of K taps (tap split, so that short blocks still spread over
// many threads); the partial sums are added in shared memory at the end. Within a
// group each thread keeps 8 consecutive outputs in registers and slides a register
// window over the shared-memory samples, two float4 loads per 8 taps (64 FMAs).
// Taps come from the constant bank (large blocks: every tap serves many blocks
// and stays in the constant cache) or are staged per chunk in shared memory with
// float4 loads (short blocks, where constant-cache misses in series would
// dominate, and taps that live in global memory). The carry to the next block's
// history can be fused in (a.carry_to), saving a launch per block.
// tuned_tile computes frame tile `tile` (T = P * 8 outputs) of channel c with
// `shared` as its scratch; tuned_kernel runs one tile per block (and the carry),
// persistent_tuned_kernel runs the same tiles call after call.
template <bool kConstant>
__device__ __forceinline__ void tuned_tile(const DirectArgs& a, int P, int K, long long tile, int c,
                                           float* shared) {
  const int G = kThreads / P;
  const int T = P * kOutputsPerThread;
  const int W = T + K;  // window: w[i] = x(n0 - k0 - K + i)
  const int g = threadIdx.x / P;
  const int t = threadIdx.x % P;
  const long long n0 = tile * T;
  float* w = shared + g * (W + (kConstant ? 0 : K));
  float* staged_taps = w + W;
  const ChannelPointers p = channel_pointers(a, c);
  const bool vector_in =
      a.in.frame_stride == 1 && (reinterpret_cast<std::uintptr_t>(p.in) & 15) == 0;
  const bool vector_history =
      p.history != nullptr && (reinterpret_cast<std::uintptr_t>(p.history) & 15) == 0;
  const int chunks = (a.taps_padded + K - 1) / K;

  float total[kOutputsPerThread];
#pragma unroll
  for (int r = 0; r < kOutputsPerThread; ++r) total[r] = 0.0f;

  for (int round = 0; round < chunks; round += G) {
    const int chunk = round + g;
    const bool active = chunk < chunks;
    const int k0 = chunk * K;
    const int kc = active ? min(K, a.taps_padded - k0) : 0;
    if (round > 0) __syncthreads();  // everyone is done reading the previous windows
    if (active) {
      const long long j0 = n0 - k0 - K;  // a multiple of 4: quads never straddle j = 0
      // Loads first, stores after, four quads at a time: several loads in flight
      // per thread (the input may be mapped host memory, far away).
      for (int q0 = t; q0 < W / 4; q0 += 4 * P) {
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int q = q0 + u * P;
          const long long j = j0 + 4 * q;
          if (q >= W / 4) {
            v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          } else if (vector_in && j >= 0 && j + 4 <= a.frames) {
            v[u] = *reinterpret_cast<const float4*>(p.in + j);
          } else if (vector_history && j + 4 <= 0 && j >= -a.history_len) {
            v[u] = *reinterpret_cast<const float4*>(p.history + j);
          } else {
            v[u].x = load_x(a, p.in, p.history, j);
            v[u].y = load_x(a, p.in, p.history, j + 1);
            v[u].z = load_x(a, p.in, p.history, j + 2);
            v[u].w = load_x(a, p.in, p.history, j + 3);
          }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
          if (q0 + u * P < W / 4) reinterpret_cast<float4*>(w)[q0 + u * P] = v[u];
      }
      if constexpr (!kConstant) {
        const float4* src = reinterpret_cast<const float4*>(a.global_taps + p.taps + k0);
        for (int q = t; q < kc / 4; q += P)
          reinterpret_cast<float4*>(staged_taps)[q] = __ldg(src + q);
      }
    }
    __syncthreads();
    if (active) {
      const int base = t * kOutputsPerThread;
      float acc[kOutputsPerThread];
      float lo[8], hi[8];
#pragma unroll
      for (int r = 0; r < kOutputsPerThread; ++r) acc[r] = 0.0f;
      load_eight(w + base + K, hi);
      const long long tap_base = p.taps + k0;
      for (int kk = 0; kk < kc; kk += 8) {
        load_eight(w + base + K - kk - 8, lo);
        float h[8];
        if constexpr (kConstant) {
#pragma unroll
          for (int u = 0; u < 8; ++u) h[u] = c_taps[a.constant_bank][tap_base + kk + u];
        } else {
          load_eight(staged_taps + kk, h);
        }
        accumulate_eight(h, lo, hi, acc);
      }
#pragma unroll
      for (int r = 0; r < kOutputsPerThread; ++r) total[r] += acc[r];
    }
  }

  if (G == 1) {  // one group: each thread stores its own 8 outputs
    store_eight(a, c, n0 + t * kOutputsPerThread, total);
    return;
  }

  // Add the groups' partial sums (in a fixed order: deterministic) and store.
  __syncthreads();
  float* partial = shared;  // G * T floats, fits in the G * W of the windows
  {
    float4* dst = reinterpret_cast<float4*>(partial + g * T + t * kOutputsPerThread);
    dst[0] = make_float4(total[0], total[1], total[2], total[3]);
    dst[1] = make_float4(total[4], total[5], total[6], total[7]);
  }
  __syncthreads();
  for (int o = threadIdx.x; o < T; o += kThreads) {
    const long long f = n0 + o;
    if (f >= a.frames) break;
    float y = 0.0f;
    for (int gg = 0; gg < G; ++gg) y += partial[gg * T + o];
    store_y(a, c, f, y);
  }
}

template <bool kConstant>
__global__ void __launch_bounds__(kThreads) tuned_kernel(DirectArgs a, int P, int K) {
  extern __shared__ float4 shared_storage[];
  // The carry first: it reads only the input and the old history.
  if (a.carry_to != nullptr) {
    const int span = (a.history_len + int(gridDim.x) - 1) / int(gridDim.x);
    const int begin = min(a.history_len, int(blockIdx.x) * span);
    carry_range(a, int(blockIdx.y), begin, min(a.history_len, begin + span), threadIdx.x, kThreads);
  }
  tuned_tile<kConstant>(a, P, K, blockIdx.x, int(blockIdx.y),
                        reinterpret_cast<float*>(shared_storage));
}

// ------------------------------------------------- short filters, long blocks
// For a short filter over a long block (offline: 8 channels x 2^22 frames at
// 32 taps) the tuned kernel is a memory copy with a little arithmetic, and a
// block that computes one tile keeps the SM's loads and stores in separate
// phases, well short of the copy bandwidth (docs/history.md, "Streaming tile
// kernel for short filters"). Here each block walks tiles
// (grid-stride, as many blocks as fit on the device) and copies the next
// tile's window to shared memory with cp.async while it computes the current
// one, so loads stay in flight all the time. Same tile, register window and
// tap order as tuned_tile with one group (P = kThreads): the same sums.
constexpr int kStreamMaxTaps = 64;
constexpr int kStreamTile = kThreads * kOutputsPerThread;

__device__ __forceinline__ void copy_quad_async(float* shared_dst, const float* src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void commit_copies() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits for all but the newest group of copies.
__device__ __forceinline__ void wait_for_older_copies() {
  asm volatile("cp.async.wait_group 1;" ::: "memory");
}

// Starts copying the window of tile `index` (channel-major) into `w`:
// w[i] = x(n0 - taps_padded + i); quads that straddle the block's edges are
// loaded directly.
__device__ __forceinline__ void load_stream_window(const DirectArgs& a, long long index,
                                                   long long tiles_per_channel, float* w) {
  const int c = int(index / tiles_per_channel);
  const long long j0 = (index % tiles_per_channel) * kStreamTile - a.taps_padded;
  const ChannelPointers p = channel_pointers(a, c);
  const int quads = (kStreamTile + a.taps_padded) / 4;
  for (int q = threadIdx.x; q < quads; q += kThreads) {
    const long long j = j0 + 4 * q;
    float* dst = w + 4 * q;
    if (j >= 0 && j + 4 <= a.frames) {
      copy_quad_async(dst, p.in + j);
    } else if (j + 4 <= 0 && j >= -a.history_len) {
      copy_quad_async(dst, p.history + j);
    } else {
      for (int u = 0; u < 4; ++u) dst[u] = load_x(a, p.in, p.history, j + u);
    }
  }
  commit_copies();
}

template <bool kConstant>
__global__ void __launch_bounds__(kThreads)
    stream_tuned_kernel(DirectArgs a, long long tiles_per_channel) {
  __shared__ __align__(16) float windows[2][kStreamTile + kStreamMaxTaps];
  const long long tiles = tiles_per_channel * a.channels;
  if (a.carry_to != nullptr) {
    const long long carried = (long long)a.history_len * a.channels;
    for (long long i = blockIdx.x * (long long)kThreads + threadIdx.x; i < carried;
         i += (long long)gridDim.x * kThreads) {
      const int c = int(i / a.history_len), k = int(i % a.history_len);
      carry_range(a, c, k, k + 1, 0, 1);
    }
  }
  const int K = a.taps_padded;
  int b = 0;
  if (blockIdx.x < tiles) load_stream_window(a, blockIdx.x, tiles_per_channel, windows[0]);
  for (long long index = blockIdx.x; index < tiles; index += gridDim.x, b ^= 1) {
    const long long next = index + gridDim.x;
    if (next < tiles)
      load_stream_window(a, next, tiles_per_channel, windows[b ^ 1]);
    else
      commit_copies();  // an empty group: the wait below still means "this tile's"
    wait_for_older_copies();
    __syncthreads();

    const int c = int(index / tiles_per_channel);
    const long long n0 = (index % tiles_per_channel) * kStreamTile;
    const long long tap_base = c * a.taps_channel_stride;
    const float* w = windows[b];
    const int base = threadIdx.x * kOutputsPerThread;
    float acc[kOutputsPerThread], lo[8], hi[8];
#pragma unroll
    for (int r = 0; r < kOutputsPerThread; ++r) acc[r] = 0.0f;
    load_eight(w + base + K, hi);
    for (int kk = 0; kk < K; kk += 8) {
      load_eight(w + base + K - kk - 8, lo);
      float h[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) h[u] = load_tap<kConstant>(a, tap_base + kk + u);
      accumulate_eight(h, lo, hi, acc);
    }
    store_eight(a, c, n0 + base, acc);
    __syncthreads();  // everyone is done with windows[b] before it is refilled
  }
}

// ------------------------------------------------------------ persistent kernel
// Memory-model helpers for the host <-> kernel handshake (PTX ISA, "Memory
// Consistency Model"). The waits poll with relaxed loads, so that the doorbell
// and the stop word are in flight together (an acquire load would hold the
// next load back by a whole round trip over the bus), and acquire with a fence
// once the word has changed: at system scope after the doorbell, so that the
// input the host wrote before it is seen; at GPU scope after the carry
// counter, so that the history other blocks wrote before counting is seen.
__device__ __forceinline__ unsigned long long load_relaxed_system(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned load_relaxed_system(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned load_relaxed_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_system(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ long long global_time_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return (long long)t;
}

__device__ __forceinline__ unsigned long long load_relaxed_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_relaxed_gpu(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// The doorbell word that tells the blocks to return (no call has it: frames < 2^30 - 1).
constexpr unsigned long long kStopWord = ~0ull;

// Thread 0's wait for the next call: returns its doorbell word, or 0 when the
// host asked the kernel to stop or no call came within the idle timeout.
// First it waits until every block has carried the previous call (`carries`
// in all): before the doorbell, while the host turns around, not after it.
// Only block (0, 0) polls the host's words over the bus and relays them in
// device memory (counters[2..3]); the other blocks poll that copy in L2: with
// every block polling the bus, its reads queued behind the polls, and a call
// took several times as long as a launch (docs/history.md, "Small calls: the
// persistent kernel"). One fence after the word acquires all of it: the
// host's input (system scope) and the other blocks' carries.
__device__ unsigned long long wait_for_call(const PersistentArgs& p, unsigned served,
                                            unsigned carries, bool relays) {
  unsigned long long* relay = reinterpret_cast<unsigned long long*>(p.counters + 2);
  long long start = global_time_ns();
  while (load_relaxed_gpu(&p.counters[1]) < carries)
    if (global_time_ns() - start > p.idle_timeout_ns) return 0;
  unsigned long long word = 0;
  if (relays) {
    for (;;) {
      const unsigned stop = load_relaxed_system(&p.control->stop);
      const unsigned long long w = load_relaxed_system(&p.control->doorbell);
      if (stop != 0 || global_time_ns() - start > p.idle_timeout_ns) {
        word = kStopWord;
        break;
      }
      if (w != 0 && unsigned(w) != served) {
        word = w;
        break;
      }
    }
    asm volatile("fence.acq_rel.sys;" ::: "memory");
    store_relaxed_gpu(relay, word);
  } else {
    for (;;) {
      const unsigned long long w = load_relaxed_gpu(relay);
      if (w == kStopWord || global_time_ns() - start > p.idle_timeout_ns) return 0;
      if (w != 0 && unsigned(w) != served) {
        word = w;
        break;
      }
    }
    asm volatile("fence.acq_rel.sys;" ::: "memory");
  }
  return word == kStopWord ? 0 : word;
}

// Launched once, serves calls until stopped or idle (see direct_kernels.hpp).
// Block (tile, c) stages channel c's whole input of the call in shared memory
// (one pass over the bus instead of one per tap chunk), computes its tile like
// tuned_kernel, stores it to the mapped output; the last block to finish
// tells the host. The carry to the next call's history comes after that
// signal, off the call's critical path; the next call waits for it on the
// device (counters[1]). Every call's history parity comes with its doorbell, so
// serving a call twice (after a relaunch) rewrites the same values.
__global__ void __launch_bounds__(kThreads)
    persistent_tuned_kernel(PersistentArgs p, int P, int K) {
  extern __shared__ float4 shared_storage[];
  __shared__ unsigned long long call_word;
  float* input = reinterpret_cast<float*>(shared_storage);
  float* scratch = input + (p.direct.frames + 3) / 4 * 4;
  const int tile = int(blockIdx.x), c = int(blockIdx.y);
  const unsigned blocks = gridDim.x * gridDim.y;
  const int C = p.direct.channels;
  unsigned served = p.served, calls = 0;
  for (;;) {
    if (threadIdx.x == 0) call_word = wait_for_call(p, served, calls * blocks, tile == 0 && c == 0);
    __syncthreads();
    const unsigned long long word = call_word;
    if (word == 0) return;
    const unsigned seq = unsigned(word);
    const int frames = int((word >> 32) & 0x3fffffffu);
    const bool planar = ((word >> 62) & 1u) != 0;
    const int h = int(word >> 63);

    const long long in_channel_stride = planar ? frames : 1, in_frame_stride = planar ? 1 : C;
    const bool traced = p.trace && tile == 0 && c == 0 && threadIdx.x == 0;
    if (traced) p.control->trace[0] = (unsigned long long)global_time_ns();
    const float* in_c = p.direct.in.data + c * in_channel_stride;
    for (int f = threadIdx.x; f < frames; f += kThreads) {
      const float* x = in_c + f * in_frame_stride;
      if (p.input_loads == 0) {
        input[f] = __ldcv(x);
      } else if (p.input_loads == 1) {
        float v;
        asm volatile("ld.relaxed.sys.global.f32 %0, [%1];" : "=f"(v) : "l"(x) : "memory");
        input[f] = v;
      } else {
        input[f] = *x;
      }
    }
    __syncthreads();
    if (traced) p.control->trace[1] = (unsigned long long)global_time_ns();

    DirectArgs a = p.direct;
    a.in = {input, 0, 1};
    a.history = p.history[h];
    a.frames = frames;
    a.out_channel_stride = in_channel_stride;
    a.out_frame_stride = in_frame_stride;
    a.carry_to = nullptr;
    if ((long long)tile * P * kOutputsPerThread < frames)
      tuned_tile<false>(a, P, K, tile, c, scratch);

    // One fence for the block, by thread 0 after the barrier (fences are
    // cumulative: it orders the stores the barrier made visible to thread 0),
    // not a system fence per thread (thousands of them, in series on the
    // call's path).
    __syncthreads();
    if (traced) p.control->trace[2] = (unsigned long long)global_time_ns();
    if (threadIdx.x == 0) {
      asm volatile("fence.acq_rel.sys;" ::: "memory");  // this block's outputs, then its count
      const bool last = atomicInc(&p.counters[0], blocks - 1) == blocks - 1;
      if (traced) p.control->trace[3] = (unsigned long long)global_time_ns();
      if (last) {
        asm volatile("fence.acq_rel.sys;" ::: "memory");  // every block's, then the host hears
        if (p.trace) p.control->trace[4] = (unsigned long long)global_time_ns();
        store_release_system(&p.control->done, seq);
      }
    }

    if (a.history_len > 0) {
      const int span = (a.history_len + int(gridDim.x) - 1) / int(gridDim.x);
      const int begin = min(a.history_len, tile * span), end = min(a.history_len, begin + span);
      const float* old_c = p.history[h] + c * a.history_stride + a.history_end;
      float* new_c = p.history[1 - h] + c * a.history_stride + a.history_end;
      for (int i = begin + int(threadIdx.x); i < end; i += kThreads) {
        const int q = i - a.history_len;  // -history_len .. -1
        const int j = frames + q;
        new_c[q] = j >= 0 ? input[j] : old_c[j];
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("fence.acq_rel.gpu;" ::: "memory");  // the carry, then its count
      atomicAdd(&p.counters[1], 1u);
    }
    served = seq;
    ++calls;
  }
}

// History carry-over: new_history(c, p) = x(frames + p) for -history_len <= p < 0.
__global__ void carry_history_kernel(SampleView in, const float* old_history, float* new_history,
                                     long long history_stride, int history_end, int history_len,
                                     int frames) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int c = blockIdx.y;
  if (i >= history_len) return;
  const long long p = (long long)i - history_len;  // -history_len .. -1
  const long long j = frames + p;
  const float x = j >= 0 ? in.data[c * in.channel_stride + j * in.frame_stride]
                         : old_history[c * history_stride + history_end + j];
  new_history[c * history_stride + history_end + p] = x;
}

__global__ void copy_samples_kernel(SampleView src, float* dst, long long dst_channel_stride,
                                    long long dst_frame_stride, int frames) {
  const long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const int c = blockIdx.y;
  if (f >= frames) return;
  dst[c * dst_channel_stride + f * dst_frame_stride] =
      src.data[c * src.channel_stride + f * src.frame_stride];
}

// Shared memory of the tuned kernel: G windows of T + K floats, plus G tap
// chunks of K floats when the taps are staged.
std::size_t tuned_shared_bytes(int P, int K, bool constant_taps) {
  const int G = kThreads / P;
  return std::size_t(G) * (P * kOutputsPerThread + K + (constant_taps ? 0 : K)) * sizeof(float);
}

// Picks P (threads per group) and K (taps per chunk) for the tuned kernel: the
// widest groups that still give every multiprocessor two blocks; for short
// blocks, narrower groups and chunks of about taps / G so that every group has
// taps to work on (the tap split keeps more threads busy).
void tuned_shape(const DirectArgs& a, int* P_out, int* K_out) {
  const long long target = 2LL * a.multiprocessors;
  int best_P = kThreads, best_K = std::min(256, a.taps_padded);
  long long best_work = -1;
  for (int P = kThreads; P >= 8; P /= 2) {
    const int G = kThreads / P;
    const int K_max = std::min(256, 5120 / G / 8 * 8);  // keeps shared memory under 48 KiB
    int K = (a.taps_padded + G - 1) / G;
    K = std::clamp((K + 7) / 8 * 8, 8, K_max);
    const long long chunks = (a.taps_padded + K - 1) / K;
    const long long T = (long long)P * kOutputsPerThread;
    const long long blocks = (long long)a.channels * ((a.frames + T - 1) / T);
    if (blocks >= target) {
      best_P = P;
      best_K = P == kThreads ? std::min(256, a.taps_padded) : K;
      break;
    }
    const long long work = blocks * std::min<long long>(G, chunks);
    if (work > best_work) best_work = work, best_P = P, best_K = K;
  }
  *P_out = best_P;
  *K_out = best_K;
}

// Whether stream_tuned_kernel takes the block: a short filter, planar input
// whose quads are aligned (cp.async copies 16 aligned bytes), and enough tiles
// to fill the device several times over (below that the tuned kernel's one
// tile per block is as fast). DirectArgs::stream_tiles = false turns it off
// (for measurements).
bool stream_kernel_applies(const DirectArgs& a) {
  const long long tiles = (long long)a.channels * ((a.frames + kStreamTile - 1) / kStreamTile);
  return a.stream_tiles && a.taps_padded <= kStreamMaxTaps && a.in.frame_stride == 1 &&
         (a.channels == 1 || a.in.channel_stride % 4 == 0) &&
         (reinterpret_cast<std::uintptr_t>(a.in.data) & 15) == 0 &&
         tiles >= 8LL * a.multiprocessors;
}

template <bool kConstant>
void launch_stream_tuned(const DirectArgs& a, cudaStream_t stream) {
  static const int blocks_per_multiprocessor = [] {
    int n = 0;
    TAPSTREAM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, stream_tuned_kernel<kConstant>, kThreads, 0));
    return std::max(1, n);
  }();
  const long long tiles_per_channel = (a.frames + kStreamTile - 1) / kStreamTile;
  const long long grid = std::min<long long>(
      tiles_per_channel * a.channels, (long long)blocks_per_multiprocessor * a.multiprocessors);
  stream_tuned_kernel<kConstant><<<unsigned(grid), kThreads, 0, stream>>>(a, tiles_per_channel);
  TAPSTREAM_CUDA_CHECK_LAUNCH("stream_tuned_kernel");
}

void launch_tuned(const DirectArgs& a, cudaStream_t stream) {
  if (stream_kernel_applies(a)) {
    if (a.constant_bank >= 0)
      launch_stream_tuned<true>(a, stream);
    else
      launch_stream_tuned<false>(a, stream);
    return;
  }
  int P = 0, K = 0;
  tuned_shape(a, &P, &K);
  const int T = P * kOutputsPerThread;
  const dim3 grid(blocks_for(a.frames, T), a.channels);
  // Constant taps only where every tap serves many blocks (one group per
  // block); otherwise staged through shared memory.
  if (a.constant_bank >= 0 && P == kThreads) {
    tuned_kernel<true><<<grid, kThreads, tuned_shared_bytes(P, K, true), stream>>>(a, P, K);
  } else {
    tuned_kernel<false><<<grid, kThreads, tuned_shared_bytes(P, K, false), stream>>>(a, P, K);
  }
  TAPSTREAM_CUDA_CHECK_LAUNCH("tuned_kernel");
}

// The tuned kernel's shape for the persistent kernel: no constant taps, the
// call's input staged ahead of the scratch.
std::size_t persistent_shared_bytes(const DirectArgs& a, int P, int K) {
  return std::size_t((a.frames + 3) / 4 * 4) * sizeof(float) + tuned_shared_bytes(P, K, false);
}

}  // namespace

PersistentShape persistent_tuned_shape(const DirectArgs& args, int max_blocks) {
  PersistentShape s;
  tuned_shape(args, &s.P, &s.K);
  const long long T = (long long)s.P * kOutputsPerThread;
  s.tiles = int((args.frames + T - 1) / T);
  s.shared_bytes = persistent_shared_bytes(args, s.P, s.K);
  const long long blocks = (long long)s.tiles * args.channels;
  s.blocks = blocks <= max_blocks && s.shared_bytes <= 47 * 1024 ? int(blocks) : 0;
  return s;
}

void launch_persistent_tuned(const PersistentArgs& args, const PersistentShape& shape,
                             cudaStream_t stream) {
  persistent_tuned_kernel<<<dim3(unsigned(shape.tiles), unsigned(args.direct.channels)), kThreads,
                            shape.shared_bytes, stream>>>(args, shape.P, shape.K);
  TAPSTREAM_CUDA_CHECK_LAUNCH("persistent_tuned_kernel");
}

DirectKernel parse_direct_kernel(const std::string& name) {
  if (name == "auto" || name == "tuned") return DirectKernel::tuned;
  if (name == "naive") return DirectKernel::naive;
  if (name == "constant") return DirectKernel::constant;
  if (name == "shared_tile") return DirectKernel::shared_tile;
  if (name == "cached_tile") return DirectKernel::cached_tile;
  throw std::invalid_argument(
      "unknown CUDA kernel variant '" + name +
      "' (expected auto, naive, constant, shared_tile, cached_tile or tuned)");
}

const char* direct_kernel_name(DirectKernel kernel) {
  switch (kernel) {
    case DirectKernel::naive:
      return "naive";
    case DirectKernel::constant:
      return "constant";
    case DirectKernel::shared_tile:
      return "shared_tile";
    case DirectKernel::cached_tile:
      return "cached_tile";
    case DirectKernel::tuned:
      return "tuned";
  }
  return "?";
}

std::vector<std::string> direct_kernel_names() {
  return {"auto", "naive", "constant", "shared_tile", "cached_tile", "tuned"};
}

void launch_direct(DirectKernel kernel, const DirectArgs& args, cudaStream_t stream) {
  if (args.frames <= 0 || args.channels <= 0) return;
  DirectArgs a = args;
  if (a.history_len <= 0) a.carry_to = nullptr;
  if (kernel == DirectKernel::tuned) {
    launch_tuned(a, stream);  // carry fused
    return;
  }
  // naive always reads its taps from global memory; the others use the
  // constant bank when the taps are there.
  if (kernel != DirectKernel::naive && a.constant_bank >= 0)
    launch_with_taps<true>(kernel, a, stream);
  else
    launch_with_taps<false>(kernel, a, stream);
  if (a.carry_to)
    launch_carry_history(a.in, a.history, a.carry_to, a.history_stride, a.history_end,
                         a.history_len, a.channels, a.frames, stream);
}

void launch_carry_history(const SampleView& in, const float* old_history, float* new_history,
                          long long history_stride, int history_end, int history_len, int channels,
                          int frames, cudaStream_t stream) {
  if (history_len <= 0 || channels <= 0) return;
  carry_history_kernel<<<dim3(blocks_for(history_len, kThreads), channels), kThreads, 0, stream>>>(
      in, old_history, new_history, history_stride, history_end, history_len, frames);
  TAPSTREAM_CUDA_CHECK_LAUNCH("carry_history_kernel");
}

void launch_copy_samples(const SampleView& src, float* dst, long long dst_channel_stride,
                         long long dst_frame_stride, int channels, int frames,
                         cudaStream_t stream) {
  if (frames <= 0 || channels <= 0) return;
  copy_samples_kernel<<<dim3(blocks_for(frames, kThreads), channels), kThreads, 0, stream>>>(
      src, dst, dst_channel_stride, dst_frame_stride, frames);
  TAPSTREAM_CUDA_CHECK_LAUNCH("copy_samples_kernel");
}

void upload_constant_bank(int bank, const float* host_taps, std::size_t count,
                          cudaStream_t stream) {
  if (bank < 0 || bank > 1 || count > kConstantBankFloats)
    throw std::invalid_argument("upload_constant_bank: bank " + std::to_string(bank) + ", " +
                                std::to_string(count) + " floats do not fit");
  TAPSTREAM_CUDA_CHECK(cudaMemcpyToSymbolAsync(c_taps, host_taps, count * sizeof(float),
                                               bank * kConstantBankFloats * sizeof(float),
                                               cudaMemcpyHostToDevice, stream));
}

}  // namespace tapstream::cuda
