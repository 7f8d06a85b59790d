"""User envs named on the command line (``--env module:Name``, ``--env-param``, ``--env-kwarg``), and
runs of env objects recorded so that ``rljax resume RUN_DIR`` rebuilds them.

The env is a small pure-JAX env in a module written to a temporary directory (never on the import
path of the test process unless a test puts it there), so each test sees what a user project sees.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.checkpoint import PREEMPTED_EXIT_CODE
from rljax.tracking import read_metrics
from tests.test_checkpoint import _final_leaves, strip

ROOT = pathlib.Path(__file__).resolve().parents[1]

USER_ENV = textwrap.dedent('''
    """A user's env module: a walk on a line towards a goal (3 features, 2 actions)."""
    import jax
    import jax.numpy as jnp
    from flax import struct

    from rljax.env import Box, Discrete, EnvParams, EnvState, Environment


    @struct.dataclass
    class LineState(EnvState):
        x: jax.Array
        time: jax.Array


    @struct.dataclass
    class LineParams(EnvParams):
        step_size: float = 0.1
        goal: float = 1.0
        max_steps_in_episode: int = 20


    class LineWalk(Environment[LineState, LineParams]):
        def __init__(self, start_width: float = 0.5):
            self.start_width = start_width

        @property
        def default_params(self):
            return LineParams()

        def reset_env(self, key, params):
            x = jax.random.uniform(key, (), minval=-self.start_width, maxval=self.start_width)
            s = LineState(x=x, time=jnp.int32(0))
            return self._obs(s, params), s

        def _obs(self, s, params):
            return jnp.stack([s.x, params.goal - s.x, s.time / params.max_steps_in_episode]).astype(jnp.float32)

        def step_env(self, key, state, action, params):
            x = state.x + jnp.where(action == 1, params.step_size, -params.step_size)
            s = LineState(x=x, time=state.time + 1)
            done = x >= params.goal
            return self._obs(s, params), s, jnp.where(done, 1.0, -0.01), done, {}

        def observation_space(self, params):
            return Box(-jnp.inf, jnp.inf, (3,))

        def action_space(self, params):
            return Discrete(2)


    def make_line(start_width=0.5, goal=1.0):
        """A factory returning (env, params)."""
        env = LineWalk(start_width)
        return env, env.default_params.replace(goal=goal)


    def make_line_env():
        """A factory returning the env alone."""
        return LineWalk()


    def not_an_env():
        return {"reset": None}


    GOAL = 1.0
''')

# A tiny PPO: 4 envs x 16 steps, 2 updates per chunk.
SMALL = dict(total_timesteps=4 * 16 * 2 * 4, updates_per_chunk=2, num_envs=4, num_steps=16, num_epochs=1,
             num_minibatches=2, hidden_sizes=(16,), anneal_lr=False)
SMALL_FLAGS = ["--updates-per-chunk", "2", "--num-envs", "4", "--num-steps", "16", "--num-epochs", "1",
               "--num-minibatches", "2", "--hidden-sizes", "16", "--no-anneal-lr", "--no-compile-cache",
               "--no-tensorboard"]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``(name, folder)``: the user env module written under a fresh name into ``tmp_path/project``,
    which is the working directory and (for in-process use) on ``sys.path``."""
    name = f"userenv_{uuid.uuid4().hex[:8]}"
    project = tmp_path / "project"
    project.mkdir()
    (project / f"{name}.py").write_text(USER_ENV)
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    yield name, project
    sys.modules.pop(name, None)


def _env_vars():
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _cli(args, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "rljax.cli", *args], cwd=cwd, env=_env_vars(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(600)
def test_an_env_object_is_recorded_by_name_and_resumes_from_the_cli(user_module, tmp_path):
    """Regression: ``rljax.train(config, env=LineWalk())`` recorded ``"env": "CartPole-v1"`` (the
    config default), so ``rljax resume`` rebuilt CartPole and found no restorable checkpoint."""
    name, project = user_module
    module = __import__(name)
    config = PPOConfig(**SMALL)
    full = rljax.train(config, env=module.LineWalk(), run_dir=tmp_path / "full", quiet=True, checkpoint_every=1,
                       handle_signals=False)
    cut = tmp_path / "cut"
    part = rljax.train(config, env=module.LineWalk(), run_dir=cut, quiet=True, checkpoint_every=1,
                       handle_signals=False, on_chunk=lambda c, state, row: c == 1)
    assert part.preempted == "on_chunk"
    assert json.loads((cut / "config.json").read_text())["env"] == f"{name}:LineWalk"
    resumed = _cli(["resume", str(cut), "--quiet", "--no-compile-cache"], cwd=project)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = _final_leaves(tmp_path / "full"), _final_leaves(cut)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert strip(read_metrics(cut)) == strip(full.rows) and len(full.rows) == 4
