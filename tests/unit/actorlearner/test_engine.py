"""The actor-learner machinery with a scripted env and a numpy policy: rollouts, episode sums, the lag
bound, in-order delivery, clipping, and an actor's error reaching the learner."""

from __future__ import annotations

import queue
import threading
import time

import jax
import numpy as np
import pytest

from rljax.actorlearner.engine import Actor, ActorPool, ParamStore, RestartPolicy, Rollout, RolloutTimeoutError, Schedule
from rljax.env import Box, Discrete
from rljax.host.base import HostSpec, HostStep


class Counter:
    """N envs whose observation is the step count; env i ends its episode every i + 2 steps (terminated
    on even env indices, truncated on odd ones); the reward is the action."""

    def __init__(self, n: int = 3, action_space=None, fail_at: int | None = None):
        self.spec = HostSpec(n, Box(-1e9, 1e9, (1,)), action_space or Discrete(5))
        self.t, self.fail_at, self.closed, self.actions = np.zeros(n, np.int64), fail_at, False, []

    def reset(self, seed: int) -> np.ndarray:
        self.t[:] = 0
        return self.t[:, None].astype(np.float32)

    def step(self, actions: np.ndarray) -> HostStep:
        if self.fail_at is not None and len(self.actions) == self.fail_at:
            raise RuntimeError("the simulator crashed")
        self.actions.append(np.array(actions))
        self.t += 1
        final = self.t[:, None].astype(np.float32)
        ended = self.t % (np.arange(len(self.t)) + 2) == 0
        term, trunc = ended & (np.arange(len(self.t)) % 2 == 0), ended & (np.arange(len(self.t)) % 2 == 1)
        self.t[ended] = 0
        reward = np.asarray(actions, np.float32).reshape(len(self.t), -1)[:, 0]
        return HostStep(self.t[:, None].astype(np.float32), reward, term, trunc, final)

    def close(self) -> None:
        self.closed = True


def _policy(params, obs, key, step):
    """Action = params (a version-tagged constant); log-prob = -step."""
    n = obs.shape[0]
    return np.full(n, params, np.int64), np.full(n, -float(step), np.float32)


def _actor(env, store, out, schedule, stop, num_steps=4, max_lag=0, bounds=None, policy=_policy, restarts=None):
    return Actor(0, env, policy, store, out, schedule, jax.random.key(0), 0, num_steps, max_lag, jax.devices()[0],
                 stop, bounds, restarts)


def test_a_rollout_holds_the_steps_and_the_episodes_that_ended():
    env, out, stop = Counter(), queue.Queue(), threading.Event()
    actor = _actor(env, ParamStore(1), out, Schedule(1), stop, num_steps=4)
    actor.run()
    rollout = out.get_nowait()
    traj = rollout.traj
    assert (rollout.index, rollout.version) == (0, 0)
    assert traj.obs.shape == (4, 3, 1) and traj.action.shape == (4, 3) and traj.extras.tolist()[1] == [-1.0] * 3
    # next_obs is the observation each step reached (the step count of the episode it ended or continued).
    assert traj.next_obs[:, :, 0].tolist() == [[1, 1, 1], [2, 2, 2], [1, 3, 3], [2, 1, 4]]
    # env 0 ends every 2 steps (terminated), env 1 every 3 (truncated), env 2 every 4 (terminated).
    assert traj.terminated[:, 0].tolist() == [False, True, False, True] and not traj.truncated[:, 0].any()
    assert traj.truncated[:, 1].tolist() == [False, False, True, False] and not traj.terminated[:, 1].any()
    assert traj.obs[:, 0, 0].tolist() == [0, 1, 0, 1]  # obs after an end is the next episode's first
    assert sorted(rollout.episodes) == [(2.0, 2), (2.0, 2), (3.0, 3), (4.0, 4)]  # reward 1 a step
    assert rollout.env_step_s.shape == (4,) and rollout.total_s >= rollout.policy_s


