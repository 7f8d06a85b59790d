"""A host run's run directory: rows per update and per chunk, the layout in the manifest, checkpoints,
a stop on SIGTERM that saves, a resume that continues from the saved update, and a chunk row computed
by hand."""

from __future__ import annotations

import dataclasses

import json
import os
import signal
import threading
import time
from unittest import mock

import numpy as np
import pytest

from rljax.actorlearner import run as run_module
from rljax.actorlearner.learner import HostOptions
from rljax.actorlearner.run import _chunk_row, group_rows, run_host, saved_host, updates_per_chunk
from rljax.agents.ppo import PPOConfig
from rljax.store.checkpoint import Checkpointer
from rljax.store.rundir import ConfigMismatchError, run_record
from rljax.store.status import read_status, request_stop
from rljax.training.options import RunOptions
from tests.support.runs import leaves

CONFIG = PPOConfig(env="gymnasium/CartPole-v1", num_envs=4, num_steps=32, total_timesteps=4 * 32 * 6,
                   updates_per_chunk=2, num_minibatches=2, num_epochs=1, hidden_sizes=(16,))
LAYOUT = HostOptions(max_policy_lag=0, queue_size=3)


_AFTER = run_module._Session.after_update


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_directory_has_a_row_per_update_and_per_chunk_and_a_resume_extends_it(tmp_path, monkeypatch):
    run = tmp_path / "run"
    first = run_host(CONFIG, RunOptions(run_dir=run, checkpoint_every=1, quiet=True), LAYOUT)
    assert first.updates == 6 and first.preempted is None
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["algorithm"] == "PPOConfig" and manifest["host"]["queue_size"] == 3
    assert manifest["plan"] == {"updates_per_chunk": 2, "num_updates": 6, "env_steps_per_update": 128,
                                "log_every": 1, "processes": 1}
    assert json.loads((run / "config.json").read_text())["env"] == "gymnasium/CartPole-v1"
    lines, chunks = _rows(run / "metrics.jsonl"), _rows(run / "chunks.jsonl")
    assert [r["env_steps"] for r in lines] == [128 * u for u in range(1, 7)]
    assert [r["updates"] for r in chunks] == [2, 4, 6] and all(r["host/policy_lag"] == 0 for r in chunks)
    assert Checkpointer(run, read_only=True).steps() == [256, 512, 768]
    record = run_record(run)
    assert record.algorithm == "PPOConfig" and record.source == "checkpoint 768"
    assert saved_host(run) == HostOptions(max_policy_lag=0, queue_size=3)
    status = read_status(run)  # what rljax status shows
    assert status["state"] == "finished" and status["env_steps"] == status["total_env_steps"] == 768
    assert status["last_checkpoint_env_steps"] == 768 and status["chunks_done"] == status["num_chunks"] == 3

    longer = PPOConfig(**{**CONFIG.__dict__, "total_timesteps": 4 * 32 * 10})
    second = run_host(longer, RunOptions(run_dir=run, resume=True, checkpoint_every=1, quiet=True))
    assert second.updates == 10 and [r["updates"] for r in second.rows] == [7, 8, 9, 10]
    assert [r["env_steps"] for r in _rows(run / "metrics.jsonl")] == [128 * u for u in range(1, 11)]
    assert [r["updates"] for r in _rows(run / "chunks.jsonl")] == [2, 4, 6, 8, 10]
    assert read_status(run)["env_steps"] == read_status(run)["total_env_steps"] == 1280
    assert json.loads((run / "manifest.json").read_text())["host"]["queue_size"] == 3  # kept by the resume

    with pytest.raises(ConfigMismatchError, match="learning_rate"):
        run_host(PPOConfig(**{**longer.__dict__, "learning_rate": 1e-3}), RunOptions(run_dir=run, resume=True,
                                                                                    quiet=True))

    # A resume on another number of processes (each update learning from another count of env steps) is
    # refused before anything is written: it used to run updates and log rows whose env steps went backwards.
    before = {f.relative_to(run): f.read_bytes() for f in run.rglob("*") if f.is_file() and ".lock" not in f.name}
    monkeypatch.setattr(run_module, "steps_per_update", lambda config: 2 * config.env_steps_per_update)
    even_longer = PPOConfig(**{**CONFIG.__dict__, "total_timesteps": 4 * 32 * 20})
    with pytest.raises(ConfigMismatchError, match=r"a run trained by 1: it learned from 128 env steps an update .* "
                                                  r"this job would from 256; resume it on 1 process"):
        run_host(even_longer, RunOptions(run_dir=run, resume=True, quiet=True))
    after = {f.relative_to(run): f.read_bytes() for f in run.rglob("*") if f.is_file() and ".lock" not in f.name}
    assert after == before


