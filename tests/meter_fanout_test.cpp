// Tests of MeterFanout: one meter read and one event per tick shared by the
// subscribers that are in step, and for every subscriber exactly the event a
// read of its own cursor would have given (peaks, RMS and clip counts since
// its previous read).

#include "daemon/control/meter_fanout.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

namespace tapstream {
namespace {

constexpr int rate = 48000;

void play(OutputStage& stage, std::size_t frames, float value) {
  std::vector<float> block(stage.channels() * frames, value);
  stage.process(block.data(), frames);
}

TEST(MeterFanout, SubscribersInStepShareOneEventEqualToTheirOwnRead) {
  OutputStage stage(2, rate);
  MeterFanout fanout(stage);
  MeterCursor first, second, reference;
  play(stage, 64, 0.5f);
  const std::string expected = meters_event_text(stage.read_levels(reference));
  fanout.read();
  const auto a = fanout.event_for(first);
  const auto b = fanout.event_for(second);
  EXPECT_EQ(a, b) << "one event for both";
  EXPECT_EQ(*a, expected);
  EXPECT_EQ(first, reference);
  EXPECT_EQ(second, reference);

  const auto event = nlohmann::json::parse(*a);
  EXPECT_EQ(event["event"], "meters");
  ASSERT_EQ(event["levels"].size(), 2u);
  EXPECT_FLOAT_EQ(event["levels"][1]["peak_since"].get<float>(), 0.5f);
}

TEST(MeterFanout, AClientThatReadInBetweenGetsItsOwnSinceValuesThenRejoins) {
  OutputStage stage(1, rate);
  MeterFanout fanout(stage);
  MeterCursor steady, asked;
  play(stage, 64, 0.2f);
  fanout.read();
  fanout.event_for(steady);
  fanout.event_for(asked);

  play(stage, 64, 0.9f);
  stage.read_levels(asked);  // get_meters between two pushes: it has seen the 0.9
  play(stage, 64, 0.3f);
  fanout.read();
  const auto to_steady = fanout.event_for(steady);
  const auto to_asked = fanout.event_for(asked);
  EXPECT_NE(to_steady, to_asked);
  EXPECT_FLOAT_EQ(nlohmann::json::parse(*to_steady)["levels"][0]["peak_since"].get<float>(), 0.9f);
  EXPECT_FLOAT_EQ(nlohmann::json::parse(*to_asked)["levels"][0]["peak_since"].get<float>(), 0.3f);

  play(stage, 64, 0.4f);
  fanout.read();
  EXPECT_EQ(fanout.event_for(steady), fanout.event_for(asked)) << "back in step";
}

TEST(MeterFanout, NothingIsLostWhileTheAudioGoesOnBetweenTheReadAndAnEvent) {
  OutputStage stage(1, rate);
  MeterFanout fanout(stage);
  MeterCursor client;
  play(stage, 64, 0.2f);
  fanout.read();
  play(stage, 64, 0.8f);  // after the shared read, before this client's event
  EXPECT_FLOAT_EQ(
      nlohmann::json::parse(*fanout.event_for(client))["levels"][0]["peak_since"].get<float>(),
      0.2f);
  play(stage, 64, 0.1f);
  fanout.read();
  const auto next = nlohmann::json::parse(*fanout.event_for(client));
  EXPECT_FLOAT_EQ(next["levels"][0]["peak_since"].get<float>(), 0.8f) << "in the next one";
  EXPECT_NEAR(next["levels"][0]["rms_since"].get<float>(), std::sqrt((0.64f + 0.01f) / 2), 1e-5f);
}

TEST(MeterFanout, EveryEventIsExactlyWhatTheClientsOwnReadWouldGive) {
  const unsigned seed = 1414;
  std::printf("seed %u\n", seed);
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> level(0.0f, 1.3f);  // some samples clip
  std::uniform_int_distribution<int> blocks(0, 3);
  std::bernoulli_distribution asks_meters(0.1), skips(0.1);

  OutputStage stage(2, rate);
  MeterFanout fanout(stage);
  std::vector<MeterCursor> clients(4);
  int events = 0, shared = 0;
  for (int tick = 0; tick < 300; ++tick) {
    for (int b = blocks(random); b > 0; --b) {
      std::vector<float> block(2 * 32);
      for (float& x : block) x = level(random) * (random() % 2 ? 1.0f : -1.0f);
      stage.process(block.data(), 32);
    }
    for (auto& client : clients) {
      if (asks_meters(random)) stage.read_levels(client);
    }
    std::vector<std::string> expected;
    std::vector<MeterCursor> expected_cursor = clients;
    for (auto& cursor : expected_cursor)
      expected.push_back(meters_event_text(stage.read_levels(cursor)));
    fanout.read();
    std::vector<const std::string*> sent;
    for (std::size_t c = 0; c < clients.size(); ++c) {
      if (skips(random)) continue;  // a slow reader: no event, its cursor stays
      const auto event = fanout.event_for(clients[c]);
      ASSERT_EQ(*event, expected[c]) << "tick " << tick << ", client " << c;
      ASSERT_EQ(clients[c], expected_cursor[c]) << "tick " << tick << ", client " << c;
      ++events;
      shared += std::find(sent.begin(), sent.end(), event.get()) != sent.end() ? 1 : 0;
      sent.push_back(event.get());
    }
  }
  std::printf("%d events, %d of them shared with an earlier client of their tick\n", events,
              shared);
  EXPECT_GT(shared, events / 2);
}

}  // namespace
}  // namespace tapstream
