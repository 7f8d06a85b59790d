"""The autoscaled actor count (:mod:`rljax.actorlearner.autoscale`): the controller's rule by hand, its
band and bounds; an actor retired between rollouts leaves no rollout number behind; and a host run whose
env steps turn slow, then fast again, gains actors and gives them back, logging each decision."""

from __future__ import annotations

import json
import queue
import threading

import pytest

from rljax.actorlearner.autoscale import Scaler, ScaleRule
from rljax.actorlearner.engine import ActorPool, ParamStore, Schedule
from rljax.actorlearner.learner import HostOptions, train_host
from rljax.agents.ppo import PPOConfig
from rljax.host.sources import make_host_env
from benchmarks.autoscale import Delayed
from tests.unit.actorlearner.test_engine import Counter, _actor


def test_the_rule_by_hand():
    s = Scaler(ScaleRule(1, 3, window=3, warmup=1, hold=2), count=1)
    assert s.observe(0.1, 0.0, 1.0) is None  # warm-up: left out
    assert s.observe(0.5, 0.05, 1.0) is None and s.observe(0.6, 0.1, 1.0) is None  # the window is not full
    up = s.observe(0.7, 0.15, 1.0)  # mean busy 0.6 < 0.8, mean idle 0.1 < 0.2: the learner waits on busy actors
    assert (up.change, up.to) == (1, 2) and "busy 0.60 < 0.8" in up.reason and abs(up.actor_idle - 0.1) < 1e-9
    assert up.updates_per_s == 1.0
    s.applied(up)
    # The cool-down: a new window at 2; it paid off (1.6 updates/s >= 1 x (1 + 0.25 / 1)), and the learner still
    # waits: a third actor.
    assert s.observe(0.5, 0.0, 0.6) is None and s.observe(0.5, 0.0, 0.6) is None
    third = s.observe(0.5, 0.0, 0.675)
    assert third.to == 3 and abs(third.updates_per_s - 3 / 1.875) < 1e-9
    s.applied(third)
    # The third did not pay off (1.64 < 1.6 x (1 + 0.25 / 2) = 1.8): retired, and 3 is held off for 2 windows.
    s.observe(0.5, 0.0, 0.61), s.observe(0.5, 0.0, 0.61)
    back = s.observe(0.5, 0.0, 0.61)
    assert (back.change, back.to) == (-1, 2) and "actor 3 did not pay off" in back.reason and "held at 2" in back.reason
    s.applied(back)
    assert [s.observe(0.5, 0.0, 0.6) for _ in range(4)] == [None] * 4  # held (6 updates from the decision)
    s.observe(0.5, 0.0, 0.6)
    assert s.observe(0.5, 0.0, 0.6).to == 3  # the hold is over: try again
    s.applied(third)
    s.observe(0.5, 0.0, 0.61), s.observe(0.5, 0.0, 0.61)
    s.applied(s.observe(0.5, 0.0, 0.61))  # did not pay off again: held at 2 (busy 0.5 then)
    assert [s.observe(0.4, 0.0, 0.6) for _ in range(3)] == [None] * 3  # 0.4 is not 0.15 below 0.5: held
    s.observe(0.2, 0.0, 0.6), s.observe(0.2, 0.0, 0.6)
    assert s.observe(0.2, 0.0, 0.6).to == 3  # mean 0.27: the envs got slower, the hold is released
    s = Scaler(ScaleRule(1, 3, window=3, warmup=0), count=3)
    # The band: 3 actors busy 0.6 (1.8 actors' worth of collecting) do not fit in 2 at 0.75 (1.5): stay.
    assert [s.observe(0.95, 0.4, 1.0) for _ in range(4)] == [None] * 4
    # 3 actors busy 0.5 (1.5) fit in 2 at 0.75, whether the learner is busy (they wait for room in the queue)
    # or not (they wait for params: the lag bound limits the rollouts in flight): retire one.
    s.reset_window()
    s.observe(0.95, 0.5, 1.0), s.observe(0.95, 0.5, 1.0)
    down = s.observe(0.95, 0.5, 1.0)
    assert (down.change, down.to) == (-1, 2) and "2 at most 0.75 busy collect as much" in down.reason
    s.applied(down)
    s.observe(0.3, 0.8, 1.0), s.observe(0.3, 0.8, 1.0)
    assert s.observe(0.3, 0.8, 1.0).to == 1
    low = Scaler(ScaleRule(2, 4, window=1, warmup=0), count=2)
    assert low.observe(0.99, 0.99, 1.0) is None  # at the bottom
    top = Scaler(ScaleRule(1, 2, window=1, warmup=0), count=2)
    assert top.observe(0.1, 0.0, 1.0) is None  # at the top


def test_rollouts_waiting_for_a_busy_learner_retire_an_actor_and_a_retirement_that_slows_the_run_is_undone():
    s = Scaler(ScaleRule(1, 4, window=2, warmup=0, hold=2), count=3)
    # Actors that look busy (0.9: they share the CPU with the learner), but rollouts wait in the queue all along
    # while the learner works: retire one.
    assert s.observe(0.97, 0.1, 1.0, 2.0) is None
    down = s.observe(0.97, 0.1, 1.0, 1.0)
    assert down.to == 2 and "queue depth 1.50 >= 1" in down.reason
    s.applied(down)
    # Its probation: 0.8 updates/s against 1.0 is more than 1/4 of 1/3 slower: add it back, held at >= 3.
    s.observe(0.97, 0.1, 1.25, 2.0)
    back = s.observe(0.97, 0.1, 1.25, 2.0)
    assert (back.change, back.to) == (1, 3) and "retiring actor 3 slowed the run" in back.reason
    s.applied(back)
    assert [s.observe(0.97, 0.1, 1.0, 2.0) for _ in range(3)] == [None] * 3  # the floor holds for 2 windows
    assert s.observe(0.97, 0.1, 1.0, 2.0).to == 2  # and then it may try again
    s = Scaler(ScaleRule(1, 4, window=2, warmup=0), count=3)
    assert s.observe(0.9, 0.1, 1.0, 2.0) is None and s.observe(0.9, 0.1, 1.0, 2.0) is None  # the learner waits


