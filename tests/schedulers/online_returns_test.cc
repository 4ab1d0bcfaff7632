#include "online_returns.h"  // internal: schedulers/src

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace viper {
namespace schedulers {
namespace internal {
namespace {

// Measurements every 20 iterations; the producer clock (traffic = iteration).
constexpr double kGap = 20;

// A switch whose first measurement after it is at `at`: the last one before
// it was at `at - kGap`, so the switch fell in (at - 20, at], middle at - 10,
// half-width 10.
ReturnPredictor::SwitchSeen Switch(ReturnPredictor* p, int64_t at, int64_t served) {
  return p->AddSwitch(at, static_cast<double>(at - 20), static_cast<double>(at), served, kGap);
}

// Domains A B A B ...: switches at 1000 (A -> B), 2000 (B -> A) and `third`
// (A -> B). In the third regime (domain A again) the model 900, which served
// A's first regime, wins a re-publish: A came back two regimes later.
ReturnPredictor ThreeSwitches(int64_t third, bool enabled = true) {
  ReturnPredictor p(enabled);
  EXPECT_EQ(Switch(&p, 1000, 900), ReturnPredictor::SwitchSeen::kRecorded);
  EXPECT_EQ(Switch(&p, 2000, 1900), ReturnPredictor::SwitchSeen::kRecorded);
  p.NoteRepublish(900);
  EXPECT_EQ(Switch(&p, third, 900), ReturnPredictor::SwitchSeen::kRecorded);
  return p;
}
ReturnPredictor ThreeEvenSwitches() { return ThreeSwitches(3000); }

// Switches evenly spaced by 1000, the last one's middle at 2990: the next
// return is predicted at 3990, the next switch's middle, to domain A, whose
// model in the regime before (the third) was 900. Tolerance: max(5% of 1000,
// 2 x half-width 10 + one measurement gap 20) = 50.
TEST(ReturnPredictorTest, EvenlySpacedSwitchesPredictTheNextOnesMiddle) {
  const ReturnPredictor p = ThreeEvenSwitches();
  ASSERT_EQ(p.switches().size(), 3u);
  EXPECT_DOUBLE_EQ(p.switches().back().middle, 2990);
  EXPECT_DOUBLE_EQ(p.switches().back().halfwidth, 10);
  EXPECT_EQ(p.regime_models(), (std::vector<int64_t>{900, 1900, 900}));
  const auto r = p.PredictedReturn(kGap);
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->change, 3990);
  EXPECT_EQ(r->model, 900);
  EXPECT_DOUBLE_EQ(r->tolerance, 50);
  EXPECT_FALSE(r->confirmed);
}

// Two switches (1000, 2000) and a return (the first regime's model 900 won a
// re-publish in the third): the traffic recurs, and the one interval
// predicts the next switch at 2990, to the domain of the regime two before
// (its model 1900); without the return, nothing.
TEST(ReturnPredictorTest, TwoSwitchesAndAReturnPredictFromTheirInterval) {
  ReturnPredictor p(true);
  Switch(&p, 1000, 900);
  Switch(&p, 2000, 1900);
  EXPECT_FALSE(p.PredictedReturn(kGap).has_value()) << "no domain came back yet";
  p.NoteRepublish(900);
  const auto r = p.PredictedReturn(kGap);
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->change, 2990);
  EXPECT_EQ(r->model, 1900);
  EXPECT_DOUBLE_EQ(r->tolerance, 50);
}

// The switches' spacing is their middles' median spacing, whatever their
// evenness, and only from two on (disabled prediction still records them).
TEST(ReturnPredictorTest, SwitchSpacingIsTheMedianOfTheSwitchesSpacings) {
  ReturnPredictor p(false);
  EXPECT_FALSE(p.SwitchSpacing().has_value());
  Switch(&p, 1000, 900);
  EXPECT_FALSE(p.SwitchSpacing().has_value());
  Switch(&p, 1400, 1300);
  EXPECT_DOUBLE_EQ(*p.SwitchSpacing(), 400);
  Switch(&p, 2400, 2300);
  EXPECT_DOUBLE_EQ(*p.SwitchSpacing(), 700);  // (400 + 1000) / 2
  Switch(&p, 2900, 2800);
  EXPECT_DOUBLE_EQ(*p.SwitchSpacing(), 500);  // of 400, 1000, 500
}

// A re-publish of the regime just ended's model says nothing of the cycle
// (it wins where the traffic is part-way back, a blend), and does not hide
// the re-publish a measurement later, in the same regime, of the model two
// regimes back: that one sets the cycle. The first such of a regime counts.
TEST(ReturnPredictorTest, OnlyAModelTwoOrMoreRegimesBackSetsTheCycle) {
  ReturnPredictor p(true);
  Switch(&p, 1000, 900);
  Switch(&p, 2000, 1900);
  p.NoteRepublish(1900);
  EXPECT_EQ(p.cycle(), 0u) << "the regime just ended";
  EXPECT_FALSE(p.PredictedReturn(kGap).has_value());
  p.NoteRepublish(900);
  EXPECT_EQ(p.cycle(), 2u);
  EXPECT_TRUE(p.PredictedReturn(kGap).has_value());
  Switch(&p, 3000, 900);
  Switch(&p, 4000, 3900);
  p.NoteRepublish(950);  // regime 0, four back: the first of regime 4 that shows one
  EXPECT_EQ(p.cycle(), 4u);
  p.NoteRepublish(2900);
  EXPECT_EQ(p.cycle(), 4u) << "the first re-publish of a regime that shows a cycle counts";
}

// A model is of the regime it was trained in. The model measured at a
// switch's first measurement was trained before the switch; so was one made
// after the producer saw a switch while the traffic led it, up to the
// switch's middle. Its re-publish at the return shows the cycle.
TEST(ReturnPredictorTest, AModelTrainedBeforeASwitchIsOfTheRegimeBefore) {
  ReturnPredictor p(true);
  // Seen at 1000 (the last measurement before at 950): middle 975.
  p.AddSwitch(1000, 950, 1000, 750, 50);
  EXPECT_EQ(p.RegimeOf(975), 0u);
  EXPECT_EQ(p.RegimeOf(1000), 0u) << "measured at the switch: trained before it";
  EXPECT_EQ(p.RegimeOf(1001), 1u);
  // Under the wall clock the traffic leads: seen by the producer at 1550
  // with the traffic between 1650 and 1830, middle 1740.
  p.AddSwitch(1550, 1650, 1830, 1300, 50);
  EXPECT_EQ(p.RegimeOf(1600), 1u) << "made after the producer saw the switch, trained before the traffic reached it";
  EXPECT_EQ(p.RegimeOf(1739), 1u);
  EXPECT_EQ(p.RegimeOf(1740), 2u);
  // The first regime's model measured at the first switch wins a re-publish
  // at the return: a domain two regimes back, the cycle.
  p.NoteRepublish(1000);
  EXPECT_EQ(p.cycle(), 2u);
}

// The model at a switch's first measurement is the new regime's when it
// had learned the new domain there (the planner saw it measure better than
// the ending domain's model) and was made past the switch's middle: with
// no lead, the producer trained on the new domain from the middle on. Then
// its re-publish two regimes later shows a cycle of 2, not 3.
TEST(ReturnPredictorTest, AModelThatLearnedTheNewDomainAtTheSwitchIsOfTheRegimeAfter) {
  ReturnPredictor p(true);
  // Seen at 1000 (the last measurement before at 950): middle 975.
  p.AddSwitch(1000, 950, 1000, 750, 50, -1, false, /*at_learned=*/true);
  EXPECT_EQ(p.RegimeOf(975), 0u);
  EXPECT_EQ(p.RegimeOf(1000), 1u) << "learned the new domain by its first measurement";
  // Under the wall clock the traffic leads: seen by the producer at 1550
  // with the traffic between 1650 and 1830, middle 1740. A model at 1550
  // that measured well there is still the regime before: it was made
  // before the producer's own data reached the switch.
  p.AddSwitch(1550, 1650, 1830, 1300, 50, -1, false, /*at_learned=*/true);
  EXPECT_EQ(p.RegimeOf(1550), 1u) << "made before the switch's middle";
  p.AddSwitch(2100, 2050, 2100, 1900, 50);
  p.NoteRepublish(1000);  // the second regime's model wins in the fourth
  EXPECT_EQ(p.cycle(), 2u);
}

// A switch placed anew (a measurement after it showed where in its gap it
// fell) moves the prediction that reads it.
TEST(ReturnPredictorTest, APlacedSwitchMovesThePrediction) {
  ReturnPredictor p(true);
  Switch(&p, 1000, 900);
  Switch(&p, 2000, 1900);
  p.NoteRepublish(900);
  ASSERT_DOUBLE_EQ(p.PredictedReturn(kGap)->change, 2990);
  p.PlaceSwitch(1, 1996, 10);
  EXPECT_DOUBLE_EQ(p.switches()[1].middle, 1996);
  EXPECT_DOUBLE_EQ(p.PredictedReturn(kGap)->change, 3002);  // 1996 + (1996 - 990)
  p.PlaceSwitch(5, 0, 0);  // no such switch: nothing moves
  EXPECT_EQ(p.switches().size(), 2u);
}

// The same switches without a domain seen coming back (no re-publish of an
// older regime's model), or with prediction off: no prediction.
TEST(ReturnPredictorTest, NoPredictionWithoutAReturnOrWhenDisabled) {
  ReturnPredictor none(true);
  for (int64_t at : {1000, 2000, 3000}) Switch(&none, at, at - 100);
  EXPECT_FALSE(none.PredictedReturn(kGap).has_value()) << "no domain came back yet";

  const ReturnPredictor off = ThreeSwitches(3000, false);
  EXPECT_FALSE(off.PredictedReturn(kGap).has_value());
  EXPECT_EQ(off.switches().size(), 3u) << "switches are recorded all the same";
}

// Intervals 1000 and 1300 differ by 300, more than max(5% of 1300 = 65,
// half-widths 10 + 2 x 10 + 10 = 40): not evenly spaced, no prediction.
TEST(ReturnPredictorTest, UnevenSwitchesPredictNothing) {
  const ReturnPredictor p = ThreeSwitches(3300);
  EXPECT_FALSE(p.PredictedReturn(kGap).has_value());
}

// A domain's last visit ended with the producer's own model (2980) measuring
// better than the served one (900): the return publishes 2980, trained on
// that domain for the whole visit, and falls back to 900 when 2980 is not
// kept (not re-measured now); without `better` it is 900 as before.
TEST(ReturnPredictorTest, AReturnPublishesTheDomainsBetterModelElseTheServedOne) {
  ReturnPredictor p(true);
  Switch(&p, 1000, 900);
  Switch(&p, 2000, 1900);
  p.NoteRepublish(900);
  EXPECT_EQ(p.AddSwitch(3000, 2980, 3000, 900, kGap, /*better=*/2980), ReturnPredictor::SwitchSeen::kRecorded);
  EXPECT_EQ(p.regime_models(), (std::vector<int64_t>{900, 1900, 900}));
  EXPECT_EQ(p.regime_better(), (std::vector<int64_t>{-1, -1, 2980}));
  const auto r = p.PredictedReturn(kGap);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->model, 2980);
  EXPECT_EQ(r->fallbacks, (std::vector<int64_t>{900}));
  const auto both = p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.5}, {2980, 0.4}}, kGap);
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->first, 2980);
  p.DropPending();
  const auto only_served = p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.5}}, kGap);
  ASSERT_TRUE(only_served.has_value());
  EXPECT_EQ(only_served->first, 900) << "2980 not kept: the served one";
  p.DropPending();
  EXPECT_FALSE(p.PublishAhead(3985, 0, 10000, 3100, {{1900, 0.9}}, kGap).has_value()) << "neither re-measured";
}

