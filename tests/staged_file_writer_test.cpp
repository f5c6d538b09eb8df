// StagedFileWriter: a file written front to back in whole aligned chunks
// (direct I/O where the file system takes it) holds exactly the bytes
// appended, whatever their sizes, with the header rewritten at the end.

#include "dsp/files/staged_file_writer.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace tapstream {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kSeed = 20261126;

std::vector<std::uint8_t> content(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class StagedFileWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // Beside the build (a disk, usually), not in a RAM-backed /tmp, so that
    // direct I/O is tried where it can be.
    directory_ = fs::current_path() / ("tapstream-staged-" + std::string(info->name()) + "-" +
                                       std::to_string(std::random_device{}()));
    fs::create_directories(directory_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }
  fs::path directory_;
};

TEST_F(StagedFileWriterTest, AFileOfManyChunksHoldsExactlyWhatWasAppended) {
  std::cout << "seed " << kSeed << "\n";
  std::mt19937_64 rng(kSeed);
  for (const std::size_t total : {std::size_t{0}, std::size_t{80}, StagedFileWriter::kChunkBytes,
                                  3 * StagedFileWriter::kChunkBytes + 12345}) {
    const fs::path file = directory_ / "out.bin";
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    std::vector<std::uint8_t> expected(total);
    for (auto& b : expected) b = static_cast<std::uint8_t>(rng());
    bool direct = false;
    {
      StagedFileWriter writer(fd, true);
      // Appends of uneven sizes, some larger than a chunk.
      std::size_t done = 0;
      while (done < total) {
        const std::size_t n =
            std::min<std::size_t>(total - done, rng() % (StagedFileWriter::kChunkBytes * 2) + 1);
        writer.append(std::span<const std::uint8_t>(expected).subspan(done, n));
        done += n;
      }
      EXPECT_EQ(writer.size(), total);
      direct = writer.direct();
      const std::vector<std::uint8_t> header(std::min<std::size_t>(total, 44), 0xab);
      writer.finish(header);
      std::fill(expected.begin(), expected.begin() + static_cast<long>(header.size()), 0xab);
    }
    // The descriptor is given back as it came: no O_DIRECT left on it.
    EXPECT_EQ(::fcntl(fd, F_GETFL) & O_DIRECT, 0);
    ::close(fd);
    std::cout << total << " bytes, direct I/O " << (direct ? "on" : "refused here") << "\n";
    EXPECT_EQ(content(file), expected) << total << " bytes";
  }
}

}  // namespace
}  // namespace tapstream
