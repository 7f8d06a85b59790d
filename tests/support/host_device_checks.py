"""The actor-learner path over several fake CPU devices, run as a subprocess by
tests/unit/actorlearner/test_devices.py (the device count is fixed when JAX starts).

``python tests/support/host_device_checks.py RUN_DIR`` prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

import jax
import numpy as np

from rljax.actorlearner import engine
from rljax.actorlearner.learner import HostOptions, host_functions, train_host
from rljax.actorlearner.run import run_host
from rljax.agents.impala import IMPALAConfig
from rljax.agents.ppo import PPOConfig
from rljax.host.sources import make_host_env
from rljax.training.options import RunOptions

SYNC = HostOptions(num_actors=1, max_policy_lag=0)
PPO = PPOConfig(env="gymnasium/CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 4, num_minibatches=1,
                num_epochs=2, hidden_sizes=(16,), anneal_lr=False)
IMPALA = IMPALAConfig(env="gymnasium/CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 4,
                      hidden_sizes=(16,))


def _gym(config):
    return lambda actor: make_host_env("gymnasium/CartPole-v1", config.num_envs, max_episode_steps=50)


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def _diff(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(_leaves(a), _leaves(b)))


def split_equals_one_device() -> dict:
    """The update on learner devices 1 and 2 equals it on device 0, for PPO (one minibatch) and IMPALA;
    the returned params are replicated over the two."""
    d = jax.devices()
    out = {}
    for name, config in (("ppo", PPO), ("impala", IMPALA)):
        one = train_host(config, _gym(config), SYNC)
        two = train_host(config, _gym(config), dataclasses.replace(SYNC, learner_devices=(d[1], d[2])))
        leaf = jax.tree.leaves(two.params)[0]
        out[name] = {"param_diff": _diff(one.params, two.params), "changed": _diff(one.params, _first(config)),
                     "loss_diff": max(abs(a["value_loss"] - b["value_loss"]) / max(1.0, abs(a["value_loss"]))
                                      for a, b in zip(one.rows, two.rows)),
                     "param_devices": sorted(dev.id for dev in leaf.sharding.device_set),
                     "episodes": [r["episodes"] for r in one.rows] == [r["episodes"] for r in two.rows]}
    return out


def _first(config):
    """The params before any update (as the learner initialises them)."""
    env = _gym(config)(0)
    spec = env.spec
    env.close()
    network = host_functions(config, spec)[0]
    return network.init(jax.random.split(jax.random.key(config.seed), 3)[0], np.zeros((1, *spec.obs_shape), spec.obs_dtype))


def actors_on_their_devices() -> dict:
    """Two actors on devices 0 and 1 (each acts there), the learner split over 1 and 2."""
    d, seen = jax.devices(), []
    init = engine.Actor.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        seen.append((self.index, self.device.id))

    engine.Actor.__init__ = record
    try:
        result = train_host(IMPALA, _gym(IMPALA), HostOptions(num_actors=2, max_policy_lag=1,
                                                              actor_devices=(d[0], d[1]), learner_devices=(d[1], d[2])))
    finally:
        engine.Actor.__init__ = init
    return {"actors": sorted(seen), "acted": sorted({r["host/actor"] for r in result.rows}),
            "updates": result.updates, "finite": all(np.isfinite(r["value_loss"]) for r in result.rows)}


def resume_on_two_learner_devices(root: pathlib.Path) -> dict:
    """A run on learner devices 1 and 2 stopped after 2 updates and resumed to 4 equals one never stopped."""
    d = jax.devices()
    layout = dataclasses.replace(SYNC, learner_devices=(d[1], d[2]))
    config = dataclasses.replace(PPO, updates_per_chunk=1)
    whole = run_host(config, RunOptions(run_dir=root / "whole", quiet=True), layout)
    run_host(dataclasses.replace(config, total_timesteps=4 * 16 * 2), RunOptions(run_dir=root / "cut", quiet=True),
             layout)
    resumed = run_host(config, RunOptions(run_dir=root / "cut", resume=True, quiet=True), layout)
    return {"updates": resumed.updates, "rows": len(resumed.rows),
            "equal": all(np.array_equal(a, b) for a, b in zip(_leaves(whole.params), _leaves(resumed.params)))}


def refusals() -> dict:
    """What a split over the learner's devices cannot take: the messages."""
    d, out = jax.devices(), {}
    for name, config, devices in (
            ("num_envs", IMPALA, (d[0], d[1], d[2])),
            ("minibatches", dataclasses.replace(PPO, num_steps=6, num_minibatches=8), (d[0], d[1]))):
        try:
            train_host(config, _gym(config), dataclasses.replace(SYNC, learner_devices=devices))
            out[name] = None
        except ValueError as err:
            out[name] = str(err)
    return out


if __name__ == "__main__":
    root = pathlib.Path(sys.argv[1])
    print("RESULT " + json.dumps({"devices": jax.device_count(), "split": split_equals_one_device(),
                                  "actors": actors_on_their_devices(), "resume": resume_on_two_learner_devices(root),
                                  "refusals": refusals()}),
          flush=True)