// The third regime (A again) was served by 900 and ended with the producer's
// own 2980 measuring as well on A (within the gate's margin: `alike`, not
// `better`). The return's model is 900; 2980 comes first among the
// fallbacks and, published ahead of the switch, goes out in its place where
// it measures better on the ending (B) traffic now: it serves that stretch
// first. Where 900 measures better there, or only 900 is kept, 900; where
// only 2980 is kept, 2980.
TEST(ReturnPredictorTest, AReturnAheadOfItsSwitchTakesTheAlikeModelThatServesTheEndingTrafficBetter) {
  ReturnPredictor p(true);
  Switch(&p, 1000, 900);
  Switch(&p, 2000, 1900);
  p.NoteRepublish(900);
  EXPECT_EQ(p.AddSwitch(3000, 2980, 3000, 900, kGap, /*better=*/-1, false, false, /*alike=*/2980),
            ReturnPredictor::SwitchSeen::kRecorded);
  EXPECT_EQ(p.regime_alike(), (std::vector<int64_t>{-1, -1, 2980}));
  const auto r = p.PredictedReturn(kGap);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->model, 900);
  EXPECT_EQ(r->alike, 2980);
  EXPECT_EQ(r->fallbacks, (std::vector<int64_t>{2980}));
  const auto newer = p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.9}, {2980, 0.6}}, kGap);
  ASSERT_TRUE(newer.has_value());
  EXPECT_EQ(newer->first, 2980);
  EXPECT_DOUBLE_EQ(newer->second, 0.6);
  p.DropPending();
  const auto older = p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.5}, {2980, 0.6}}, kGap);
  ASSERT_TRUE(older.has_value());
  EXPECT_EQ(older->first, 900);
  p.DropPending();
  const auto only_older = p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.9}}, kGap);
  ASSERT_TRUE(only_older.has_value());
  EXPECT_EQ(only_older->first, 900);
  p.DropPending();
  const auto only_newer = p.PublishAhead(3985, 0, 10000, 3100, {{2980, 0.6}}, kGap);
  ASSERT_TRUE(only_newer.has_value());
  EXPECT_EQ(only_newer->first, 2980);
  p.DropPending();
  // A regime whose own model measured better is `better`, never `alike`.
  ReturnPredictor q(true);
  Switch(&q, 1000, 900);
  Switch(&q, 2000, 1900);
  q.NoteRepublish(900);
  q.AddSwitch(3000, 2980, 3000, 900, kGap, /*better=*/2980, false, false, /*alike=*/2980);
  EXPECT_EQ(q.regime_alike(), (std::vector<int64_t>{-1, -1, -1}));
  ASSERT_TRUE(q.PredictedReturn(kGap).has_value());
  EXPECT_EQ(q.PredictedReturn(kGap)->alike, -1);
}

