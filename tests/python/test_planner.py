"""viper.Planner: the closed-loop (online) and offline planners driven from
Python as the live producer drives them."""
import math

import pytest

import viper


def curve(i):
    """A noiseless decaying loss, 2.3 -> 0.3."""
    return 0.3 + 2.0 * math.exp(-i / 150.0)


def drive(planner, n, val_every=10, publish=None):
    taken = []
    for i in range(1, n + 1):
        planner.observe(i, train_loss=curve(i), val_loss=curve(i) if i % val_every == 0 else None)
        if planner.should_checkpoint(i):
            planner.commit(i)
            taken.append(i)
    return taken


def test_online_publishes_while_the_loss_falls():
    n, w = 800, 200
    p = viper.Planner("online", total_iterations=n, warmup=w, cost=(0.001, 0.002), seconds_per_iteration=0.01,
                      requests={"interval_s": 0.01})
    taken = drive(p, n)
    r = p.report()
    assert r["strategy"] == "online" and r["built"]
    assert r["metric"] == "val_loss"  # 20 validation points in the warm-up
    assert taken, r
    assert all(w < t <= n for t in taken)
    assert taken == sorted(set(taken)) and r["checkpoints"] == taken
    # Only at measurement points: the gate needs a measured loss.
    assert all(t % 10 == 0 for t in taken), taken
    assert r["replans"] > 0 and "online:" in r["summary"]


def test_a_diverged_model_is_never_published():
    # The run diverges at 500: NaN losses from then on (a PyTorch loop without
    # a NaN check). observe() takes them; online never checkpoints there.
    n, w = 800, 200
    p = viper.Planner("online", total_iterations=n, warmup=w, cost=(0.001, 0.002), seconds_per_iteration=0.01,
                      requests={"interval_s": 0.01})
    taken = []
    for i in range(1, n + 1):
        loss = curve(i) if i < 500 else float("nan")
        p.observe(i, train_loss=loss, val_loss=loss if i % 10 == 0 else None)
        if p.should_checkpoint(i):
            p.commit(i)
            taken.append(i)
    assert taken and max(taken) < 500, taken
    assert "diverged measurements" in p.report()["summary"], p.report()["summary"]
    # A warm-up that holds the divergence cannot be planned from: said at the first decision.
    q = viper.Planner("online", total_iterations=400, warmup=100, cost=(0.001, 0.001), seconds_per_iteration=0.01)
    for i in range(1, 101):
        q.observe(i, train_loss=curve(i), val_loss=float("inf") if i == 90 else (curve(i) if i % 10 == 0 else None))
    with pytest.raises(ValueError, match="diverged during the warm-up"):
        q.should_checkpoint(101)


def test_nothing_during_the_warm_up():
    p = viper.Planner("online", total_iterations=400, warmup=100, cost=(0.001, 0.001), seconds_per_iteration=0.01)
    for i in range(1, 101):
        p.observe(i, train_loss=curve(i), val_loss=curve(i) if i % 10 == 0 else None)
        assert p.should_checkpoint(i) is False
    assert p.report()["built"] is False
    with pytest.raises(ValueError, match="warm-up"):
        p.commit(50)


def test_offline_optimal_follows_its_plan():
    n, w = 600, 150
    p = viper.Planner("optimal", total_iterations=n, warmup=w, cost={"stall_s": 0.001, "delay_s": 0.002},
                      seconds_per_iteration=0.01)
    taken = drive(p, n)
    r = p.report()
    assert r["plan"], r
    assert taken == r["plan"], (taken, r["plan"])


def test_cost_from_a_report_or_set_later():
    p = viper.Planner("online", total_iterations=300, warmup=100, seconds_per_iteration=0.01)
    for i in range(1, 101):
        p.observe(i, train_loss=curve(i), val_loss=curve(i) if i % 10 == 0 else None)
    with pytest.raises(ValueError, match="set_cost"):
        p.should_checkpoint(101)
    p.set_cost((0.002, 0.005))
    p.observe(101, train_loss=curve(101))
    p.should_checkpoint(101)
    r = p.report()
    assert r["stall_s"] == pytest.approx(0.002) and r["delay_s"] == pytest.approx(0.005)
    # online re-plans with a cost measured later (a delta version's)
    p.set_cost((0.0005, 0.001))
    assert "cost re-measured 1 times" in p.report()["summary"]
    o = viper.Planner("optimal", total_iterations=300, warmup=100, cost=(0.002, 0.005), seconds_per_iteration=0.01)
    for i in range(1, 102):
        o.observe(i, train_loss=curve(i), val_loss=curve(i) if i % 10 == 0 else None)
    o.should_checkpoint(101)
    with pytest.raises(ValueError, match="before"):
        o.set_cost((0.1, 0.1))


def test_tau_is_measured_when_not_given():
    p = viper.Planner("online", total_iterations=300, warmup=100, cost=(0, 0))
    for i in range(1, 101):
        p.observe(i, train_loss=curve(i), val_loss=curve(i) if i % 10 == 0 else None)
    p.should_checkpoint(101)
    assert p.report()["seconds_per_iteration"] > 0