@pytest.mark.timeout(300)
def test_rljax_stop_stops_a_host_run_after_a_saved_update(tmp_path):
    """``rljax stop RUN_DIR``'s request (RUN_DIR/stop.request) is taken at a chunk's end: the next
    update is saved and the run ends preempted, as after SIGTERM; status.json says so throughout."""
    run = tmp_path / "run"
    config = PPOConfig(**{**CONFIG.__dict__, "total_timesteps": 4 * 32 * 400, "updates_per_chunk": 1})
    seen = []

    def stop_after_two_rows():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            path = run / "metrics.jsonl"
            if path.exists() and len(path.read_text().splitlines()) >= 2:
                seen.append(read_status(run)["state"])
                request_stop(run, "a test")
                return
            time.sleep(0.05)

    threading.Thread(target=stop_after_two_rows, daemon=True).start()
    stopped = run_host(config, RunOptions(run_dir=run, checkpoint_interval_s=3600, quiet=True), LAYOUT)
    assert seen == ["running"] and stopped.preempted.startswith("rljax stop") and 3 <= stopped.updates < 400
    status = read_status(run)
    assert status["state"] == "preempted" and status["env_steps"] == stopped.updates * 128
    assert Checkpointer(run, read_only=True).steps()[-1] == stopped.updates * 128 == status["last_checkpoint_env_steps"]
    assert not (run / "stop.request").exists()


@pytest.mark.timeout(300)
def test_sigterm_stops_after_a_saved_update_and_the_resume_starts_from_its_params(tmp_path):
    run = tmp_path / "run"
    config = PPOConfig(**{**CONFIG.__dict__, "total_timesteps": 4 * 32 * 400, "updates_per_chunk": 1})

    def signal_after_two_rows():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            path = run / "metrics.jsonl"
            if path.exists() and len(path.read_text().splitlines()) >= 2:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.05)

    threading.Thread(target=signal_after_two_rows, daemon=True).start()
    stopped = run_host(config, RunOptions(run_dir=run, checkpoint_interval_s=3600, quiet=True), LAYOUT)
    assert stopped.preempted == "SIGTERM" and 2 <= stopped.updates < 400
    reader = Checkpointer(run, read_only=True)
    (step,) = reader.steps()  # only the stop's save: the interval never came due
    _, meta = reader.read(step)
    assert meta["updates"] == stopped.updates and step == 128 * stopped.updates
    np.testing.assert_array_equal(np.concatenate([x.ravel() for x in leaves(stopped.params)]),
                                  np.concatenate([x.ravel() for x in leaves(_restored_params(run, config))]))
    shorter = PPOConfig(**{**config.__dict__, "total_timesteps": 128 * (stopped.updates + 2)})
    resumed = run_host(shorter, RunOptions(run_dir=run, resume=True, quiet=True))
    assert [r["updates"] for r in resumed.rows] == [stopped.updates + 1, stopped.updates + 2]


def _restored_params(run, config):
    """The params checkpoint restore gives for ``run`` on a template built as the learner builds it."""
    import jax

    from rljax.actorlearner.learner import host_functions
    from rljax.host.sources import make_host_env

    env = make_host_env(config.env, config.num_envs)
    env.close()
    network, _, _, optimizer = host_functions(config, env.spec)
    params = network.init(jax.random.key(1), np.zeros((1, *env.spec.obs_shape), env.spec.obs_dtype))
    checkpointer = Checkpointer(run)
    try:
        state, _, _ = checkpointer.restore({"params": params, "opt_state": optimizer.init(params)})
    finally:
        checkpointer.close()
    return jax.device_get(state["params"])