// A visit the delivery lag outlasted leaves no model of its own kept: the
// producer's best there (2980) was never copied, and what served the visit
// (1900, trained on B in the regime before) is the other domain's. The return falls back to the domain's
// model of an earlier visit (900, which served A's first regime), not to 1900: published for A's return it
// would serve the wrong domain again. A model of the domain that serves already ends the search: no
// anticipation is needed.
TEST(ReturnPredictorTest, AReturnFallsBackToAnEarlierVisitsModelOfTheDomain) {
  ReturnPredictor p(true);
  Switch(&p, 1000, 900);   // A -> B; regime 0 (A) served by 900
  Switch(&p, 2000, 1900);  // B -> A; regime 1 (B) served by 1900
  p.NoteRepublish(900);    // A came back two regimes on: cycle 2
  EXPECT_EQ(p.AddSwitch(3000, 2980, 3000, 1900, kGap, /*better=*/2980),
            ReturnPredictor::SwitchSeen::kRecorded);
  const auto r = p.PredictedReturn(kGap);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->model, 2980);
  EXPECT_EQ(r->fallbacks, (std::vector<int64_t>{900})) << "1900 served A's visit but is B's";
  const auto older = p.PublishAhead(3985, 0, 10000, 3100, {{1900, 0.4}, {900, 0.6}}, kGap);
  ASSERT_TRUE(older.has_value());
  EXPECT_EQ(older->first, 900);
  p.DropPending();
  EXPECT_FALSE(p.PublishAhead(3985, 0, 10000, 3100, {{1900, 0.4}}, kGap).has_value())
      << "B's model is no return";

  // The visit was served by a model trained on A there (2500): it is the
  // domain's, tried before the earlier visit's, and
  // when it serves now no earlier model goes out in its place.
  ReturnPredictor q(true);
  Switch(&q, 1000, 900);
  Switch(&q, 2000, 1900);
  q.NoteRepublish(900);
  q.AddSwitch(3000, 2980, 3000, 2500, kGap, /*better=*/2980);
  const auto s = q.PredictedReturn(kGap);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->fallbacks, (std::vector<int64_t>{2500, 900}));
  EXPECT_FALSE(q.PublishAhead(3985, 0, 10000, 2500, {{900, 0.6}}, kGap).has_value())
      << "A's 2500 serves already";
  const auto kept = q.PublishAhead(3985, 0, 10000, 3100, {{900, 0.6}, {2500, 0.5}}, kGap);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->first, 2500);
  q.DropPending();
  // Serving, 2500 is adopted as the return's anticipation (it holds), as
  // the prediction's own model would be; B's 1900 never is.
  EXPECT_FALSE(p.AdoptServed(3000, 985, 10000, 1900, 2.0, kGap, 0.35)) << "B's model is no return";
  EXPECT_TRUE(q.AdoptServed(3000, 985, 10000, 2500, 2.0, kGap, 0.35));
  EXPECT_TRUE(q.holding());
}