def test_rollout_k_waits_for_version_k_minus_the_lag():
    env, out, stop = Counter(), queue.Queue(), threading.Event()
    store = ParamStore(1, version=0)
    actor = _actor(env, store, out, Schedule(3), stop, max_lag=0)
    actor.start()
    first = out.get(timeout=10)
    time.sleep(0.3)
    assert out.empty(), "rollout 1 was collected before version 1 was published"
    store.publish(2, 1)
    second = out.get(timeout=10)
    assert (first.version, second.version) == (0, 1) and second.traj.action[0, 0] == 2
    stop.set()
    actor.join(5)
    assert not actor.is_alive()


def test_the_pool_delivers_in_order_and_reports_an_actors_error():
    out, stop = queue.Queue(), threading.Event()
    pool = ActorPool([], out, stop)
    dummy = lambda k: Rollout(k, 0, 0, None, [], np.zeros(1), 0.0, 0.0)  # noqa: E731
    out.put(dummy(1))
    out.put(dummy(0))
    assert pool.get(0, 5).index == 0 and pool.depth() == 1 and pool.get(1, 5).index == 1
    with pytest.raises(RolloutTimeoutError, match="rollout 2 did not arrive within 0.2 s"):
        pool.get(2, 0.2)
    env = Counter(fail_at=2)
    actor = _actor(env, ParamStore(1), out, Schedule(5), stop)
    pool = ActorPool([actor], out, stop)
    pool.start()
    with pytest.raises(RuntimeError, match=r"actor 0 .* failed: RuntimeError: the envs failed 1 time\(s\) in a row "
                                           r"\(restarts allowed: 0\); the last failure: RuntimeError: the simulator crashed"):
        pool.get(0, 10)
    pool.close()
    assert env.closed and stop.is_set()


def test_box_actions_are_clipped_for_the_env_and_kept_as_sampled():
    env = Counter(n=2, action_space=Box(-1.0, 1.0, (1,)))
    out, stop = queue.Queue(), threading.Event()
    policy = lambda params, obs, key, step: (np.array([[-3.0], [0.5]], np.float32), np.zeros(2, np.float32))  # noqa: E731
    _actor(env, ParamStore(0), out, Schedule(1), stop, num_steps=2, bounds=(np.array([-1.0]), np.array([1.0])),
           policy=policy).run()
    assert env.actions[0].tolist() == [[-1.0], [0.5]]
    assert out.get_nowait().traj.action[0].tolist() == [[-3.0], [0.5]]


def test_the_schedule_hands_out_each_rollout_once():
    schedule, got = Schedule(200), []

    def claim():
        while (k := schedule.claim()) is not None:
            got.append(k)

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(200))


def test_a_store_that_keeps_two_versions_hands_out_the_newest_computed_one(monkeypatch):
    """The learner publishes an update's params before they are computed; an actor allowed the older
    version acts with it rather than wait for the update, and one that needs the newest waits for it."""
    from rljax.actorlearner import engine

    monkeypatch.setattr(engine, "computed", lambda params: params != "in flight")
    stop = threading.Event()
    store = ParamStore("v0", 0, keep=2)
    store.publish("in flight", 1)
    assert store.wait_for(0, stop) == ("v0", 0)
    assert store.wait_for(1, stop) == ("in flight", 1)  # the only one it may act with
    store.publish("v2", 2)  # version 0 leaves; the newest is computed
    assert store.wait_for(1, stop) == ("v2", 2)
    single = ParamStore("v0", 0)
    single.publish("in flight", 1)
    assert single.wait_for(0, stop) == ("in flight", 1)  # keep=1 (no lag): the newest, always
    with pytest.raises(ValueError, match="keep=3"):
        ParamStore("v0", 0, keep=3)


def test_computed_params_are_told_from_those_still_computing():
    from rljax.actorlearner.engine import computed

    x = jax.numpy.ones(3)
    x.block_until_ready()
    assert computed({"w": x, "step": 3}) and computed("params")


def test_a_stopped_store_wait_returns_none():
    stop = threading.Event()
    stop.set()
    assert ParamStore("p", 0).wait_for(5, stop) is None
    assert ParamStore("p", 5).wait_for(5, stop) == ("p", 5)


