"""viper.StalenessRecorder: a staleness table recorded from a PyTorch loop
(issue 25, item 7). Every expected number is computed here independently of
the recorder: a deep copy of the model at each step, evaluated directly."""
import copy
import csv
import gzip
import io
import math
import os
import stat

import pytest
import torch

import viper

HEADER = ["version_iteration", "traffic_iteration", "val_loss", "val_accuracy", "test_loss", "test_accuracy"]
CE = torch.nn.functional.cross_entropy


def blobs(n, seed, swap=None):
    """Three Gaussian classes in 2-D; `swap` = (a, b) exchanges two labels."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    centres = torch.tensor([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    x = centres[y] + 0.5 * torch.randn(n, 2, generator=g)
    if swap is not None:
        a, b = swap
        y = torch.where(y == a, torch.full_like(y, b), torch.where(y == b, torch.full_like(y, a), y))
    return x, y


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def model_bytes(model):
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def train_step(model, opt, x, y):
    opt.zero_grad()
    CE(model(x), y).backward()
    opt.step()


def direct(model, batch):
    with torch.no_grad():
        out = model(batch[0])
        return CE(out, batch[1]).item(), (out.argmax(1) == batch[1]).double().mean().item()


def read_table(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        text = f.read()
    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], rows[1:]


def test_every_row_equals_a_direct_evaluation_of_that_version_and_the_users_module_is_untouched():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    rec = viper.StalenessRecorder(every=5, max_bytes=1 << 20)
    snapshots, expected = {}, {}
    for step in range(1, 31):
        x, y = blobs(32, step)
        train_step(model, opt, x, y)
        kept = rec.maybe_keep(step, model)
        assert kept == (step % 5 == 0)
        if step % 5 == 0:
            snapshots[step] = copy.deepcopy(model)
            val, test = blobs(200, 1000 + step), blobs(200, 2000 + step)
            before = {k: v.clone() for k, v in model.state_dict().items()}
            model.train()
            rows = rec.record(step, val, test, CE, model)
            assert model.training, "record() must leave the user's module in its own mode"
            for k, v in model.state_dict().items():
                assert torch.equal(v, before[k]), f"record() changed the user's {k}"
            assert [r[0] for r in rows] == sorted(snapshots)
            for v, snap in snapshots.items():
                (vl, va), (tl, ta) = direct(snap, val), direct(snap, test)
                expected[(v, step)] = (v, step, vl, va, tl, ta)
    assert rec.versions_kept == [5, 10, 15, 20, 25, 30]
    assert len(rec.rows) == 6 * 7 // 2
    for row in rec.rows:
        want = expected[(row[0], row[1])]
        assert row[:2] == want[:2]
        assert row[2:] == pytest.approx(want[2:], rel=1e-6, abs=1e-7), row
    diagonal = [r for r in rec.rows if r[0] == r[1]]
    assert [r[0] for r in diagonal] == [5, 10, 15, 20, 25, 30]
    # The versions differ (the table is not one model measured six times).
    assert len({round(r[4], 6) for r in diagonal}) == 6
    assert rec.loss_of(30, "test") == pytest.approx(expected[(30, 30)][4], rel=1e-6)
    assert rec.loss_of(5, "val") == pytest.approx(expected[(5, 30)][2], rel=1e-6)
    assert rec.loss_of(5, "val", traffic_step=5) == pytest.approx(expected[(5, 5)][2], rel=1e-6)
    with pytest.raises(KeyError, match="was not measured"):
        rec.loss_of(7, "val")


def test_a_module_not_kept_at_the_step_is_measured_as_the_diagonal():
    model = make_model()
    rec = viper.StalenessRecorder(every=10, max_bytes=1 << 20)
    rec.maybe_keep(10, model)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    train_step(model, opt, *blobs(64, 3))
    val, test = blobs(100, 4), blobs(100, 5)
    rec.record(13, val, test, CE, model)
    assert [r[:2] for r in rec.rows] == [(10, 13), (13, 13)]
    assert rec.rows[1][2] == pytest.approx(direct(model, val)[0], rel=1e-6)
    assert rec.versions_kept == [10]  # measured, not kept


def test_the_memory_bound_holds_old_versions_are_thinned_evenly_and_the_newest_is_kept():
    model = make_model()
    one = model_bytes(model)
    rec = viper.StalenessRecorder(every=1, max_bytes=5 * one)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 41):
        train_step(model, opt, *blobs(16, step))
        rec.maybe_keep(step, model)
        assert rec.bytes_kept <= 5 * one
        assert rec.versions_kept[-1] == step
    kept = rec.versions_kept
    assert len(kept) == 5 and rec.bytes_kept == 5 * one and rec.thinned == 35
    assert kept[0] == 1 and kept[-1] == 40
    gaps = [b - a for a, b in zip(kept, kept[1:])]
    assert max(gaps) <= 2 * min(gaps), kept  # evenly, not the last five
    # The newest copy is the model as it is now, detached, on the CPU.
    newest = rec._versions[40]
    for k, v in model.state_dict().items():
        assert torch.equal(newest[k], v) and newest[k].device.type == "cpu" and not newest[k].requires_grad
        assert newest[k].data_ptr() != v.data_ptr()


def test_the_served_version_survives_thinning_while_two_fit():
    model = make_model()
    one = model_bytes(model)
    rec = viper.StalenessRecorder(every=1, max_bytes=3 * one)
    rec.keep(2, model, served=True)
    for step in range(3, 30):
        rec.maybe_keep(step, model)
    assert 2 in rec.versions_kept and rec.versions_kept[-1] == 29 and rec.served_step == 2
    assert rec.bytes_kept <= 3 * one
    tight = viper.StalenessRecorder(every=1, max_bytes=one)
    tight.keep(2, model, served=True)
    tight.maybe_keep(3, model)
    assert tight.versions_kept == [3] and tight.served_step is None


def test_the_file_is_private_atomic_and_parses_as_its_header_says(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    rec = viper.StalenessRecorder(every=2, max_bytes=1 << 20)
    for step in range(1, 9):
        train_step(model, opt, *blobs(32, step))
        rec.maybe_keep(step, model)
        if step % 2 == 0:
            rec.record(step, blobs(50, 100 + step), blobs(50, 200 + step), CE, model)
    old = os.umask(0)  # the 0600 must come from the writer, not from a umask
    try:
        for name in ("t.csv", "t.csv.gz"):
            path = tmp_path / name
            path.write_text("stale content\n")
            os.chmod(path, 0o644)
            rec.write(path)
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, name
            header, rows = read_table(path)
            assert header == HEADER
            assert len(rows) == len(rec.rows) == 4 * 5 // 2
            for got, want in zip(rows, rec.rows):
                assert len(got) == len(HEADER)
                v, t = int(got[0]), int(got[1])
                assert (v, t) == want[:2] and v <= t
                for i in range(2, 6):
                    assert float(got[i]) == pytest.approx(want[i], rel=1e-8), (name, got)
                assert 0.0 <= float(got[3]) <= 1.0 and 0.0 <= float(got[5]) <= 1.0
        with gzip.open(tmp_path / "t.csv.gz", "rb") as f:
            assert f.read() == (tmp_path / "t.csv").read_bytes()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.csv.gz"]  # no temporary left
    finally:
        os.umask(old)


def test_without_classification_the_accuracy_columns_are_left_out(tmp_path):
    model = torch.nn.Linear(3, 1)
    rec = viper.StalenessRecorder(every=1, max_bytes=1 << 20)
    rec.maybe_keep(1, model)
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(20, 3, generator=g), torch.randn(20, 1, generator=g))
    rec.record(1, batch, batch, torch.nn.functional.mse_loss, model)
    assert rec.rows[0][3] is None and rec.rows[0][5] is None
    rec.write(tmp_path / "r.csv")
    header, rows = read_table(tmp_path / "r.csv")
    assert header == ["version_iteration", "traffic_iteration", "val_loss", "test_loss"] and len(rows) == 1


def test_an_old_version_pays_on_label_swapped_traffic():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    rec = viper.StalenessRecorder(every=50, max_bytes=1 << 20)
    swap = None
    for step in range(1, 201):
        if step > 100:
            swap = (0, 1)  # the concept changes after step 100
        train_step(model, opt, *blobs(64, step, swap))
        rec.maybe_keep(step, model)
        if step % 50 == 0:
            rec.record(step, blobs(300, 5000 + step, swap), blobs(300, 6000 + step, swap), CE, model)
    own, later = rec.loss_of(100, "test", traffic_step=100), rec.loss_of(100, "test", traffic_step=200)
    assert later > own + 1.0, (own, later)
    assert rec.loss_of(100, "val", traffic_step=200) > rec.loss_of(100, "val", traffic_step=100) + 1.0
    # The model retrained after the swap serves today's traffic well; the
    # stale one does not; without drift a version keeps its loss.
    assert rec.loss_of(200, "test") < later
    assert rec.loss_of(50, "test", traffic_step=100) == pytest.approx(
        rec.loss_of(50, "test", traffic_step=50), abs=0.3)


def drive_online_through_a_swap(planner, swapped=lambda step: step > 120, every=10, steps=200):
    """Labels swapped at the steps where `swapped(step)`; the served version
    (and the kept ones the planner asks for) re-measured at every validation
    point, every `every` steps. Returns the recorder and the (step, model
    step) of each publish."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    rec = viper.StalenessRecorder(every=every, max_bytes=1 << 22)
    published = []
    for step in range(1, steps + 1):
        swap = (0, 1) if swapped(step) else None
        x, y = blobs(32, step, swap)
        train_step(model, opt, x, y)
        val = None
        if step % every == 0:
            rec.maybe_keep(step, model)
            rec.record(step, blobs(100, 700 + step, swap), blobs(100, 900 + step, swap), CE, model)
            val = rec.loss_of(step, "val")
        planner.observe(step, train_loss=CE(model(x), y).item(), val_loss=val)
        if step == 50:
            rec.keep(step, model, served=True)
        if val is not None and step > 51:
            planner.observe_served(rec.loss_of())  # the served version on today's validation sample
            for kept in planner.kept_versions():
                try:
                    planner.observe_kept(kept, rec.loss_of(kept, "val"))
                except KeyError:
                    pass  # thinned out of the recorder: not measured, not re-published
        if step > 50 and planner.should_checkpoint(step):
            m = planner.publishing()
            planner.commit(step)
            if m == step:
                rec.keep(step, model, served=True)
            else:
                assert m < step and rec.state_of(m) is not None  # the kept copy is what goes out
                rec.serve(m)
            published.append((step, m))
    return rec, published