// A switch within four measurement gaps (80) of the last one is the same
// switch seen twice (by a re-publish and by the change detector), unless
// the planner says it is distinct.
TEST(ReturnPredictorTest, ASwitchSeenTwiceIsOne) {
  ReturnPredictor p(true);
  EXPECT_EQ(Switch(&p, 1000, 900), ReturnPredictor::SwitchSeen::kRecorded);
  EXPECT_EQ(Switch(&p, 1080, 900), ReturnPredictor::SwitchSeen::kRepeated);
  EXPECT_EQ(p.switches().size(), 1u);
  EXPECT_EQ(Switch(&p, 1100, 900), ReturnPredictor::SwitchSeen::kRecorded);
  // One the planner knows is another (the traffic moved there and back) is
  // recorded however close.
  EXPECT_EQ(p.AddSwitch(1140, 1120, 1140, 1100, kGap, -1, /*distinct=*/true),
            ReturnPredictor::SwitchSeen::kRecorded);
  EXPECT_EQ(p.switches().size(), 3u);
}

// Published ahead at traffic 3985 (it arrives at once: no lag), from 3980 =
// 3990 - half a gap on. Earlier, or without the model re-measured now, or
// when it serves already: nothing.
TEST(ReturnPredictorTest, PublishesAheadOnlyWhenItArrivesAtTheSwitch) {
  ReturnPredictor p = ThreeEvenSwitches();
  const std::vector<std::pair<int64_t, double>> kept = {{1900, 0.9}, {900, 0.5}};
  EXPECT_FALSE(p.PublishAhead(3960, 0, 10000, 3100, kept, kGap).has_value()) << "arrives at 3960 < 3980";
  EXPECT_FALSE(p.pending());
  EXPECT_TRUE(p.PublishAhead(3960, 25, 10000, 3100, kept, kGap).has_value()) << "a lag of 25 makes it 3985";
  p.DropPending();
  EXPECT_FALSE(p.PublishAhead(3985, 0, 10000, 3100, {{1900, 0.9}}, kGap).has_value())
      << "900 not re-measured";
  EXPECT_FALSE(p.PublishAhead(3985, 0, 10000, 900, kept, kGap).has_value()) << "900 serves already";
  EXPECT_FALSE(p.PublishAhead(3985, 0, 3900, 3100, kept, kGap).has_value()) << "beyond the horizon";
  EXPECT_FALSE(p.PublishAhead(3995, 0, 10000, 3100, kept, kGap).has_value()) << "past the predicted middle";
  const auto ahead = p.PublishAhead(3985, 0, 10000, 3100, kept, kGap);
  ASSERT_TRUE(ahead.has_value());
  EXPECT_EQ(ahead->first, 900);
  EXPECT_DOUBLE_EQ(ahead->second, 0.5);
  p.DropPending();
  // A lag that lands it 360 after the predicted switch (3000 + 1350), more
  // than 0.35 of the spacing of 1000: too late; 340 after is not.
  EXPECT_FALSE(p.PublishAhead(3000, 1350, 10000, 3100, kept, kGap, 0.35).has_value()) << "arrives at 4350";
  EXPECT_FALSE(p.pending());
  EXPECT_TRUE(p.PublishAhead(3000, 1330, 10000, 3100, kept, kGap, 0.35).has_value()) << "arrives at 4330";
  EXPECT_TRUE(p.pending());
  EXPECT_FALSE(p.holding()) << "pending until its checkpoint";
}