def test_one_actor_at_lag_0_resumes_to_the_same_bits_as_a_run_never_stopped(tmp_path):
    """The checkpoint holds the envs' state (pickled Gymnasium envs), the observations and the episodes
    in flight: a run stopped after 3 updates and resumed to 7 equals one that ran 7, params and rows."""
    config = PPOConfig(**{**CONFIG.__dict__, "total_timesteps": 4 * 32 * 7, "anneal_lr": False,
                          "updates_per_chunk": 1})
    whole = run_host(config, RunOptions(run_dir=tmp_path / "whole", quiet=True), LAYOUT)
    run = tmp_path / "cut"
    run_host(PPOConfig(**{**config.__dict__, "total_timesteps": 4 * 32 * 3}), RunOptions(run_dir=run, quiet=True),
             LAYOUT)
    resumed = run_host(config, RunOptions(run_dir=run, resume=True, quiet=True))
    assert resumed.updates == 7 and len(resumed.rows) == 4
    assert all(np.array_equal(a, b) for a, b in zip(leaves(whole.params), leaves(resumed.params)))
    measured = ("sps", "wall_time_s", "host/")
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(measured)} for r in rows]  # noqa: E731
    assert strip(_rows(run / "metrics.jsonl")) == strip(_rows(tmp_path / "whole" / "metrics.jsonl"))
    assert sum(r["episodes"] for r in _rows(run / "metrics.jsonl")) > 0


def test_updates_per_chunk_defaults_to_a_tenth_of_the_run():
    assert updates_per_chunk(CONFIG) == 2
    assert updates_per_chunk(PPOConfig(**{**CONFIG.__dict__, "updates_per_chunk": 0})) == 1  # ceil(6 / 10)
    assert updates_per_chunk(PPOConfig(**{**CONFIG.__dict__, "updates_per_chunk": 0,
                                          "total_timesteps": 128 * 95})) == 10


