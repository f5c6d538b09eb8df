// StagedFileWriter: a file written front to back in whole aligned chunks
// (direct I/O where the file system takes it) holds exactly the bytes
// appended, whatever their sizes, with the header rewritten at the end.

#include "dsp/files/staged_file_writer.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
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

// Which pages of `file` are in the page cache (mincore over a mapping).
std::vector<bool> cached_pages(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  const auto size = static_cast<std::size_t>(fs::file_size(file));
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  EXPECT_NE(mapping, MAP_FAILED);
  std::vector<unsigned char> resident((size + page - 1) / page);
  EXPECT_EQ(::mincore(mapping, size, resident.data()), 0);
  ::munmap(mapping, size);
  return {resident.begin(), resident.end()};
}

TEST_F(StagedFileWriterTest, TheLastChunksWholeSectorsGoDirectOnlyItsEndThroughTheCache) {
  // A chunk, then three sectors and a bit: only the header's page and the
  // last, partial sector's may be in the page cache afterwards (the fsync
  // before a rename then has almost nothing to write).
  const std::size_t sector = StagedFileWriter::kAlignment;
  const std::size_t total = StagedFileWriter::kChunkBytes + 3 * sector + 100;
  const fs::path file = directory_ / "out.bin";
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  std::vector<std::uint8_t> expected(total);
  std::mt19937_64 rng(kSeed);
  for (auto& b : expected) b = static_cast<std::uint8_t>(rng());
  bool direct = false;
  {
    StagedFileWriter writer(fd, true);
    writer.append(expected);
    direct = writer.direct();
    writer.finish(std::span<const std::uint8_t>(expected).first(44));
  }
  ::close(fd);
  const std::vector<bool> cached = cached_pages(file);  // before reading it fills the cache
  EXPECT_EQ(content(file), expected);
  if (!direct) GTEST_SKIP() << "this file system refuses direct I/O";
  if (static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) != sector) GTEST_SKIP() << "page size";
  ASSERT_EQ(cached.size(), total / sector + 1);
  for (std::size_t p = 1; p + 1 < cached.size(); ++p) {
    EXPECT_FALSE(cached[p]) << "page " << p << " of " << cached.size() << " went through the cache";
  }
}

}  // namespace
}  // namespace tapstream
