"""SAC's multi-device checks, run in a subprocess with N fake CPU devices by tests/unit/agents/test_sac.py.

Usage: python tests/support/multidevice_sac_checks.py CHECK [CHECK ...]
       (XLA_FLAGS=--xla_force_host_platform_device_count=4)
Prints one ``RESULT {json}`` line per check with the measured quantities; the test asserts on them.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import rljax
from rljax.agents.offpolicy import ReplayItem
from rljax.agents.sac import SACConfig, init_learner, make_sac_networks, sac_learn_step
from rljax.runtime.devices import AXIS, DataParallel


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def learn_equivalence() -> dict:
    """3 SAC gradient steps on D devices (per-device shards, pmean) == on 1 device (global batch).

    The policy's noise must not depend on how the batch is split, so each item draws its own noise
    from a key folded with an item id carried in the last observation column.
    """
    d = jax.device_count()
    n = 32 * d
    ks = jax.random.split(jax.random.key(0), 8)
    low, high = jnp.array([-2.0]), jnp.array([2.0])
    real = make_sac_networks(1, low, high, (16, 16))

    def per_item_sample(params, obs, key):
        dist = real.policy(params, obs)
        dist = dist.replace(low=jnp.broadcast_to(dist.low, dist.mean.shape),
                            high=jnp.broadcast_to(dist.high, dist.mean.shape))
        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(obs[:, -1].astype(jnp.int32))
        return jax.vmap(lambda dd, k: dd.sample_and_log_prob(k))(dist, keys)

    nets = real._replace(sample=per_item_sample)
    ids = jnp.arange(n, dtype=jnp.float32)[:, None]
    obs = jnp.concatenate([jax.random.normal(ks[0], (n, 3)), ids], axis=1)
    next_obs = jnp.concatenate([jax.random.normal(ks[1], (n, 3)), ids + n], axis=1)
    items = ReplayItem(obs=obs, action=jax.random.uniform(ks[2], (n, 1), minval=-2.0, maxval=2.0),
                       reward=jax.random.normal(ks[3], (n,)),
                       discount=jnp.where(jax.random.bernoulli(ks[4], 0.2, (n,)), 0.0, 0.99),
                       next_obs=next_obs, valid=jnp.ones((n,), bool))
    weights = jax.random.uniform(ks[5], (n,), minval=0.5, maxval=1.5)  # importance weights
    hp = SACConfig(critic_learning_rate=3e-3, actor_learning_rate=3e-3, alpha_learning_rate=3e-2).hyperparams()
    key = ks[7]

    def steps(learner, items, weights, axis_name):
        def step(learner, k):
            learner, td_abs, m = sac_learn_step(learner, items, weights, k, hp, nets,
                                                target_entropy=jnp.float32(-1.0), autotune=True,
                                                axis_name=axis_name)
            return learner, (td_abs, m)
        learner, (td_abs, metrics) = jax.lax.scan(step, learner, jax.random.split(key, 3))
        return learner, td_abs[-1], metrics

    def init_and_steps(k, items, weights):
        # Init inside the same program: eager flax init compiles every initialiser on its own.
        learner = init_learner(nets, hp, k, items.obs[:1], items.action[:1])
        return learner, steps(learner, items, weights, None)

    learner, (ref, ref_td, ref_m) = jax.block_until_ready(jax.jit(init_and_steps)(ks[6], items, weights))

    par = DataParallel(d, "shard_map")
    stack = lambda x: jnp.broadcast_to(x, (d,) + jnp.shape(x))  # noqa: E731
    shard = lambda x: x.reshape((d, n // d) + x.shape[1:])  # noqa: E731
    state = (jax.tree.map(stack, learner), jax.tree.map(shard, items), shard(weights))
    state = jax.device_put(state, NamedSharding(par.mesh, P(AXIS)))
    fn = par.map(lambda s: steps(s[0], s[1], s[2], AXIS))
    dp, dp_td, dp_m = jax.block_until_ready(fn(state))
    per_device = [jax.tree.map(lambda x: x[i], dp) for i in range(d)]
    return {
        "devices": d,
        "max_param_diff_vs_single": _max_diff(ref, per_device[0]),
        "max_param_diff_across_devices": max(_max_diff(per_device[0], p) for p in per_device[1:]),
        "max_td_abs_diff": float(np.max(np.abs(np.asarray(ref_td) - np.asarray(dp_td).reshape(-1)))),
        "critic_loss": [np.asarray(ref_m["critic_loss"]).tolist(), np.asarray(dp_m["critic_loss"][0]).tolist()],
        "actor_loss": [np.asarray(ref_m["actor_loss"]).tolist(), np.asarray(dp_m["actor_loss"][0]).tolist()],
        "log_alpha": [float(ref.log_alpha), float(per_device[0].log_alpha), float(learner.log_alpha)],
        "param_change": _max_diff(ref.actor_params, learner.actor_params),
        "critic_change": _max_diff(ref.critic_params, learner.critic_params),
    }


def train_runs() -> dict:
    """A short 4-device SAC run through ``rljax.train``: params stay in sync, losses finite."""
    d = jax.device_count()
    cfg = SACConfig(num_devices=d, num_envs=d, total_timesteps=100 * d, learning_starts=40 * d, batch_size=16 * d,
                    buffer_size=64 * d, hidden_sizes=(16, 16), updates_per_chunk=25, seed=3)
    r = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    leaves = jax.tree.leaves(r.agent.params_of(r.state))
    return {
        "desync": [row["param_desync"] for row in r.rows],
        "critic_loss": [row["critic_loss"] for row in r.rows],
        "buffer_size": [row["buffer_size"] for row in r.rows],
        "leading_axis": int(leaves[0].shape[0]),
        "max_spread": max(float(np.max(np.ptp(np.asarray(x), axis=0))) for x in leaves),
    }


CHECKS = {"learn": learn_equivalence, "train": train_runs}

if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"RESULT {name} " + json.dumps(CHECKS[name]()), flush=True)