def test_a_chunk_row_by_hand():
    def line(updates, episodes, ret, lag, p50, p99, actor, loss):
        return {"updates": updates, "env_steps": 100 * updates, "episodes": episodes, "episode_return_mean": ret,
                "episode_length_mean": None if ret is None else 2 * ret, "wall_time_s": 10.0 + updates,
                "sps": 1.0, "policy_loss": loss, "host/policy_lag": lag, "host/env_step_p50_ms": p50,
                "host/env_step_p99_ms": p99, "host/actor": actor, "host/env_restarts": updates // 3,
                "host/lost_episodes": updates // 3 * 4}

    lines = [line(1, 2, 10.0, 0, 1.0, 3.0, 0, 0.5), line(2, 0, None, 1, 4.0, 5.0, 1, 1.5),
             line(3, 3, 20.0, 1, 2.0, 9.0, 0, 1.0)]
    row = _chunk_row(lines, wall_time_s=13.0, start_wall_s=10.0, steps_per_update=100)
    assert row["episodes"] == 5 and row["episode_return_mean"] == pytest.approx((2 * 10 + 3 * 20) / 5)
    assert row["episode_length_mean"] == pytest.approx((2 * 20 + 3 * 40) / 5)
    assert row["sps"] == pytest.approx(300 / 3.0) and row["policy_loss"] == pytest.approx(1.0)
    assert (row["env_steps"], row["updates"], row["wall_time_s"]) == (300, 3, 13.0)
    assert row["host/policy_lag"] == 1 and row["host/env_step_p99_ms"] == 9.0
    assert row["host/slowest_actor"] == 1 and "host/actor" not in row
    assert (row["host/env_restarts"], row["host/lost_episodes"]) == (1, 4)
    no_episodes = _chunk_row(lines[1:2], 12.0, 11.0, 100)
    assert no_episodes["episodes"] == 0 and no_episodes["episode_return_mean"] is None


def test_log_every_groups_the_updates_of_each_chunk_as_a_chunk_row_does(tmp_path):
    """3 updates per chunk, --log-every 2: rows of updates [1-2], [3], [4-5], [6], each the chunk-row
    summary of the same updates' rows in a run that logs every update (the synchronous mode: the
    same updates)."""
    config = PPOConfig(**{**CONFIG.__dict__, "updates_per_chunk": 3})
    every = run_host(config, RunOptions(run_dir=tmp_path / "every", quiet=True), LAYOUT)
    run_host(config, RunOptions(run_dir=tmp_path / "two", quiet=True, log_every=2), LAYOUT)
    assert len(every.rows) == 6 and len(_rows(tmp_path / "every" / "metrics.jsonl")) == 6
    grouped = _rows(tmp_path / "two" / "metrics.jsonl")
    assert [r["updates"] for r in grouped] == [2, 3, 5, 6]
    for row, group in zip(grouped, ([0, 1], [2], [3, 4], [5])):
        lines = [every.rows[i] for i in group]
        assert row["episodes"] == sum(r["episodes"] for r in lines)
        assert row["policy_loss"] == pytest.approx(np.mean([r["policy_loss"] for r in lines]), rel=1e-6)
        assert row["host/slowest_actor"] == 0 and "host/actor" not in row
    assert json.loads((tmp_path / "two" / "manifest.json").read_text())["plan"]["log_every"] == 2
    assert len(_rows(tmp_path / "two" / "chunks.jsonl")) == 2


class _HangingGym:
    """A Gymnasium batch whose steps block, once armed, until the stall report is in the run directory."""

    armed = False

    def __init__(self, run_dir):
        from rljax.host.gymnasium_env import GymnasiumEnv

        self.inner, self.run_dir = GymnasiumEnv("CartPole-v1", CONFIG.num_envs), run_dir
        self.spec, self.get_state = self.inner.spec, lambda: None

    def reset(self, seed):
        return self.inner.reset(seed)

    def step(self, action):
        deadline = time.monotonic() + 60
        while _HangingGym.armed and not list(self.run_dir.glob("stall-*.txt")) and time.monotonic() < deadline:
            time.sleep(0.05)
        _HangingGym.armed = False
        return self.inner.step(action)

    def close(self):
        self.inner.close()


def test_a_stalled_chunk_gets_one_warning_with_the_actors_stacks(tmp_path, capsys):
    """The JAX path's stall watchdog: after two chunks of one update, the envs block in ``step``
    until the report is written; it names the phase and holds the actor thread's stack."""
    run = tmp_path / "run"
    _HangingGym.armed = False

    def arm(updates, *rest):
        _HangingGym.armed = updates == 2
        return None

    config = PPOConfig(**{**CONFIG.__dict__, "updates_per_chunk": 1, "total_timesteps": 4 * 32 * 4})
    with mock.patch("rljax.actorlearner.run._Session.after_update", autospec=True,
                    side_effect=lambda self, *a: (arm(*a), _AFTER(self, *a))[1]):
        result = run_host(config, RunOptions(run_dir=run, quiet=True, stall_factor=3.0, stall_min_s=1.0),
                          LAYOUT, make_env=lambda actor: _HangingGym(run))
    assert result.updates == 4
    (report,) = run.glob("stall-*.txt")
    text = report.read_text()
    assert "phase: learning: 2 of 4 updates done, waiting for the next rollout" in text, text[:2000]
    assert "--- thread rljax-actor-0" in text and "in step\n" in text
    warnings = [line for line in capsys.readouterr().err.splitlines() if "no chunk finished" in line]
    assert len(warnings) == 1 and str(report) in warnings[0]


def test_group_rows_of_one_update_are_the_lines_themselves():
    lines = [{"updates": 1, "wall_time_s": 1.0}]
    assert group_rows(lines, 1, 0.0, 100) is lines


def test_mlflow_gets_every_row_and_a_resume_continues_the_same_run(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    run, store = tmp_path / "run", tmp_path / "mlruns"
    run_host(CONFIG, RunOptions(run_dir=run, quiet=True, mlflow=str(store)), LAYOUT)
    longer = PPOConfig(**{**CONFIG.__dict__, "total_timesteps": 4 * 32 * 8})
    run_host(longer, RunOptions(run_dir=run, resume=True, quiet=True, mlflow=str(store)))
    (run_id,) = {ids[""] for name, ids in json.loads((run / "trackers.json").read_text()).items() if name == "MLflow"}
    client = mlflow.MlflowClient(store.as_uri())
    logged = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "policy_loss"))
    assert [step for step, _ in logged] == [128 * u for u in range(1, 9)]
    expected = [r["policy_loss"] for r in _rows(run / "metrics.jsonl")]
    np.testing.assert_allclose([v for _, v in logged], expected, rtol=1e-6)
    assert client.get_run(run_id).info.status == "FINISHED"
    lag = sorted(m.step for m in client.get_metric_history(run_id, "host/policy_lag"))
    assert lag == [128 * u for u in range(1, 9)]


