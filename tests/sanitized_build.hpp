#pragma once
// Whether this test build runs under AddressSanitizer or ThreadSanitizer:
// their runtimes slow the code they time, and replace some calls (mlockall
// becomes a no-op that succeeds), so a test of those says so and skips.

namespace tapstream::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

}  // namespace tapstream::testing