// A confirmed return (a switch at 4000: middle 3990) holds until the traffic
// is past 3990 + half a gap and past where it was seen (4000).
TEST(ReturnPredictorTest, AConfirmedReturnHoldsUntilTheTrafficIsPastIt) {
  ReturnPredictor p = ThreeEvenSwitches();
  ASSERT_TRUE(p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.5}}, kGap).has_value());
  p.Activate(0.5, 3100);
  EXPECT_TRUE(p.holding());
  EXPECT_FALSE(p.ServedShowsReturn(0.45, 0.05)) << "0.45 is not below 0.5 - 2 x 0.05";
  EXPECT_TRUE(p.ServedShowsReturn(0.3, 0.05));
  EXPECT_FALSE(p.ServedShowsReturn(std::nullopt, 0.05));
  EXPECT_EQ(Switch(&p, 4000, 900), ReturnPredictor::SwitchSeen::kConfirmed);
  EXPECT_EQ(p.regime_models().back(), 3100) << "the regime that ended was served by the model replaced";
  EXPECT_FALSE(p.ServedShowsReturn(0.3, 0.05)) << "already confirmed";
  EXPECT_FALSE(p.Settle(4000, kGap, 1e9));
  EXPECT_TRUE(p.holding()) << "not past where it was seen";
  EXPECT_FALSE(p.Settle(4020, kGap, 1e9));
  EXPECT_FALSE(p.holding());
}