def test_the_served_re_measurement_feeds_the_online_planner():
    planner = viper.Planner("online", total_iterations=200, warmup=50, cost=(0.001, 0.002),
                            seconds_per_iteration=0.01, requests={"interval_s": 0.01})
    rec, published = drive_online_through_a_swap(planner)
    # Five validation points in the warm-up: too few for the warm-up fit
    # (train_loss), not for online, which observes val_loss as the served
    # version's re-measurements are.
    assert (planner.report()["metric"], planner.report()["online_metric"]) == ("train_loss", "val_loss")
    assert rec.served_step == (published[-1][1] if published else 50)
    assert planner.report()["checkpoints"] == [step for step, _ in published]


def test_under_the_wall_clock_online_prices_the_lag_a_stall_leaves():
    # The same measured decay; only the wall clock turns it into a price per
    # second of stall (the traffic moves on while the producer stalls).
    reports = {}
    for clock in ("producer", "wall"):
        planner = viper.Planner("online", total_iterations=200, warmup=50, cost=(0.05, 0.06),
                                seconds_per_iteration=0.01, requests={"interval_s": 0.01}, traffic_clock=clock)
        drive_online_through_a_swap(planner)
        reports[clock] = planner.report()
        assert reports[clock]["traffic_clock"] == clock
    assert reports["wall"]["max_decay_per_s"] > 0
    assert reports["producer"]["max_lag_price"] == 0
    assert reports["wall"]["max_lag_price"] > 0
    assert "lag priced" in reports["wall"]["summary"]
    with pytest.raises(ValueError, match="traffic_clock must be producer or wall"):
        viper.Planner("online", total_iterations=200, warmup=50, traffic_clock="sundial")