def test_a_held_floor_ends_even_when_a_held_ceiling_is_released_early_and_hold_zero_holds_nothing():
    s = Scaler(ScaleRule(1, 4, window=1, warmup=0, hold=2), count=2)
    s.applied(s.observe(0.97, 0.1, 1.0, 2.0))  # queue full, learner busy: 2 -> 1
    s.applied(s.observe(0.97, 0.1, 2.0, 2.0))  # half the updates/s: undone, floor 2 held for 2 updates
    assert s.count == 2
    assert s.observe(0.97, 0.1, 1.0, 2.0) is None  # held
    assert s.observe(0.97, 0.1, 1.0, 2.0).to == 1  # the floor's hold is over
    s = Scaler(ScaleRule(1, 3, window=1, warmup=0, hold=0), count=1)
    s.applied(s.observe(0.5, 0.0, 1.0))  # up to 2
    back = s.observe(0.5, 0.0, 1.0)  # no gain: undone, but hold=0 holds nothing
    s.applied(back)
    assert back.to == 1 and s.observe(0.5, 0.0, 1.0).to == 2


@pytest.mark.parametrize("kwargs, message", [
    (dict(min_actors=0, max_actors=2), "min_actors=0: must be an integer >= 1"),
    (dict(min_actors=3, max_actors=2), "min_actors=3 is more than max_actors=2"),
    (dict(min_actors=1, max_actors=2, window=0), "window=0"),
    (dict(min_actors=1, max_actors=2, learner_busy_low=1.5), r"learner_busy_low=1.5: must be in \(0, 1\]"),
    (dict(min_actors=1, max_actors=2, actor_busy_target=0.85), "must be below 1 - actor_idle_low = 0.8"),
])
def test_bad_rules_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScaleRule(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_actors=1, max_actors=4, max_policy_lag=0), "needs max_policy_lag >= 1"),
    (dict(num_actors=5, max_actors=4), "num_actors=5 .* must lie within min_actors=5 and max_actors=4"),
    (dict(num_actors=1, min_actors=2, max_actors=4), "num_actors=1 .* must lie within min_actors=2"),
    (dict(num_actors=1, scale_window=0), "scale_window=0"),
])
def test_bad_autoscaling_layouts_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HostOptions(**kwargs)


def test_a_retired_actor_finishes_its_rollout_and_claims_no_other():
    out, stop, schedule = queue.Queue(1), threading.Event(), Schedule(6)  # actors wait for room: none runs ahead
    store = ParamStore(1, version=10)
    envs = [Counter(), Counter()]
    pool = ActorPool([_actor(envs[0], store, out, schedule, stop)], out, stop)
    pool.spawn = lambda a: _actor(envs[a], store, out, schedule, stop)
    pool.start()
    first = pool.get(0, 10)
    pool.add(pool.spawn(1))
    retired = pool.retire()
    assert retired is pool.actors[1] and len(pool.active) == 1
    got = [first] + [pool.get(k, 10) for k in range(1, 6)]  # every number arrives: none was claimed and dropped
    assert [r.index for r in got] == list(range(6))
    retired.join(5)
    assert not retired.is_alive() and envs[1].closed  # it closed its envs as it left
    pool.close()
    assert envs[0].closed


def test_a_run_whose_env_turns_slow_then_fast_gains_actors_and_gives_them_back():
    # Slow, a rollout takes 16 x 8 ms, several times an update; fast, a fraction of one.
    config = PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 48, num_minibatches=2,
                       num_epochs=4, hidden_sizes=(64, 64))
    phase, events, made = {"delay_s": 0.008}, [], []

    def make(actor):
        made.append(Delayed(make_host_env("gymnasium/CartPole-v1", 4, max_episode_steps=50), phase))
        return made[-1]

    def on_row(row):
        if row["updates"] == 16:  # the env becomes fast: each actor's rollout no longer keeps the learner waiting
            phase["delay_s"] = 0.0

    options = HostOptions(num_actors=1, max_actors=3, scale_window=3, max_policy_lag=1, queue_size=2)
    result = train_host(config, make, options, on_row, on_event=events.append)
    counts = [r["host/actors"] for r in result.rows]
    assert len(result.rows) == 48 and counts[0] == 1 and max(counts[:16]) == 3  # grew while the env was slow
    assert min(counts[16:]) < 3 and sum(r["host/scale"] for r in result.rows) == counts[-1] - 1
    ups = [e for e in events if e["change"] > 0]
    downs = [e for e in events if e["change"] < 0]
    assert len(ups) >= 2 and downs and all(e["update"] > 16 for e in downs)
    assert all(e["update"] <= 16 for e in ups[:2]) and "the learner waited for rollouts" in ups[0]["reason"]
    assert all(json.dumps(e) for e in events) and all(env.env._env.closed for env in made)
