"""Multi-device checks, run in a subprocess with N fake CPU devices by tests/integration/test_data_parallel.py.

Usage: python tests/support/multidevice_checks.py CHECK   (XLA_FLAGS=--xla_force_host_platform_device_count=4)
Prints one JSON line with the measured quantities; the test asserts on them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import envs
import rljax
from rljax.agents.ppo import PPOBatch, PPOConfig, ppo_learn, ppo_optimizer
from rljax.agents import build_agent
from rljax.training.hooks.health import DesyncError, check_health
from rljax.training.program import make_chunk, plan_updates
from rljax.core.networks import ActorCritic
from rljax.runtime.devices import AXIS, DataParallel


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in
               zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def learn_equivalence(backend: str, recurrent: bool = False) -> dict:
    """ppo_learn on D devices (per-device shards) == ppo_learn on 1 device (the global batch); with
    ``recurrent``, on batches of GRU sequences (8 steps, resets inside) through ``sequence_apply``."""
    from rljax.agents.recurrent import Sequences, sequence_apply
    from rljax.core.networks import RecurrentActorCritic, initial_memory

    d = jax.device_count()
    n = 64 * d
    key = jax.random.key(0)
    ks = jax.random.split(key, 8)
    shape = (n // 8, 8) if recurrent else (n,)  # sequences [S, L] or samples [N]
    if recurrent:
        net = RecurrentActorCritic(action_dim=2, discrete=True, hidden_sizes=(16,), memory="gru", memory_size=8)
        params = net.init(ks[0], initial_memory("gru", 8, 1), jnp.zeros((1, 1, 4)), jnp.zeros((1, 1), bool))
        obs = Sequences(jax.random.normal(ks[1], shape + (4,)), jax.random.bernoulli(ks[6], 0.1, shape),
                        jax.random.normal(ks[7], (shape[0], 8)))
        apply = sequence_apply(net.apply)
    else:
        net = ActorCritic(action_dim=2, discrete=True, hidden_sizes=(16, 16))
        params = net.init(ks[0], jnp.zeros((1, 4)))
        obs, apply = jax.random.normal(ks[1], (n, 4)), net.apply
    batch = PPOBatch(obs=obs, action=jax.random.randint(ks[2], shape, 0, 2),
                     log_prob=jnp.full(shape, jnp.log(0.5)), value=jax.random.normal(ks[3], shape),
                     advantage=jax.random.normal(ks[4], shape), target=jax.random.normal(ks[5], shape))
    hp = PPOConfig().hyperparams()
    opt_state = ppo_optimizer(hp, hp.learning_rate).init(params)
    kw = dict(num_epochs=3, num_minibatches=1)  # one minibatch: the same sample set on 1 and D devices

    ref_params, _, ref_m = jax.jit(lambda p, o, b: ppo_learn(p, o, b, key, hp, hp.learning_rate, apply, **kw))(
        params, opt_state, batch)

    par = DataParallel(d, backend)
    stack = lambda x: jnp.broadcast_to(x, (d,) + jnp.shape(x))  # noqa: E731
    state = (jax.tree.map(stack, params), jax.tree.map(stack, opt_state),
             jax.tree.map(lambda x: x.reshape((d, x.shape[0] // d) + x.shape[1:]), batch))
    fn = par.map(lambda s: ppo_learn(s[0], s[1], s[2], key, hp, hp.learning_rate, apply, axis_name=AXIS, **kw))
    if backend == "shard_map":
        state = jax.device_put(state, NamedSharding(par.mesh, P(AXIS)))
    dp_params, _, dp_m = jax.block_until_ready(fn(state))
    per_device = [jax.tree.map(lambda x: x[i], dp_params) for i in range(d)]
    return {
        "devices": d,
        "max_param_diff_vs_single": _max_diff(ref_params, per_device[0]),
        "max_param_diff_across_devices": max(_max_diff(per_device[0], p) for p in per_device[1:]),
        "value_loss": [float(ref_m["value_loss"]), float(dp_m["value_loss"][0])],
        "param_change": _max_diff(ref_params, params),
    }


SMALL = dict(num_envs=8, num_steps=16, num_epochs=2, num_minibatches=2, hidden_sizes=(32, 32),
             total_timesteps=8 * 16 * 6, updates_per_chunk=3)


def backends_agree() -> dict:
    """The same run under shard_map and pmap gives the same params and metrics."""
    out = {}
    for backend in ("shard_map", "pmap"):
        cfg = PPOConfig(num_devices=jax.device_count(), backend=backend, **SMALL)
        out[backend] = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    a, b = out["shard_map"], out["pmap"]
    return {
        "max_param_diff": _max_diff(a.state.params, b.state.params),
        "returns": [[r["episode_return_mean"] for r in x.rows] for x in (a, b)],
        "value_loss": [[r["value_loss"] for r in x.rows] for x in (a, b)],
        "desync": [r["param_desync"] for r in a.rows + b.rows],
        "params_shape0": int(jax.tree.leaves(a.state.params)[0].shape[0]),
        "launched_ahead": [x.timings["launched_ahead"] for x in (a, b)],
    }


def learns() -> dict:
    """A 4-device CartPole run improves far beyond a random policy."""
    cfg = PPOConfig(num_devices=jax.device_count(), num_envs=8, num_steps=64, total_timesteps=150_000, seed=0)
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    return {"final_return": result.final_return, "first_return": result.rows[0]["episode_return_mean"],
            "desync": max(r["param_desync"] for r in result.rows)}


def desync_detected() -> dict:
    """Params perturbed on one device are caught at the next chunk boundary."""
    d = jax.device_count()
    cfg = PPOConfig(num_devices=d, **SMALL)
    env, env_params = envs.make(cfg.env)
    par = DataParallel(d, cfg.backend)
    agent = build_agent(cfg, env, env_params, par.axis_name)
    plan = plan_updates(cfg.total_timesteps, agent.env_steps_per_update, cfg.updates_per_chunk)
    state = par.init(lambda k, i: agent.init(k, i, plan.num_updates, cfg.hyperparams(), env_params), jax.random.key(0))
    chunk = par.map(make_chunk(agent.update, plan.updates_per_chunk, par.axis_name))
    state, out = chunk(state)
    clean = float(out.metrics["param_desync"][0])
    jax.block_until_ready(state)
    leaf0 = jax.tree.leaves(state.params)[0]
    bumped = leaf0.at[d - 1].add(1e-3)
    params = jax.tree.unflatten(jax.tree.structure(state.params),
                                [bumped] + jax.tree.leaves(state.params)[1:])
    state = state.replace(params=jax.device_put(params, leaf0.sharding))
    state, out = chunk(state)
    dirty = float(out.metrics["param_desync"][0])
    jax.block_until_ready(state)
    try:
        check_health({"param_desync": dirty, "env_steps": 0}, 1)
        raised = ""
    except DesyncError as err:
        raised = str(err)
    return {"clean": clean, "dirty": dirty, "error": raised}


@dataclasses.dataclass(frozen=True)
class DesyncPPOConfig(PPOConfig):
    """PPO whose update, once, perturbs the params of one device only (a deliberately broken
    data-parallel update), registered with ``rljax.agents.register`` so ``train()`` builds it."""

    perturb_device: int = 1
    perturb_update: int = 4


def make_desync_ppo(config: DesyncPPOConfig, env, env_params, axis_name):
    from rljax.agents.ppo import make_ppo

    agent = make_ppo(config, env, env_params, axis_name)

    def update(state):
        index = state.updates.lo  # the update's index (below 2**32), before it counts itself
        state, out = agent.update(state)
        # The update has already measured its desync; the perturbation shows from the next update on.
        # One weight moves by 1e-3: a small desync, far below any loose tolerance.
        hit = (jax.lax.axis_index(axis_name) == config.perturb_device) & (index == config.perturb_update)
        leaves, treedef = jax.tree.flatten(state.params)
        first = leaves[0].reshape(-1)
        leaves[0] = first.at[0].add(jnp.where(hit, 1e-3, 0.0).astype(first.dtype)).reshape(leaves[0].shape)
        return state.replace(params=jax.tree.unflatten(treedef, leaves)), out

    return agent._replace(update=update)


def desync_through_train() -> dict:
    """``train()`` itself stops a data-parallel run whose params drift apart on one device."""
    from rljax.agents import register

    register("desync_ppo", DesyncPPOConfig, make_desync_ppo)
    d = jax.device_count()
    small = {**SMALL, "total_timesteps": 8 * 16 * 8, "updates_per_chunk": 2}
    out = {"devices": d}
    # Control: the same wrapper perturbing a device index that does not exist changes nothing.
    clean = rljax.train(DesyncPPOConfig(num_devices=d, perturb_device=d, **small), options=rljax.RunOptions(quiet=True))
    out["clean_rows"] = len(clean.rows)
    out["clean_desync"] = max(r["param_desync"] for r in clean.rows)
    try:
        rljax.train(DesyncPPOConfig(num_devices=d, perturb_device=d - 1, **small), options=rljax.RunOptions(quiet=True))
        out["error"] = None
    except DesyncError as err:
        out["error"] = str(err)
    return out


def dqn_learn_equivalence() -> dict:
    """A DQN gradient step on 4 shards (pmean) equals the step on the whole batch; a 4-device
    DQN run keeps params in sync under both backends and gives the same numbers."""
    from rljax.agents.dqn import DQNConfig, dqn_loss
    from rljax.agents.offpolicy import ReplayItem
    from rljax.core.networks import QNetwork

    d = jax.device_count()
    n = 32 * d
    ks = jax.random.split(jax.random.key(1), 6)
    net = QNetwork(num_actions=3, hidden_sizes=(16,))
    params = net.init(ks[0], jnp.zeros((1, 4)))
    target = net.init(ks[1], jnp.zeros((1, 4)))
    items = ReplayItem(obs=jax.random.normal(ks[2], (n, 4)), action=jax.random.randint(ks[3], (n,), 0, 3),
                       reward=jax.random.normal(ks[4], (n,)), discount=jnp.full((n,), 0.9),
                       next_obs=jax.random.normal(ks[5], (n, 4)), valid=jnp.ones((n,), bool))
    grad = lambda p, it: jax.grad(lambda p: dqn_loss(p, target, net.apply, it, jnp.ones(it.reward.shape),  # noqa: E731
                                                     double_q=True, loss="huber")[0])(p)
    ref = jax.jit(grad)(params, items)
    par = DataParallel(d, "shard_map")
    sharded = jax.device_put(jax.tree.map(lambda x: x.reshape((d, n // d) + x.shape[1:]), items),
                             NamedSharding(par.mesh, P(AXIS)))
    dp = jax.block_until_ready(par.map(lambda it: jax.lax.pmean(grad(params, it), AXIS))(sharded))
    out = {"max_grad_diff": _max_diff(ref, jax.tree.map(lambda x: x[0], dp)),
           "grad_scale": max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(ref))}
    runs = {}
    for backend in ("shard_map", "pmap"):
        cfg = DQNConfig(env="ProbeTwoStep-v0", num_devices=d, num_envs=8, batch_size=64, buffer_size=512,
                        learning_starts=64, target_update_interval=32, hidden_sizes=(16,), n_step=2,
                        prioritized=True, total_timesteps=8 * 60, updates_per_chunk=20, backend=backend)
        runs[backend] = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    a, b = runs["shard_map"], runs["pmap"]
    out["backend_param_diff"] = _max_diff(a.state.learner.params, b.state.learner.params)
    out["desync"] = max(r["param_desync"] for r in a.rows + b.rows)
    out["td_loss"] = [[r["td_loss"] for r in x.rows] for x in (a, b)]
    return out


def resume_bit_exact(name: str) -> dict:
    """Interrupt + resume on 4 devices == uninterrupted, for ``name``: PPO (shard_map), DQN (pmap),
    SAC or a recurrent PPO (``ppo_gru``: its memory split over the devices with the envs)."""
    import tempfile

    from rljax.agents.dqn import DQNConfig
    from rljax.agents.sac import SACConfig

    d = jax.device_count()
    configs = {
        "ppo": PPOConfig(num_devices=d, normalize_obs=True, **{**SMALL, "updates_per_chunk": 1}),
        "dqn": DQNConfig(num_devices=d, backend="pmap", num_envs=8, num_steps=2, batch_size=16 * d,
                         buffer_size=64 * d, learning_starts=32, target_update_interval=16, hidden_sizes=(16,),
                         n_step=2, prioritized=True, total_timesteps=8 * 2 * 60, updates_per_chunk=10),
        "sac": SACConfig(num_devices=d, num_envs=8, num_steps=1, batch_size=16 * d, buffer_size=64 * d,
                         learning_starts=32, hidden_sizes=(16,), total_timesteps=8 * 60, updates_per_chunk=10),
        "ppo_gru": PPOConfig(env="MemoryCue-v0", num_devices=d, memory="gru", memory_size=8, bptt_length=8,
                             **{**SMALL, "updates_per_chunk": 1}),
    }
    cfg, root = configs[name], tempfile.mkdtemp()
    full = rljax.train(cfg, options=rljax.RunOptions(run_dir=f"{root}/full", quiet=True, checkpoint_every=1))
    rljax.train(cfg, options=rljax.RunOptions(run_dir=f"{root}/cut", quiet=True, checkpoint_every=1,
                                              on_chunk=lambda c, s, r: c == 2))
    rest = rljax.train(cfg, options=rljax.RunOptions(run_dir=f"{root}/cut", quiet=True, resume=True,
                                                     checkpoint_every=1))
    la = [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
          for x in jax.tree.leaves(full.state)]
    lb = [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
          for x in jax.tree.leaves(rest.state)]
    return {"equal": all(np.array_equal(x, y) for x, y in zip(la, lb)) and len(la) == len(lb),
            "leading_axis": int(la[0].shape[0]), "start_chunk": rest.timings["start_chunk"],
            "memory": None if getattr(full.state, "memory", None) is None else list(full.state.memory.shape)}


def sweep_two_devices() -> dict:
    """A population split over the devices: members equal single runs, and the state is sharded."""
    from rljax.training.sweep import SweepSpec, run_sweep

    cfg = PPOConfig(**{**SMALL, "updates_per_chunk": 2})
    spec = SweepSpec(grid={"learning_rate": [1e-4, 1e-3]}, seeds=(0, 1))
    result, members, _ = run_sweep(cfg, spec, devices=jax.device_count(), quiet=True)
    leaf = jax.tree.leaves(result.state.params)[0]
    diffs = []
    for idx in range(len(members)):
        m = members[idx]
        single = rljax.train(dataclasses.replace(cfg, learning_rate=m.values["learning_rate"], seed=m.seed),
                             options=rljax.RunOptions(quiet=True))
        diffs.append(max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)[idx]))) for a, b in
                         zip(jax.tree.leaves(single.state.params), jax.tree.leaves(result.state.params))))
    # Population-based training over the split population equals it on one device.
    from rljax.training.hooks.pbt import PBTSpec

    pbt = SweepSpec(grid={"learning_rate": [1e-4, 3e-4, 1e-3, 3e-3]}, seeds=(0,),
                    pbt=PBTSpec(interval=1, fields={"learning_rate": (1e-5, 1e-2)}))
    split, _, _ = run_sweep(cfg, pbt, devices=jax.device_count(), quiet=True)
    one, _, _ = run_sweep(cfg, pbt, devices=1, quiet=True)
    pbt_diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                   for a, b in zip(jax.tree.leaves((split.state.params, split.state.hyperparams)),
                                   jax.tree.leaves((one.state.params, one.state.hyperparams))))
    return {"max_diff": max(diffs), "devices_used": len(leaf.sharding.device_set), "members": len(members),
            "pbt_max_diff": pbt_diff, "pbt_devices_used": len(jax.tree.leaves(split.state.params)[0].sharding.device_set)}


def eval_and_load() -> dict:
    """Evaluation during a data-parallel run and a split sweep leaves the state bit-identical; the
    data-parallel run's checkpoint loads as device 0's policy. (shard_map: the evaluation hook reads
    the state through jit alone, which is backend-agnostic; pmap's state layout is covered by the
    resume checks.)"""
    import tempfile

    from rljax.store.checkpoint import to_host
    from rljax.training.sweep import SweepSpec, run_sweep

    d = jax.device_count()
    out = {}
    for backend in ("shard_map",):
        cfg = PPOConfig(**{**SMALL, "num_devices": d, "backend": backend, "updates_per_chunk": 2,
                           "normalize_obs": True})
        plain = rljax.train(cfg, options=rljax.RunOptions(quiet=True, checkpoints=False))
        with tempfile.TemporaryDirectory() as tmp:
            evaluated = rljax.train(dataclasses.replace(cfg, eval_interval=1, eval_episodes=4),
                                    options=rljax.RunOptions(run_dir=tmp, quiet=True))
            policy = rljax.load(tmp)
            obs = 2.0 * jax.random.normal(jax.random.key(0), (32, 4))
            device0 = jax.tree.map(lambda x: x[0], evaluated.state)
            same_actions = bool(jnp.all(policy.act(obs) == evaluated.agent.act(device0, obs)))
        same = all(np.array_equal(a, b) for a, b in zip(to_host(plain.state), to_host(evaluated.state)))
        evals = [r.get("eval/return_mean") for r in evaluated.rows]
        out[backend] = {"identical": same, "same_actions": same_actions,
                        "evaluated": all(e is not None and np.isfinite(e) for e in evals)}
    cfg = PPOConfig(**{**SMALL, "updates_per_chunk": 2})
    spec = SweepSpec(grid={"learning_rate": [1e-4, 1e-3]}, seeds=(0, 1))
    split, _, _ = run_sweep(dataclasses.replace(cfg, eval_interval=1, eval_episodes=4), spec, devices=d, quiet=True,
                            plots=False)
    plain, _, _ = run_sweep(cfg, spec, devices=d, quiet=True, plots=False)
    out["sweep"] = {"identical": all(np.array_equal(a, b) for a, b in zip(to_host(plain.state), to_host(split.state))),
                    "evaluated": all("eval/return_mean" in rows[-1] for rows in split.member_rows)}
    return out


CHECKS = {"eval_load": eval_and_load, "sweep": sweep_two_devices, "dqn_learn": dqn_learn_equivalence, "learn_shard_map": lambda: learn_equivalence("shard_map"),
          "learn_pmap": lambda: learn_equivalence("pmap"),
          "learn_recurrent": lambda: learn_equivalence("shard_map", recurrent=True),
          "backends_agree": backends_agree, "learns": learns, "desync_detected": desync_detected,
          "desync_train": desync_through_train,
          **{f"resume_{name}": functools.partial(resume_bit_exact, name) for name in ("ppo", "dqn", "sac", "ppo_gru")}}

if __name__ == "__main__":
    name = sys.argv[1]
    print("RESULT " + json.dumps(CHECKS[name]()), flush=True)