def test_an_actor_that_gives_up_ends_the_run_with_its_updates_saved(tmp_path):
    """The envs fail for good after 5 rollouts (a raise, then every remake fails): the run raises the
    actor's error, and the updates it made before are logged and checkpointed first."""
    from rljax.host.gymnasium_env import GymnasiumEnv

    class Breaks:
        def __init__(self):
            self.inner, self.steps = GymnasiumEnv("CartPole-v1", CONFIG.num_envs), 0
            self.spec = self.inner.spec

        def reset(self, seed):
            return self.inner.reset(seed)

        def step(self, actions):
            self.steps += 1
            if self.steps > 5 * CONFIG.num_steps:
                raise ConnectionError("the simulator went away")
            return self.inner.step(actions)

        def close(self):
            self.inner.close()

    made = []

    def make_env(actor):
        made.append(actor)
        if len(made) > 1:
            raise ConnectionError("still down")
        return Breaks()

    run = tmp_path / "run"
    config = PPOConfig(**{**CONFIG.__dict__, "total_timesteps": 4 * 32 * 20, "updates_per_chunk": 4})
    with pytest.raises(RuntimeError, match=r"actor 0 .*failed 2 time\(s\) in a row"):
        run_host(config, RunOptions(run_dir=run, checkpoint_interval_s=3600, quiet=True),
                 HostOptions(max_policy_lag=0, max_env_restarts=1, restart_backoff_s=0.01), make_env)
    assert [r["updates"] for r in _rows(run / "chunks.jsonl")] == [4, 5]  # the partial chunk logged too
    assert Checkpointer(run, read_only=True).steps() == [128 * 5]


@pytest.mark.parametrize("processes, index, saved, expected", [
    (1, 0, "one", "one"),  # a one-process run's envs
    (2, 1, ["p0", "p1"], "p1"),  # each process of a job takes its own
    (2, 0, ["p0", "p1"], "p0"),
    (3, 2, ["p0", "p1"], None),  # saved by another number of processes: the episodes start over
    (2, 0, "one", None),
    (1, 0, ["p0", "p1"], None),
    (2, 1, None, None),
])
def test_a_resume_takes_its_own_process_envs(processes, index, saved, expected, monkeypatch):
    from rljax.actorlearner.engine import EnvSnapshot

    snaps = {name: EnvSnapshot(name.encode(), np.zeros(2), np.ones(2), np.arange(2)) for name in ("one", "p0", "p1")}
    encode = lambda s: s if s is None else ([run_module._encode(snaps[x]) for x in s] if isinstance(s, list)  # noqa: E731
                                            else run_module._encode(snaps[s]))
    monkeypatch.setattr(run_module.distributed, "process_count", lambda: processes)
    monkeypatch.setattr(run_module.distributed, "process_index", lambda: index)
    got = run_module._own_envs(encode(saved))
    assert (got.env_state.decode() if got is not None else None) == expected


# ------------------------------------------------------------------------------------------------
# The done line: the last return measured, even when the last updates ended no episode
# ------------------------------------------------------------------------------------------------


def _update_row(u, episodes=0, ret=None):
    return {"updates": u, "env_steps": 128 * u, "episodes": episodes, "episode_return_mean": ret, "sps": 100.0,
            "host/policy_lag": 1, "host/env_restarts": 0, "host/lost_episodes": 0}


def test_the_final_return_reaches_back_to_the_last_episodes_that_ended():
    from rljax.actorlearner.run import final_return

    rows = [_update_row(u) for u in range(1, 31)]
    rows[25] = _update_row(26, 2, -20.0)  # Pong: the last episodes ended 4 updates before the end
    rows[20] = _update_row(21, 1, -21.0)
    assert final_return(rows) == (-20.0, 5)
    rows[28] = _update_row(29, 1, -17.0)
    rows[29] = _update_row(30, 3, -19.0)
    assert final_return(rows) == ((-17.0 - 3 * 19.0) / 4, 3)  # the last tenth (3 updates) had episodes
    assert final_return([_update_row(1), _update_row(2)]) == (None, 2)
    assert final_return([]) == (None, 0)