// Under the wall clock a switch's position is an estimate whose error grows
// with the traffic's lead over the producer: a switch at traffic 4070 (half-
// width 10) is 80 from the prediction (3990, tolerance 50), refuted when
// seen with no lead, confirmed when seen at producer iteration 3600 (a lead
// of 480: 50 + 10 + 48 >= 80).
TEST(ReturnPredictorTest, ALeadWidensWhereASwitchMeetsThePrediction) {
  for (int64_t at : {4080, 3600}) {
    ReturnPredictor p = ThreeEvenSwitches();
    ASSERT_TRUE(p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.5}}, kGap).has_value());
    p.Activate(0.5, 3100);
    const auto seen = p.AddSwitch(at, 4060, 4080, 900, kGap);
    EXPECT_EQ(seen, at == 4080 ? ReturnPredictor::SwitchSeen::kRefuted : ReturnPredictor::SwitchSeen::kConfirmed)
        << "seen at producer iteration " << at;
  }
}

// Intervals of 1000 and 1100 are too uneven to predict from when the three
// switches were seen with no lead (allowed: max(5% of 1100, 10 + 2 x 10 +
// 10) = 55 < 100), even enough when each was seen 200 traffic iterations
// ahead of the producer (its position an estimate: + 0.1 x (200 + 2 x 200 +
// 200) = 80, allowed 120).
TEST(ReturnPredictorTest, ALeadWidensHowEvenlySpacedSwitchesMustBe) {
  for (int64_t lead : {0, 200}) {
    ReturnPredictor p(true);
    auto add = [&](int64_t traffic, int64_t served) {
      return p.AddSwitch(traffic - lead, static_cast<double>(traffic - 20), static_cast<double>(traffic), served,
                         kGap);
    };
    EXPECT_EQ(add(1000, 500), ReturnPredictor::SwitchSeen::kRecorded);
    EXPECT_EQ(add(2000, 1700), ReturnPredictor::SwitchSeen::kRecorded);
    p.NoteRepublish(500);  // the first regime's model won: the traffic recurs
    EXPECT_EQ(add(3100, 500), ReturnPredictor::SwitchSeen::kRecorded);
    EXPECT_EQ(p.PredictedReturn(kGap).has_value(), lead > 0) << "lead " << lead;
  }
}

// Traffic at the run's end (N = 4010 here) cannot move on to confirm a
// prediction (3990, tolerance 50) or settle a confirmed one: either ends
// there, neither as a failure (the run ended before it could be judged).
TEST(ReturnPredictorTest, TheRunsEndSettlesEveryAnticipation) {
  for (bool confirmed : {false, true}) {
    ReturnPredictor p = ThreeEvenSwitches();
    ASSERT_TRUE(p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.5}}, kGap).has_value());
    p.Activate(0.5, 3100);
    if (confirmed) {
      ASSERT_EQ(Switch(&p, 4000, 900), ReturnPredictor::SwitchSeen::kConfirmed);
    }
    EXPECT_FALSE(p.Settle(4000, kGap, 4010));
    EXPECT_TRUE(p.holding()) << "confirmed " << confirmed << ": before the end";
    EXPECT_FALSE(p.Settle(4010, kGap, 4010)) << "not a failure";
    EXPECT_FALSE(p.holding()) << "confirmed " << confirmed << ": at the end";
  }
}