def test_a_drift_prior_prices_lag_before_any_decay_is_measured():
    # The same run under the wall clock: without a prior nothing prices a
    # stall before the swap (no decay measured yet); with one, the lag is
    # priced from the first re-plan and publishes before the swap are fewer.
    # Validation every 5 steps and a stall of 20 iterations' time: without
    # the prior online publishes twice before the swap.
    before, lag = {}, {}
    for prior in (0.0, 5.0):
        planner = viper.Planner("online", total_iterations=200, warmup=50, cost=(0.2, 0.25),
                                seconds_per_iteration=0.01, requests={"interval_s": 0.01}, drift_prior=prior)
        _, published = drive_online_through_a_swap(planner, every=5, steps=115)  # stop before the swap at 120
        before[prior] = len(published)
        lag[prior] = planner.report()["max_lag_price"]
    assert lag[0.0] == 0 and lag[5.0] > 0, lag
    assert before[5.0] < before[0.0], before
    with pytest.raises(ValueError, match="drift_prior must be in"):
        viper.Planner("online", total_iterations=200, warmup=50, drift_prior=-1)


def test_the_default_drift_prior_needs_the_served_version_re_measured():
    # The default prior (3) prices the lag of a stall once observe_served()
    # has been called; a loop that never re-measures the served version can
    # see no drift, and nothing is priced.
    def planner():
        return viper.Planner("online", total_iterations=200, warmup=50, cost=(0.05, 0.06),
                             seconds_per_iteration=0.01, requests={"interval_s": 0.01})
    measured = planner()
    drive_online_through_a_swap(measured, steps=115)
    assert measured.report()["max_lag_price"] > 0
    blind = planner()
    for step in range(1, 116):
        blind.observe(step, train_loss=1.0 / step, val_loss=1.0 / step if step % 10 == 0 else None)
        if step > 50 and blind.should_checkpoint(step):
            blind.commit(step)
    assert blind.report()["max_lag_price"] == 0


