#pragma once
// The largest finite magnitude among samples: what ClipStats::peak reports
// and --normalize scales by. NaNs and infinities do not count. For finite
// floats the bit pattern of |x| orders as the value does, so the scan is an
// integer maximum over the masked bits, which vectorises (a float comparison
// with its NaN rules stays scalar, and cost a file job a pass as slow as the
// filtering; docs/performance.md, the 2-core development VM). Built for
// AVX-512, AVX2 and the baseline; the loader picks the CPU's best.

#include <span>

namespace tapstream {

// max(peak, |x| for every finite x of `samples`); `peak` finite and >= 0.
float finite_peak(std::span<const float> samples, float peak) noexcept;

}  // namespace tapstream
