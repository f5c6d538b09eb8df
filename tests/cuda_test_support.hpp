#pragma once
// Test support for the CUDA suites: a fixture for tests that need a GPU.

#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda_engine.hpp"

namespace tapstream::testing {

// Skips each test, with the reason, where there is no usable CUDA device (as on CI).
class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (!cuda_device_available(&reason)) GTEST_SKIP() << "no usable CUDA device: " << reason;
  }
};

}  // namespace tapstream::testing
