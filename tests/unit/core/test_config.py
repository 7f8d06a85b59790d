"""Config validation: every field of every registered config, its type first and then its range.

The contract: a bad value is refused when the config is built, by one ``ValueError`` whose single
line names the field, the bad value and what is valid, never a raw ``TypeError`` or
``OverflowError`` from deeper down, and never silently accepted. The same holds on the command
line (exit status 2, no traceback) and for sweep members.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import pathlib
import subprocess
import sys
import typing

import pytest

from rljax.agents import algorithms
from rljax.training.program import plan_updates

ROOT = pathlib.Path(__file__).resolve().parents[3]
# jax.random.key keeps the low 32 bits of a seed (and a sweep stacks its seeds as uint32), so
# seeds 0 .. 2**32 - 1 are the ones that give distinct keys.
MAX_SEED = 2**32 - 1
# A run's updates and env steps are exact 64-bit counts (rljax.core.counters.Count); 2**53 env
# steps keep every env-step count exact as a float64 too (JSON rows, tensorboard, trackers). One
# update's batch, a replay capacity and the target-copy interval are int32 sizes and indices.
MAX_ENV_STEPS = 2**53
MAX_STEPS_PER_UPDATE = 2**30
CONFIG_CLASSES = [entry.config_cls for entry in algorithms().values()]


def _wrong_values(declared) -> list:
    """Values of the wrong type for a field declared as ``declared``, plus None, NaN and inf."""
    if declared is bool:
        return [None, 1, 0, "yes", 1.0]
    if declared is int:
        return [None, "3", 3.0, 2.5, True, math.nan, math.inf, -math.inf]
    if declared is float:
        return [None, "1e-3", True, [0.5], math.nan, math.inf, -math.inf]
    if declared is str:
        return [None, 3, ("relu",), math.nan]
    if typing.get_origin(declared) is tuple and typing.get_args(declared) == (int, ...):
        return [None, [64, 64], (64.0,), (True,), ("64",), 64, "64", (math.nan,)]
    if typing.get_origin(declared) is tuple and typing.get_args(declared) == (str, ...):
        return [None, ["length=0.7"], ("length=0.7", 3), (None,), "length=0.7", 3, (math.nan,)]
    raise AssertionError(f"no wrong values known for declared type {declared!r}: extend this test and "
                         f"rljax.core.config.check_types together")


CONTRACT_CASES = [
    pytest.param(cls, f.name, bad, id=f"{cls.__name__}-{f.name}-{bad!r}")
    for cls in CONFIG_CLASSES
    for f in dataclasses.fields(cls)
    for bad in _wrong_values(typing.get_type_hints(cls)[f.name])
]


def test_every_registered_algorithm_is_covered():
    assert {c.__name__ for c in CONFIG_CLASSES} >= {"PPOConfig", "DQNConfig", "SACConfig"}
    assert len(CONTRACT_CASES) > 100


@pytest.mark.parametrize("cls, name, bad", CONTRACT_CASES)
def test_every_field_refuses_wrong_types_none_nan_and_inf(cls, name, bad):
    with pytest.raises(ValueError) as err:
        cls(**{name: bad})
    message = str(err.value)
    assert name in message and repr(bad) in message, message
    assert "\n" not in message


@pytest.mark.parametrize("cls", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_defaults_and_int_for_float_are_valid(cls):
    cfg = cls()
    hints = typing.get_type_hints(cls)
    # A float field may be given as an int (e.g. gamma=1): the same value, the same config.
    for f in dataclasses.fields(cls):
        value = getattr(cfg, f.name)
        if hints[f.name] is float and float(value).is_integer():
            assert dataclasses.replace(cfg, **{f.name: int(value)}) == cfg


# Per-field ranges, (config class, overrides, text the message must contain).
RANGE_CASES = [
    # The audit's reproductions.
    ("DQNConfig", dict(max_grad_norm=-1.0), "max_grad_norm must be > 0, got -1.0"),
    ("DQNConfig", dict(max_grad_norm=0.0), "max_grad_norm must be > 0, got 0.0"),
    ("DQNConfig", dict(priority_alpha=-1.0), "priority_alpha must be >= 0, got -1.0"),
    ("DQNConfig", dict(learning_starts=2.5), "learning_starts must be an integer"),
    ("PPOConfig", dict(learning_rate=math.inf), "learning_rate must be a finite"),
    ("DQNConfig", dict(learning_rate="1e-3"), "learning_rate must be a finite"),
    ("DQNConfig", dict(gamma=None), "gamma must be a finite"),
    ("PPOConfig", dict(seed=99999999999999999999), f"seed must be an integer in [0, {MAX_SEED}]"),
    ("PPOConfig", dict(total_timesteps=10**16), f"total_timesteps must be an integer in [1, {MAX_ENV_STEPS}]"),
    # The shared run fields.
    ("PPOConfig", dict(seed=-1), "seed must be an integer >= 0, got -1"),
    ("SACConfig", dict(seed=2**32), "got 4294967296"),
    ("DQNConfig", dict(total_timesteps=0), "total_timesteps must be a positive integer, got 0"),
    ("DQNConfig", dict(total_timesteps=2**53 + 1), "got 9007199254740993 (2**53"),
    ("PPOConfig", dict(num_envs=0), "num_envs must be a positive integer, got 0"),
    ("PPOConfig", dict(num_devices=-2), "num_devices must be a positive integer, got -2"),
    ("PPOConfig", dict(updates_per_chunk=-1), "updates_per_chunk must be an integer >= 0"),
    ("PPOConfig", dict(env=""), "env must be a non-empty string"),
    ("PPOConfig", dict(env_params=("length",)), "env_params entry 'length' must be NAME=VALUE"),
    ("PPOConfig", dict(env_params=("=0.7",)), "env_params entry '=0.7' must be NAME=VALUE"),
    ("DQNConfig", dict(env_kwargs=("two words=1",)), "env_kwargs entry 'two words=1' must be NAME=VALUE"),
    ("SACConfig", dict(backend="tpu"), "backend='tpu' is not one of ('shard_map', 'pmap')"),
    # PPO.
    ("PPOConfig", dict(num_epochs=0), "num_epochs must be a positive integer, got 0"),
    ("PPOConfig", dict(learning_rate=0), "learning_rate must be > 0, got 0"),
    ("PPOConfig", dict(learning_rate=1e39), "learning_rate must be a finite"),  # inf in float32
    ("PPOConfig", dict(clip_eps=0.0), "clip_eps must be > 0, got 0.0"),
    ("PPOConfig", dict(max_grad_norm=-0.5), "max_grad_norm must be > 0, got -0.5"),
    ("PPOConfig", dict(gae_lambda=1.01), "gae_lambda must be in [0, 1], got 1.01"),
    ("PPOConfig", dict(gamma=-0.1), "gamma must be in [0, 1], got -0.1"),
    ("PPOConfig", dict(ent_coef=-0.01), "ent_coef must be >= 0, got -0.01"),
    ("PPOConfig", dict(vf_coef=-1), "vf_coef must be >= 0, got -1"),
    ("PPOConfig", dict(hidden_sizes=(64, 0)), "hidden_sizes must be"),
    ("PPOConfig", dict(activation="nope"), "activation='nope' is not one of"),
    # DQN.
    ("DQNConfig", dict(learning_starts=-1), "learning_starts must be an integer >= 0, got -1"),
    ("DQNConfig", dict(learning_starts=2**53 + 1), f"learning_starts must be an integer in [0, {MAX_ENV_STEPS}]"),
    ("DQNConfig", dict(target_update_interval=0), "target_update_interval must be a positive integer, got 0"),
    ("DQNConfig", dict(target_update_interval=2**31), "target_update_interval must be an integer in [1, "),
    ("DQNConfig", dict(buffer_size=2**31), f"buffer_size must be an integer in [1, {MAX_STEPS_PER_UPDATE}]"),
    ("DQNConfig", dict(num_envs=2**16, num_steps=2**15, buffer_size=2**30),
     "num_envs * num_steps = 2147483648 env steps per update is more than 1073741824"),
    ("DQNConfig", dict(learning_rate=-1e-3), "learning_rate must be > 0, got -0.001"),
    ("DQNConfig", dict(tau=0.0), "tau must be in (0, 1], got 0.0"),
    ("DQNConfig", dict(tau=1.5), "tau must be in (0, 1], got 1.5"),
    ("DQNConfig", dict(epsilon_start=-0.1), "epsilon_start must be in [0, 1], got -0.1"),
    ("DQNConfig", dict(exploration_fraction=1.5), "exploration_fraction must be in [0, 1], got 1.5"),
    ("DQNConfig", dict(priority_beta_start=2.0), "priority_beta_start must be in [0, 1], got 2.0"),
    ("DQNConfig", dict(hidden_sizes=(0,)), "hidden_sizes must be"),
    ("DQNConfig", dict(activation="Relu"), "activation='Relu' is not one of"),
    ("DQNConfig", dict(loss="l2"), "loss='l2' is not one of ('mse', 'huber')"),
    # SAC.
    ("SACConfig", dict(max_grad_norm=0.0), "max_grad_norm must be > 0, got 0.0"),
    ("SACConfig", dict(priority_alpha=-0.5), "priority_alpha must be >= 0, got -0.5"),
    ("SACConfig", dict(alpha_learning_rate=0.0), "alpha_learning_rate must be > 0, got 0.0"),
    ("SACConfig", dict(actor_learning_rate=math.inf), "actor_learning_rate must be a finite"),
    ("SACConfig", dict(tau=1.5), "tau must be in (0, 1], got 1.5"),
    ("SACConfig", dict(learning_starts=2**53 + 1), f"learning_starts must be an integer in [0, {MAX_ENV_STEPS}]"),
    ("SACConfig", dict(log_std_min=-math.inf), "log_std_min must be a finite"),
    ("SACConfig", dict(activation="nope"), "activation='nope' is not one of"),
]


@pytest.mark.parametrize("cls_name, kw, text", RANGE_CASES, ids=[f"{c}-{kw}" for c, kw, _ in RANGE_CASES])
def test_out_of_range_values_are_refused(cls_name, kw, text):
    cls = next(c for c in CONFIG_CLASSES if c.__name__ == cls_name)
    with pytest.raises(ValueError) as err:
        cls(**kw)
    assert text in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("cls_name, kw", [
    ("PPOConfig", dict(seed=0)), ("PPOConfig", dict(seed=2**32 - 1)),
    ("PPOConfig", dict(total_timesteps=2**53)), ("DQNConfig", dict(total_timesteps=1)),
    ("SACConfig", dict(total_timesteps=5 * 10**9, learning_starts=3 * 10**9)),
    ("DQNConfig", dict(priority_alpha=0.0)), ("DQNConfig", dict(max_grad_norm=1e-8)),
    ("DQNConfig", dict(learning_starts=0, exploration_fraction=0.0, epsilon_end=1.0, tau=1)),
    ("DQNConfig", dict(learning_starts=2**30, target_update_interval=2**30, buffer_size=2**30)),
    ("PPOConfig", dict(gamma=0, gae_lambda=1, ent_coef=0, vf_coef=0)),
    ("PPOConfig", dict(learning_rate=1, hidden_sizes=(8,), activation="gelu")),
    ("SACConfig", dict(gamma=1.0, tau=1.0, priority_alpha=0.0, target_entropy_scale=-0.5, log_std_min=-20)),
])
def test_boundary_values_are_accepted(cls_name, kw):
    cls = next(c for c in CONFIG_CLASSES if c.__name__ == cls_name)
    cfg = cls(**kw)
    assert all(getattr(cfg, k) == v for k, v in kw.items())


def test_seed_bound_is_what_the_keys_tell_apart():
    import jax
    import jax.numpy as jnp

    # Every seed in range gives its own key, and the same key as a sweep member's uint32 seed...
    for seed in (0, 2**31, MAX_SEED):
        single = jax.random.key_data(jax.random.key(seed))
        member = jax.random.key_data(jax.vmap(jax.random.key)(jnp.asarray([seed], jnp.uint32)))[0]
        assert (single == member).all()
    # ...while the first seed past the bound would silently be seed 0 again.
    assert (jax.random.key_data(jax.random.key(MAX_SEED + 1)) == jax.random.key_data(jax.random.key(0))).all()


@pytest.mark.parametrize("env_steps_per_update", [1, 3, 10, 512, 1000, 2**30])
@pytest.mark.parametrize("updates_per_chunk", [0, 1, 2, 3, 7, 200, 4097])
def test_step_counters_fit_a_count_at_the_bound(env_steps_per_update, updates_per_chunk):
    # The largest run a config allows: its updates and env steps (updates * env_steps_per_update,
    # computed on the device as a Count) stay below 2**64 after the plan rounds the run up to whole chunks.
    plan = plan_updates(MAX_ENV_STEPS, env_steps_per_update, updates_per_chunk)
    assert plan.num_updates * plan.env_steps_per_update < 2**64


def test_sweep_members_are_validated():
    from rljax.agents.ppo import PPOConfig
    from rljax.training.sweep import SweepSpec, build_members, make_population

    base = PPOConfig(num_envs=4, num_steps=8, num_minibatches=1, total_timesteps=64)
    members = build_members(base, None, SweepSpec(grid={"max_grad_norm": [-1.0, 1.0]}))
    with pytest.raises(ValueError, match=r"max_grad_norm must be > 0, got -1.0"):
        make_population(base, None, members)
    # Seeds past the bound: --seed 4294967295 --seeds 2 makes a member with seed 2**32.
    members = build_members(base, None, SweepSpec(seeds=(MAX_SEED, MAX_SEED + 1)))
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 4294967295\], got 4294967296"):
        make_population(base, None, members)


def test_pbt_ranges_must_be_valid_values_of_the_field():
    from rljax.agents.ppo import PPOConfig
    from rljax.training.hooks.pbt import PBTSpec, validate_pbt

    cfg = PPOConfig()
    validate_pbt(PBTSpec(interval=1, fields={"gamma": (0.9, 1.0)}), cfg, 4)
    with pytest.raises(ValueError, match=r"PBT range of gamma.*gamma must be in \[0, 1\], got 1.5"):
        validate_pbt(PBTSpec(interval=1, fields={"gamma": (0.9, 1.5)}), cfg, 4)


# ----- the command line: exit status 2, one line naming the field, no traceback -----

def _run_in_process(argv, capsys):
    from experiments import dqn_cartpole

    try:
        status = dqn_cartpole.main(argv)
    except SystemExit as exc:
        status = exc.code
    return status, capsys.readouterr().err


# A small budget so that, were a bad value accepted, the run would end quickly (and fail the test).
SMALL = ["--total-timesteps", "2000", "--learning-starts", "0", "--run-dir", "none", "--quiet",
         "--no-compile-cache"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("flags, field", [
    (["--max-grad-norm", "-1"], "max_grad_norm"),
    (["--max-grad-norm", "nan"], "max_grad_norm"),
    (["--seed", "99999999999999999999"], "seed"),
    (["--total-timesteps", "1e16"], "total_timesteps"),
])
def test_cli_refuses_bad_values(flags, field, capsys):
    status, err = _run_in_process([*SMALL, *flags], capsys)
    assert status == 2, err
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if field in line]) == 1, err


@pytest.mark.timeout(300)
def test_cli_sweep_refuses_bad_member_values(capsys):
    status, err = _run_in_process(["sweep", "--grid", "max_grad_norm=-1,1", "--no-plots", *SMALL], capsys)
    assert status == 2, err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if "max_grad_norm" in line] == \
        ["error: max_grad_norm must be > 0, got -1.0"], err


@pytest.mark.timeout(120)
def test_cli_subprocess_exits_2_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "experiments.dqn_cartpole", "--max-grad-norm", "-1",
                           "--run-dir", "none"], cwd=ROOT, capture_output=True, text=True, timeout=110,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "max_grad_norm" in line]
    assert len(lines) == 1 and "max_grad_norm must be > 0, got -1.0" in lines[0], proc.stderr