def test_bad_input():
    with pytest.raises(ValueError, match="oracle"):
        viper.Planner("oracle", total_iterations=10, warmup=2)
    with pytest.raises(ValueError, match="unknown"):
        viper.Planner("sometimes", total_iterations=10, warmup=2)
    with pytest.raises(ValueError, match="warmup"):
        viper.Planner("online", total_iterations=10, warmup=10)
    with pytest.raises(ValueError, match="required"):
        viper.Planner("online")
    with pytest.raises(ValueError, match="cost"):
        viper.Planner("online", total_iterations=10, warmup=2, cost="cheap")
    with pytest.raises(ValueError, match="stall_s"):
        viper.Planner("online", total_iterations=10, warmup=2, cost=(-1, 0))
    with pytest.raises(ValueError, match="requests"):
        viper.Planner("online", total_iterations=10, warmup=2, requests=0)
    with pytest.raises(ValueError, match="requests"):
        viper.Planner("online", total_iterations=10, warmup=2, requests={"rate": 3})
    p = viper.Planner("online", total_iterations=100, warmup=20, cost=(0, 0))
    p.observe(5, train_loss=1.0)
    with pytest.raises(ValueError, match="goes back"):
        p.observe(4, train_loss=1.0)
    p.observe(6, train_loss=float("nan"))  # a diverged model: kept as +inf, never an exception mid-training


def test_online_re_plans_on_the_measured_pace():
    p = viper.Planner("online", total_iterations=300, warmup=100, cost=(0.002, 0.005), seconds_per_iteration=0.01)
    for i in range(1, 101):
        p.observe(i, train_loss=curve(i), val_loss=curve(i) if i % 10 == 0 else None)
    with pytest.raises(ValueError, match="after"):
        p.set_pace(0.02)  # not built before the warm-up's end
    p.observe(101, train_loss=curve(101))
    p.should_checkpoint(101)
    p.set_pace(0.0105)  # within 10% of the pace in use: noise
    assert "pace re-measured" not in p.report()["summary"]
    p.set_pace(0.1)
    assert "pace re-measured (100 ms per iteration at the end)" in p.report()["summary"], p.report()["summary"]
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="pace"):
            p.set_pace(bad)
    o = viper.Planner("optimal", total_iterations=300, warmup=100, cost=(0.002, 0.005), seconds_per_iteration=0.01)
    with pytest.raises(ValueError, match="only the online"):
        o.set_pace(0.1)


def test_online_reads_the_producers_clock():
    p = viper.Planner("online", total_iterations=300, warmup=100, cost=(0.002, 0.005), seconds_per_iteration=0.01)
    for i in range(1, 101):
        p.observe(i, train_loss=curve(i), val_loss=curve(i) if i % 10 == 0 else None)
    with pytest.raises(ValueError, match="after it"):
        p.observe_clock(101, 0.01)  # not built before the warm-up's end
    p.observe(101, train_loss=curve(101))
    p.should_checkpoint(101)
    p.observe_clock(101, 0.01)
    p.observe_clock(101, 0.5)  # given again: ignored
    with pytest.raises(ValueError, match="iteration 102 comes first"):
        p.observe_clock(103, 0.03)
    for bad in (0.005, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="expected finite and >= 0.01"):
            p.observe_clock(102, bad)
    p.observe_clock(102, 0.02)
    o = viper.Planner("optimal", total_iterations=300, warmup=100, cost=(0.002, 0.005), seconds_per_iteration=0.01)
    with pytest.raises(ValueError, match="only the online"):
        o.observe_clock(101, 0.01)


def test_online_decisions_are_recorded_when_asked():
    # A fall, then a jump of the served version re-measured (the traffic
    # changed): every decision after the warm-up is kept, the publishing ones
    # are the checkpoints, and the served version's re-measurement is what
    # observe_served() gave.
    n, w = 800, 200
    kw = dict(total_iterations=n, warmup=w, cost=(0.001, 0.002), seconds_per_iteration=0.01,
              requests={"interval_s": 0.01})
    p = viper.Planner("online", record_decisions=True, **kw)
    quiet = viper.Planner("online", **kw)
    for i in range(1, n + 1):
        val = curve(i) if i % 10 == 0 else None
        for q in (p, quiet):
            q.observe(i, train_loss=curve(i), val_loss=val)
            if val is not None and i > w:
                q.observe_served(curve(q.publishing() if q.report()["checkpoints"] else w) + (0.5 if i > 600 else 0))
            if q.should_checkpoint(i):
                q.commit(i)
    d = p.decisions()
    assert quiet.decisions() == []
    assert quiet.report()["checkpoints"] == p.report()["checkpoints"], "recording changes no decision"
    assert len(d) == (n - w) // 10
    assert [x["iteration"] for x in d] == list(range(w + 10, n + 1, 10))
    assert [x["iteration"] for x in d if x["publish"]] == p.report()["checkpoints"]
    assert all(x["published_model"] == x["iteration"] and x["publish_kind"] == "fresh" for x in d if x["publish"])
    assert all(x["published_model"] is None and x["publish_kind"] == "" for x in d if not x["publish"])
    assert all(x["served_loss"] is not None and x["noise_sd"] > 0 for x in d)
    last = d[-1]
    assert math.isclose(last["served_loss"], curve(last["served_model"]) + 0.5, rel_tol=1e-9)
    assert set(d[0]) >= {"candidate_loss", "gate_margin", "best_kept_model", "predicted_switch", "lag_price_per_s"}
