"""Vmapped env steps per second: rljax's built-in envs beside gymnax's implementation of the same env.

    python -m benchmarks.env_throughput                    # N in {1, 64, 1024, 8192}
    python -m benchmarks.env_throughput --envs CartPole-v1 --num-envs 1024 --repeats 5

Each measurement is a jitted ``lax.scan`` of ``vmap(env.step)`` (auto-reset included) with actions
pre-generated outside the timed program (as gymnax's own speed tests do): ``--steps`` steps, or more
at small N so that every measurement covers at least ``--min-env-steps`` env steps (1000 steps of
one env take ~4 ms, too short to time on a VM whose launches cost milliseconds). Both
implementations run in the same process, interleaved, best of ``--repeats``; the ratio column is
rljax / gymnax (> 1 means rljax is faster).
"""

from __future__ import annotations

import argparse
import platform
import time

import gymnax
import jax
import jax.numpy as jnp

import envs

BUILTINS = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"]


def make_runner(env, params, num_envs: int, steps: int):
    """Returns (compiled_fn, args): fn(state, obs, actions, key) runs `steps` vmapped steps."""
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def run(state, actions, key):
        def body(carry, xs):
            state, total = carry
            action, k = xs
            obs, state, reward, term, trunc, info = step(jax.random.split(k, num_envs), state, action, params)
            return (state, total + reward.sum()), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.float32(0.0)), (actions, jax.random.split(key, steps)))
        return state, total

    key = jax.random.key(0)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)
    space = env.action_space(params)
    keys = jax.random.split(jax.random.key(1), steps * num_envs)
    actions = jax.vmap(space.sample)(keys).reshape((steps, num_envs) + tuple(space.shape))
    fn = jax.jit(run).lower(state, actions, key).compile()
    return fn, (state, actions, key)


def measure(fn, args, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="*", default=BUILTINS, choices=BUILTINS)
    ap.add_argument("--num-envs", nargs="*", type=int, default=[1, 64, 1024, 8192])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--min-env-steps", type=int, default=2**18)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {jax.device_count()} "
          f"{jax.default_backend()} device(s), jax {jax.__version__}, gymnax {gymnax.__version__ if hasattr(gymnax, '__version__') else '?'}")
    print(f"| env | N | rljax steps/s | gymnax steps/s | ratio |")
    print(f"|---|---|---|---|---|")
    for name in a.envs:
        ours, ours_params = envs.make(name)
        theirs, theirs_params = gymnax.make(name)
        for n in a.num_envs:
            steps = max(a.steps, -(-a.min_env_steps // n))
            f1, args1 = make_runner(ours, ours_params, n, steps)
            f2, args2 = make_runner(theirs, theirs_params, n, steps)
            t1 = t2 = float("inf")
            for _ in range(a.repeats):  # interleave, so machine noise hits both alike
                t1 = min(t1, measure(f1, args1, 1))
                t2 = min(t2, measure(f2, args2, 1))
            s1, s2 = n * steps / t1, n * steps / t2
            print(f"| {name} | {n} | {s1:,.0f} | {s2:,.0f} | {s1 / s2:.2f} |", flush=True)


if __name__ == "__main__":
    main()