def test_failed_envs_are_replaced_and_the_interrupted_rollout_collected_again():
    """The env fails at its 7th step (rollout 1's third, after its second step ended the episodes of
    envs 0 and 1): a new batch replaces it, rollout 1 is collected again from its start, and the 3
    episodes in flight plus the 2 that ended in the discarded steps are counted as lost."""
    first = Counter(fail_at=6)
    made = []
    remake = lambda: made.append(Counter()) or made[-1]  # noqa: E731
    out, stop = queue.Queue(), threading.Event()
    _actor(first, ParamStore(1), out, Schedule(3), stop, max_lag=10,
           restarts=RestartPolicy(remake, backoff_s=0.01)).run()
    rollouts = [out.get_nowait() for _ in range(3)]
    assert [r.index for r in rollouts] == [0, 1, 2] and first.closed and len(made) == 1
    assert [(r.env_restarts, r.lost_episodes) for r in rollouts] == [(0, 0), (1, 5), (0, 0)]
    assert rollouts[1].traj.obs[0, :, 0].tolist() == [0, 0, 0]  # from the new batch's first observations
    assert len(made[0].actions) == 8


def test_envs_that_keep_failing_stop_the_run_after_the_allowed_restarts():
    def remake():
        raise ConnectionError("the env server is down")

    out, stop = queue.Queue(), threading.Event()
    actor = _actor(Counter(fail_at=0), ParamStore(1), out, Schedule(3), stop,
                   restarts=RestartPolicy(remake, max_failures=2, backoff_s=0.01))
    actor.run()
    assert stop.is_set() and out.empty()
    assert "the envs failed 3 time(s) in a row (restarts allowed: 2); the last failure: ConnectionError: the env " \
           "server is down" in str(actor.error)


def test_the_back_off_doubles_up_to_its_cap():
    policy = RestartPolicy(lambda: None, backoff_s=0.5, max_backoff_s=3.0)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


class _SlowlyFailing(Counter):
    """A Counter whose envs hang a while, then fail, at the step ``fail_at``; or fail at every reset."""

    def __init__(self, fail_at=None, on_reset=False):
        super().__init__(fail_at=fail_at)
        self.on_reset = on_reset

    def reset(self, seed):
        if self.on_reset:
            raise ConnectionError("the server went away")
        return super().reset(seed)

    def step(self, actions):
        if self.fail_at is not None and len(self.actions) == self.fail_at:
            time.sleep(0.3)
        return super().step(actions)


def _pool_actor(index, env, store, out, schedule, stop):
    return Actor(index, env, _policy, store, out, schedule, jax.random.key(index), 0, 4, 0, jax.devices()[0], stop,
                 droppable=True, address=f"server-{index}")


def test_an_actor_whose_envs_go_away_gives_its_rollout_back_and_a_survivor_collects_it():
    """A pool actor (droppable) whose server dies mid-rollout gives the rollout's number back; the other actor,
    which had already collected every other number and was waiting, collects it; the run is not stopped. One
    whose server fails at its first reset just leaves."""
    out, stop, schedule, store = queue.Queue(), threading.Event(), Schedule(3), ParamStore(1, version=10)
    dying, healthy, never = _SlowlyFailing(fail_at=2), Counter(), _SlowlyFailing(on_reset=True)
    actors = [_pool_actor(0, dying, store, out, schedule, stop)]
    pool = ActorPool(actors, out, stop)
    pool.start()
    time.sleep(0.05)  # the dying actor claims rollout 0 first
    pool.add(_pool_actor(1, healthy, store, out, schedule, stop))
    pool.add(_pool_actor(2, never, store, out, schedule, stop))
    got = [pool.get(k, 10) for k in range(3)]
    assert [r.index for r in got] == [0, 1, 2] and got[0].actor == 1  # rollout 0 came from the survivor
    assert not stop.is_set() and all(a.error is None for a in actors + pool.actors)
    assert "the envs failed 1 time(s) in a row" in pool.actors[0].dropped and dying.closed
    # its 3 envs' episodes in flight, and the one that ended in the 2 discarded steps (env 0 ends every 2)
    assert pool.actors[0].lost_when_dropped == 3 + 1
    assert "the server went away" in pool.actors[2].dropped and never.closed
    pool.close()
    assert schedule.finished()