// A prediction (3990, tolerance 50) not confirmed by traffic 4040 is still
// open; past it, at 4041, it failed: predictions stop until two new
// switches (then from their one interval: 5190 + 1000, the model that served
// the regime two before), and then need three evenly spaced ones (the next
// middle again, 6190 + 1000).
TEST(ReturnPredictorTest, AnUnconfirmedPredictionFailsAndStopsPredictions) {
  ReturnPredictor p = ThreeEvenSwitches();
  ASSERT_TRUE(p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.5}}, kGap).has_value());
  p.Activate(0.5, 3100);
  EXPECT_FALSE(p.Settle(4040, kGap, 1e9)) << "within the tolerance";
  EXPECT_TRUE(p.holding());
  EXPECT_TRUE(p.Settle(4041, kGap, 1e9)) << "past 3990 + 50: failed";
  EXPECT_FALSE(p.holding());
  EXPECT_FALSE(p.PredictedReturn(kGap).has_value()) << "the old switches no longer count";
  EXPECT_EQ(Switch(&p, 4200, 3100), ReturnPredictor::SwitchSeen::kRecorded);
  EXPECT_FALSE(p.PredictedReturn(kGap).has_value()) << "one new switch gives no spacing";
  EXPECT_EQ(Switch(&p, 5200, 4300), ReturnPredictor::SwitchSeen::kRecorded);
  const auto two = p.PredictedReturn(kGap);
  ASSERT_TRUE(two.has_value()) << "two new switches: their interval";
  EXPECT_DOUBLE_EQ(two->change, 6190);
  EXPECT_EQ(two->model, 4300);
  EXPECT_DOUBLE_EQ(two->tolerance, 50);
  EXPECT_EQ(Switch(&p, 6200, 5300), ReturnPredictor::SwitchSeen::kRecorded);
  const auto r = p.PredictedReturn(kGap);
  ASSERT_TRUE(r.has_value()) << "three new evenly spaced switches";
  EXPECT_DOUBLE_EQ(r->change, 7190);
  EXPECT_EQ(r->model, 5300) << "a cycle of two: the model that served the regime two before the next";
}

// A switch far from the prediction refutes it at once.
TEST(ReturnPredictorTest, AnEarlySwitchRefutesThePrediction) {
  ReturnPredictor p = ThreeEvenSwitches();
  ASSERT_TRUE(p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.5}}, kGap).has_value());
  p.Activate(0.5, 3100);
  EXPECT_EQ(Switch(&p, 3800, 3100), ReturnPredictor::SwitchSeen::kRefuted) << "middle 3790, 200 early";
  EXPECT_FALSE(p.holding());
  EXPECT_FALSE(p.PredictedReturn(kGap).has_value());
}

// Under the wall clock a stall moves the traffic on while the producer waits.
// The return predicted at 3990 (tolerance 50), published ahead at iteration
// 3010, is seen at iteration 3060, three measurements after the last switch
// (3000) but a stay later in the traffic: it confirms the prediction, not a
// repeat of the last switch. And a switch seen across a wide gap (traffic
// 3800 to 4000 while a stall ran: middle 3900, 90 from the prediction)
// confirms it when the gap meets the tolerance; one that falls wholly before
// it (3700 to 3760) refutes it.
TEST(ReturnPredictorTest, APredictedReturnSeenAcrossAStallConfirmsIt) {
  const std::vector<std::pair<int64_t, double>> kept = {{900, 0.5}};
  {
    ReturnPredictor p = ThreeEvenSwitches();
    ASSERT_TRUE(p.PublishAhead(3985, 0, 10000, 3100, kept, kGap).has_value());
    p.Activate(0.5, 3100);
    EXPECT_EQ(p.AddSwitch(3060, 3960, 4000, 900, kGap), ReturnPredictor::SwitchSeen::kConfirmed);
    EXPECT_EQ(p.switches().size(), 4u);
    EXPECT_EQ(p.AddSwitch(3080, 4000, 4020, 900, kGap), ReturnPredictor::SwitchSeen::kRepeated)
        << "seen again by the other detector";
  }
  {
    ReturnPredictor p = ThreeEvenSwitches();
    ASSERT_TRUE(p.PublishAhead(3985, 0, 10000, 3100, kept, kGap).has_value());
    p.Activate(0.5, 3100);
    EXPECT_EQ(p.AddSwitch(3200, 3800, 4000, 900, kGap), ReturnPredictor::SwitchSeen::kConfirmed);
  }
  {
    ReturnPredictor p = ThreeEvenSwitches();
    ASSERT_TRUE(p.PublishAhead(3985, 0, 10000, 3100, kept, kGap).has_value());
    p.Activate(0.5, 3100);
    EXPECT_EQ(p.AddSwitch(3200, 3700, 3760, 900, kGap), ReturnPredictor::SwitchSeen::kRefuted);
  }
}