def test_the_done_line_of_a_run_whose_last_update_ended_no_episode_reports_the_last_return():
    """The issue's ``return nan``: a Pendulum episode lasts 200 steps, so of 5 updates of 2 x 64 steps
    only the 4th ends episodes (at step 200) and the last, the run's last tenth, none."""
    from rljax.actorlearner.learner import train_host
    from rljax.actorlearner.run import done_line
    from rljax.host.sources import make_host_env

    config = PPOConfig(env="gymnasium/Pendulum-v1", num_envs=2, num_steps=64, total_timesteps=2 * 64 * 5,
                       num_minibatches=2, num_epochs=1, hidden_sizes=(8,))
    result = train_host(config, lambda a: make_host_env(config.env, config.num_envs), HostOptions(max_policy_lag=0))
    assert [r["episodes"] for r in result.rows] == [0, 0, 0, 2, 0]
    line = done_line(result, config, None)
    ret = result.rows[3]["episode_return_mean"]
    assert f"return {ret:.2f} (the episodes of the last 2 updates)" in line and "nan" not in line
    assert line.startswith("done: 640 env steps, ") and "policy lag <= 0" in line
    assert "return -- (no episode ended)" in done_line(type(result)(None, None, result.rows[:3], 3), config, "r")


def test_video_interval_is_refused_before_anything_is_written(tmp_path):
    config = PPOConfig(env="gymnasium/CartPole-v1", num_envs=2, num_steps=8, total_timesteps=64, hidden_sizes=(8,))
    with pytest.raises(ValueError, match=r"video_interval=100: a run on host envs \(gymnasium/CartPole-v1\) records no "
                                         r"videos while it trains; record .* `rljax eval RUN_DIR --video FILE.gif`"):
        run_host(config, RunOptions(run_dir=str(tmp_path / "run"), video_interval=100))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("field, value, says", [
    ("env_kwargs", ("g=9.81",), r"env_kwargs=\('g=9.81',\): host envs are made from their name alone"),
    ("env_params", ("max_speed=9",), r"env_params=\('max_speed=9',\): host envs have no JAX env params"),
    ("eval_interval", 2, r"eval_interval=2: evaluate the saved policy on host envs with rljax eval"),
    ("on_nonfinite", "rollback", r"on_nonfinite='rollback': a host run stops on NaN/inf"),
])
def test_fields_only_the_compiled_loop_acts_on_are_refused_by_name(tmp_path, field, value, says):
    from rljax.agents.sac import SACConfig

    config = SACConfig(env="gymnasium/Pendulum-v1", num_envs=1, **{field: value})
    with pytest.raises(ValueError, match=r"gymnasium/Pendulum-v1 trains on the actor-learner path, which does not "
                                         r"act on these fields: " + says):
        run_host(config, RunOptions(run_dir=tmp_path / "run", quiet=True))
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_a_run_that_recorded_such_fields_resumes_without_them(tmp_path, monkeypatch):
    """A host run made before those fields were refused recorded them: its resume may not change them
    (the config check), so it goes on without them, with a warning; eval_interval, which a resume may
    change, is refused with the flag that clears it."""
    from rljax.agents.sac import SACConfig

    config = SACConfig(env="gymnasium/Pendulum-v1", num_envs=1, num_steps=4, total_timesteps=64, learning_starts=16,
                       batch_size=8, hidden_sizes=(8,), env_kwargs=("g=9.81",))
    with monkeypatch.context() as patch:
        patch.setattr(run_module, "_refuse_compiled_only", lambda config, resume: None)
        run_host(config, RunOptions(run_dir=tmp_path / "run", quiet=True))
    longer = dataclasses.replace(config, total_timesteps=96)
    with pytest.warns(UserWarning, match=r"does not act on env_kwargs=\('g=9.81',\).* goes on without it"):
        resumed = run_host(longer, RunOptions(run_dir=tmp_path / "run", resume=True, quiet=True))
    assert resumed.updates == 24
    with pytest.raises(ValueError, match=r"eval_interval=3: .* \(a resume may set --eval-interval 0\)"), \
            pytest.warns(UserWarning):
        run_host(dataclasses.replace(longer, eval_interval=3), RunOptions(run_dir=tmp_path / "run", resume=True,
                                                                          quiet=True))