def test_the_wait_guard_publishes_what_the_re_plan_keeps_putting_off():
    # A stall of 100 steps' time in a 300-step run: the re-plan never pays
    # for one, even after the swap at 120 has left the served warm-up model
    # far behind the candidate. The wait guard (default 4) sums the served
    # model's measured excess over the candidate and publishes once it
    # outweighs 4 stalls at the candidate's loss; 0 turns it off.
    runs = {}
    for guard in (None, 0):
        planner = viper.Planner("online", total_iterations=300, warmup=50, cost=(1.0, 1.2),
                                seconds_per_iteration=0.01, requests={"interval_s": 0.01}, wait_guard=guard,
                                record_decisions=True)
        _, published = drive_online_through_a_swap(planner, every=5, steps=300)
        runs[guard] = (planner.report(), published, planner.decisions())
    report, published, decisions = runs[None]
    assert report["wait_guard"] == 4.0 and report["wait_guards"] >= 1, report["summary"]
    assert "published after waiting too long" in report["summary"]
    assert published and published[0][0] > 120, published
    fired = [d for d in decisions if d["waited_too_long"]]
    assert len(fired) == report["wait_guards"]
    assert all(d["publish"] and d["publish_kind"] == "fresh" for d in fired), fired
    assert all(d["candidate_loss"] < d["served_loss"] - d["gate_margin"] for d in fired), fired
    off, off_published, off_decisions = runs[0]
    assert off["wait_guard"] == 0 and off["wait_guards"] == 0
    assert off_published == [], off_published
    assert not any(d["waited_too_long"] for d in off_decisions)
    for bad in (-1, 1001, float("nan")):
        with pytest.raises(ValueError, match="wait_guard must be in"):
            viper.Planner("online", total_iterations=200, warmup=50, wait_guard=bad)


def test_online_re_publishes_a_kept_model_when_the_domain_returns():
    # The labels swap at 100 and back at 200: after 200 the model kept from
    # before 100 measures better on today's traffic than the one trained on
    # the swap, and the planner says to publish it again.
    planner = viper.Planner("online", total_iterations=300, warmup=50, cost=(0.001, 0.002),
                            seconds_per_iteration=0.01, requests={"interval_s": 0.01}, metric="val_loss")
    rec, published = drive_online_through_a_swap(planner, swapped=lambda step: 100 < step <= 200, every=5,
                                                 steps=300)
    report = planner.report()
    assert report["republished"] >= 1, report["summary"]
    assert report["anticipated"] == 0, "one return is no pattern to anticipate"
    assert [m for _, m in published] == report["published"]
    again = [(s, m) for s, m in published if m != s]
    assert all(s > 200 and m <= 100 for s, m in again), again
    with pytest.raises(KeyError, match="not kept"):
        rec.serve(57)


def test_keep_versions_zero_never_re_publishes_and_keeps_nothing():
    # The run above re-publishes with the defaults; with keep_versions=0 the
    # planner asks for no kept model and publishes only fresh ones.
    planner = viper.Planner("online", total_iterations=300, warmup=50, cost=(0.001, 0.002),
                            seconds_per_iteration=0.01, requests={"interval_s": 0.01}, metric="val_loss",
                            keep_versions=0)
    asked = []
    real_kept = planner.kept_versions
    def kept():
        steps = real_kept()
        asked.extend(steps)
        return steps
    planner.kept_versions = kept
    _, published = drive_online_through_a_swap(planner, swapped=lambda step: 100 < step <= 200, every=5,
                                               steps=300)
    report = planner.report()
    assert report["keep_versions"] == 0 and report["republished"] == 0, report["summary"]
    assert asked == [] and report["copies"] == []
    assert all(m == s for s, m in published), published