// A switch three measurements after the last one (at 3000, traffic 2980 to
// 3000) is the same switch when its traffic is too (3040 to 3060, within
// four gaps of 3000), another one when a stall moved the traffic on between
// them (3500 to 3540), as it does under the wall clock.
TEST(ReturnPredictorTest, ASwitchAStallsTrafficAfterTheLastOneIsAnother) {
  ReturnPredictor p = ThreeEvenSwitches();
  EXPECT_EQ(p.AddSwitch(3060, 3040, 3060, 900, kGap), ReturnPredictor::SwitchSeen::kRepeated);
  EXPECT_EQ(p.switches().size(), 3u);
  EXPECT_EQ(p.AddSwitch(3060, 3500, 3540, 900, kGap), ReturnPredictor::SwitchSeen::kRecorded);
  EXPECT_EQ(p.switches().size(), 4u);
  EXPECT_DOUBLE_EQ(p.switches().back().middle, 3520);
}

// The active anticipation's model measured 0.5 when published; with a margin
// of 0.05 a re-measurement below 0.4 shows the return. Re-measured 0.45,
// 0.38, 0.39, 0.37 (the latest last), it has shown it for the two before the
// latest; broken by 0.45 it counts no further back. Without an active,
// unconfirmed anticipation nothing shows.
TEST(ReturnPredictorTest, AReturnShowsFromTheFirstReMeasurementBelowTheMargin) {
  ReturnPredictor p = ThreeEvenSwitches();
  EXPECT_EQ(p.ShownFor({0.38, 0.37}, 0.05), 0u) << "no anticipation";
  ASSERT_TRUE(p.PublishAhead(3985, 0, 10000, 3100, {{900, 0.5}}, kGap).has_value());
  p.Activate(0.5, 3100);
  EXPECT_EQ(p.ShownFor({0.45, 0.38, 0.39, 0.37}, 0.05), 2u);
  EXPECT_EQ(p.ShownFor({0.38, 0.45, 0.39, 0.37}, 0.05), 1u);
  EXPECT_EQ(p.ShownFor({0.37}, 0.05), 0u);
  EXPECT_EQ(p.ShownFor({0.38, 0.39, 0.37}, 0.01), 2u) << "today's margin";
}

// The served model (900) is already the predicted return's (3990, to A): a
// re-publish landed late, in the regime before. A publish now that would
// land at the switch (arrival from 3980 to 3990 + 0.35 x 1000) would replace
// it there; instead the served model becomes the anticipation and holds.
TEST(ReturnPredictorTest, AServedModelThatIsTheReturnsIsAdoptedAsItsAnticipation) {
  ReturnPredictor p = ThreeEvenSwitches();
  EXPECT_FALSE(p.AdoptServed(3000, 985, 10000, 3100, 2.0, kGap, 0.35)) << "3100 is not the return's model";
  EXPECT_FALSE(p.AdoptServed(3000, 960, 10000, 900, 2.0, kGap, 0.35)) << "a publish now lands at 3960: early";
  EXPECT_FALSE(p.AdoptServed(3000, 1350, 10000, 900, 2.0, kGap, 0.35)) << "lands at 4350: late";
  EXPECT_FALSE(p.AdoptServed(3000, 985, 3900, 900, 2.0, kGap, 0.35)) << "beyond the horizon";
  EXPECT_FALSE(p.holding());
  EXPECT_TRUE(p.AdoptServed(3000, 985, 10000, 900, 2.0, kGap, 0.35));
  EXPECT_TRUE(p.holding());
  EXPECT_FALSE(p.AdoptServed(3000, 985, 10000, 900, 2.0, kGap, 0.35)) << "one already holds";
  EXPECT_TRUE(p.ServedShowsReturn(0.5, 0.05)) << "measured 2.0 on the other domain when adopted";
  EXPECT_EQ(Switch(&p, 4000, 900), ReturnPredictor::SwitchSeen::kConfirmed);
  EXPECT_EQ(p.regime_models().back(), 900) << "it served the regime that ended, badly";
}

}  // namespace
}  // namespace internal
}  // namespace schedulers
}  // namespace viper
