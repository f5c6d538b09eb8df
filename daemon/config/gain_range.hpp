#pragma once
// The one range of every filter gain a user gives: `process --gain` and the
// configuration's [filter] gain_db. -120 dB is silence at any bit depth; 40 dB
// is more than any correction filter needs, and beyond it a typo (400 for 4.00)
// would only clip.

namespace tapstream {

inline constexpr double min_gain_db = -120.0;
inline constexpr double max_gain_db = 40.0;

}  // namespace tapstream