def test_keep_regime_ends_every_asks_for_a_copy_at_every_validation_point_and_off_at_none():
    for ends in ("every", "off", "predicted"):
        planner = viper.Planner("online", total_iterations=300, warmup=50, cost=(0.001, 0.002),
                                seconds_per_iteration=0.01, requests={"interval_s": 0.01}, metric="val_loss",
                                keep_regime_ends=ends)
        asked = []
        real_should = planner.should_checkpoint
        def should(step, real_should=real_should, planner=planner, asked=asked):
            if planner.copy_at(step):
                asked.append(step)
            return real_should(step)
        planner.should_checkpoint = should
        drive_online_through_a_swap(planner, swapped=lambda step: 100 < step <= 200, every=5, steps=300)
        report = planner.report()
        assert report["keep_regime_ends"] == ends
        assert report["copies"] == asked
        if ends == "every":
            # Every validation point after the warm-up (every 5 steps).
            assert asked == list(range(55, 301, 5)), asked
        else:
            # One return is no cycle: nothing is predicted, nothing copied.
            assert asked == [], asked


def test_a_re_measurement_before_its_steps_observe_is_refused():
    # The re-measurements belong to the latest observation: given before the
    # validation step's observe() they would be filed under the step before
    # (a training step), where the planner never compares them.
    planner = viper.Planner("online", total_iterations=200, warmup=50, cost=(0.001, 0.002),
                            seconds_per_iteration=0.01, requests={"interval_s": 0.01})
    for step in range(1, 61):
        planner.observe(step, train_loss=1.0 / step, val_loss=1.0 / step if step % 10 == 0 else None)
        if step > 50:
            planner.should_checkpoint(step)
    planner.observe(61, train_loss=0.1)
    with pytest.raises(ValueError, match="observe_served: the latest observe\\(\\) \\(step 61\\) had no val_loss"):
        planner.observe_served(0.2)
    with pytest.raises(ValueError, match="observe_kept: the latest observe\\(\\) \\(step 61\\) had no val_loss"):
        planner.observe_kept(50, 0.2)
    for step in range(62, 71):
        planner.observe(step, train_loss=1.0 / step, val_loss=1.0 / step if step % 10 == 0 else None)
    planner.observe_served(0.2)  # after step 70's observe(), a validation point
    planner.observe_kept(50, 0.2)


@pytest.mark.parametrize("kwargs, message", [
    (dict(keep_versions=-1), "keep_versions must be in \\[0, 1000\\]"),
    (dict(keep_versions=2.5), "keep_versions must be a whole number"),
    (dict(keep_regime_ends="sometimes"), "keep_regime_ends must be off, predicted or every, got 'sometimes'"),
])
def test_bad_re_publishing_options_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        viper.Planner("online", total_iterations=300, warmup=50, cost=(0.001, 0.002), **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(every=0, max_bytes=1 << 20), "every must be an integer > 0"),
    (dict(every=-3, max_bytes=1 << 20), "every must be an integer > 0"),
    (dict(every=2.5, max_bytes=1 << 20), "every must be an integer > 0"),
    (dict(every=1, max_bytes=0), "max_bytes must be an integer > 0"),
])
def test_bad_construction_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        viper.StalenessRecorder(**kwargs)


def test_a_bound_too_small_for_one_version_and_other_misuse_raise_value_error(tmp_path):
    model = make_model()
    one = model_bytes(model)
    rec = viper.StalenessRecorder(every=1, max_bytes=one - 1)
    with pytest.raises(ValueError, match=f"too small for one version of this model \\({one} bytes\\)"):
        rec.maybe_keep(1, model)
    assert rec.versions_kept == [] and rec.bytes_kept == 0
    ok = viper.StalenessRecorder(every=1, max_bytes=one)
    ok.maybe_keep(5, model)
    with pytest.raises(ValueError, match="before the newest kept version"):
        ok.maybe_keep(4, model)
    with pytest.raises(ValueError, match="nothing recorded"):
        ok.write(tmp_path / "x.csv")
    batch = blobs(10, 1)
    with pytest.raises(ValueError, match="pair \\(inputs, targets\\)"):
        ok.record(5, batch[0], batch, CE, model)
    ok.record(5, batch, batch, CE, model)
    with pytest.raises(ValueError, match="not after the previous record"):
        ok.record(5, batch, batch, CE, model)
    nan = viper.StalenessRecorder(every=1, max_bytes=one)
    nan.maybe_keep(1, model)
    nan.record(1, batch, batch, lambda out, y: torch.tensor(math.nan), model)
    with pytest.raises(ValueError, match="val_loss of pair \\(1, 1\\) is not finite"):
        nan.write(tmp_path / "n.csv")
    assert not (tmp_path / "n.csv").exists()
