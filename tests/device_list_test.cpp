// `--devices` and `[engine] devices`: the syntax (all, or distinct GPU
// numbers) refused with its culprit where it is read, and the numbers
// checked against the GPUs there are when the engines are made.

#include "daemon/device_list.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace tapstream {
namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_device_list(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string resolve_error(const DeviceList& list, int count) {
  try {
    resolve_device_list(list, count);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(DeviceList, AllAndListsOfDistinctNumbersAreTakenInTheOrderGiven) {
  EXPECT_TRUE(parse_device_list("all").all);
  EXPECT_TRUE(parse_device_list(" all ").all);
  EXPECT_EQ(parse_device_list("0,1").listed, (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_device_list(" 1 , 0").listed, (std::vector<int>{1, 0}));
  EXPECT_EQ(parse_device_list("3").listed, (std::vector<int>{3}));
  EXPECT_EQ(parse_device_list("1,0").text(), "1,0");
  EXPECT_EQ(parse_device_list("all").text(), "all");
  EXPECT_EQ(device_list_of({2, 0}).listed, (std::vector<int>{2, 0}));
}

TEST(DeviceList, JunkIsRefusedNamingTheCulprit) {
  EXPECT_NE(parse_error("0,0").find("GPU 0 is named twice"), std::string::npos)
      << parse_error("0,0");
  EXPECT_NE(parse_error("1,x").find("'x' is not a GPU number"), std::string::npos);
  EXPECT_NE(parse_error("-1").find("'-1' is not a GPU number"), std::string::npos);
  EXPECT_NE(parse_error("1.5").find("'1.5' is not a GPU number"), std::string::npos);
  EXPECT_NE(parse_error("0,").find("empty item"), std::string::npos);
  EXPECT_NE(parse_error("").find("empty list"), std::string::npos);
  EXPECT_NE(parse_error("ALL").find("'ALL' is not a GPU number"), std::string::npos);
  EXPECT_NE(parse_error("99999999999999999999").find("is not a GPU number"), std::string::npos);
  EXPECT_THROW(device_list_of({}), std::invalid_argument);
  EXPECT_THROW(device_list_of({1, 1}), std::invalid_argument);
  EXPECT_THROW(device_list_of({-2}), std::invalid_argument);
}

TEST(DeviceList, NumbersAreCheckedAgainstTheGpusThereAre) {
  EXPECT_EQ(resolve_device_list(parse_device_list("all"), 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(resolve_device_list(DeviceList{}, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(resolve_device_list(parse_device_list("1,0"), 2), (std::vector<int>{1, 0}));
  EXPECT_EQ(resolve_error(parse_device_list("7"), 2), "GPU 7 does not exist: there are 2 (0..1)");
  EXPECT_EQ(resolve_error(parse_device_list("0,1"), 1), "GPU 1 does not exist: there is 1 (0)");
  EXPECT_EQ(resolve_error(parse_device_list("all"), 0), "there is no GPU");
}

}  // namespace
}  // namespace tapstream
