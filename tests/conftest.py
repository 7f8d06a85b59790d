"""Test-session settings.

A persistent XLA compilation cache shared by the whole session (and its subprocesses): many tests
train the same small programs several times (an uninterrupted run, an interrupted one, its resume),
and compiling dominates their time on a 2-core machine. Recompilation tests count backend compiles
during chunks, which a cache hit does not hide (a hit is not a compile).

The suite's own XLA flags (:data:`SUITE_XLA_FLAGS`), in this process and every subprocess a test
starts: the CPU backend's loop emitters instead of its fusion emitters, and each program's machine
code generated as one piece instead of split for parallel code generation (which two workers on two
cores cannot use). Measured on a 2-core machine, the emitters compile the suite's small programs
about 30 % faster and the single piece another ~6 %; the programs run slower, which tiny ones do not
notice, and compute the same maths (every comparison in the suite is between two programs compiled
alike). (Backend optimisation level 1 compiled ~17 % faster still but aborted XLA on a sweep's
program, and level 0 made SAC's losses NaN: neither is used.) ``jax.random``'s hash compiles as
JAX's loop, rljax's default (``RLJAX_ROLLED_THREEFRY``, :data:`rljax.core.prng.ROLLED_ENV`); the
straight-line hash a user may choose has the same bits (``tests/unit/core/test_prng.py`` checks it).
``RLJAX_SUITE_XLA_DEFAULTS=1`` runs the suite with XLA's and rljax's defaults instead, as a user's
runs compile.
"""

import os
import tempfile

import jax
import pytest


SUITE_XLA_FLAGS = () if os.environ.get("RLJAX_SUITE_XLA_DEFAULTS") else (
    "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")
"""The XLA flags every program of the suite compiles with (the module docstring says why)."""


def suite_xla_flags(devices: int | None = None) -> str:
    """``XLA_FLAGS`` for a subprocess: :data:`SUITE_XLA_FLAGS`, and ``devices`` fake CPU devices when given
    (without, the subprocess chooses its own device count, e.g. with ``--num-devices``)."""
    count = () if devices is None else (f"--xla_force_host_platform_device_count={devices}",)
    return " ".join((*count, *SUITE_XLA_FLAGS))


os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *SUITE_XLA_FLAGS]).strip()
_CACHE = os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="rljax-test-xla-"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _tiny_runs() -> dict:
    """One tiny run per algorithm kind (a few hundred env steps: barely trained weights, which is all
    loading, evaluating and exporting need; observation normalisation on wherever the algorithm has
    it, so the folded-in statistics are not the identity)."""
    from rljax.agents.alphazero import AlphaZeroConfig
    from rljax.agents.c51 import C51Config
    from rljax.agents.d4pg import D4PGConfig
    from rljax.agents.dqn import DQNConfig
    from rljax.agents.muzero import MuZeroConfig
    from rljax.agents.ppo import PPOConfig
    from rljax.agents.pqn import PQNConfig
    from rljax.agents.sac import SACConfig
    from rljax.agents.td3 import TD3Config

    ppo = dict(total_timesteps=8 * 16 * 4, updates_per_chunk=2, num_envs=8, num_steps=16, num_epochs=1,
               num_minibatches=2, hidden_sizes=(16, 16), normalize_obs=True)
    dqn_small = dict(env="CartPole-v1", total_timesteps=4 * 2 * 40, updates_per_chunk=10, num_envs=4, num_steps=2,
                     batch_size=16, buffer_size=64, learning_starts=32, hidden_sizes=(16,), normalize_obs=True)
    return {
        "ppo-cartpole": PPOConfig(env="CartPole-v1", **ppo),
        "ppo-pendulum": PPOConfig(env="Pendulum-v1", **ppo),
        # A recurrent policy (not in TINY_RUN_NAMES: its load and export have their own tests; the policy server's use it).
        "ppo-gru": PPOConfig(env="CartPole-v1", **{**ppo, "hidden_sizes": (16,)}, memory="gru", memory_size=8),
        "dqn": DQNConfig(env="CartPole-v1", total_timesteps=4 * 2 * 40, updates_per_chunk=10, num_envs=4, num_steps=2,
                         batch_size=16, buffer_size=64, learning_starts=32, hidden_sizes=(16,), dueling=True,
                         normalize_obs=True),
        "sac": SACConfig(total_timesteps=4 * 60, updates_per_chunk=10, num_envs=4, num_steps=1, batch_size=16,
                         buffer_size=128, learning_starts=32, hidden_sizes=(16,), normalize_obs=True),
        "td3": TD3Config(total_timesteps=4 * 60, updates_per_chunk=10, num_envs=4, batch_size=16, buffer_size=128,
                         learning_starts=32, hidden_sizes=(16,), normalize_obs=True),
        "pqn": PQNConfig(total_timesteps=16 * 16 * 2, updates_per_chunk=2, num_envs=16, num_steps=16, num_epochs=1,
                         num_minibatches=2, hidden_sizes=(16,)),
        # The distributional family: Rainbow (C51's head with every DQN option and noisy layers; the policy
        # acts on the mean of the noise and of the distribution) and D4PG's categorical critic. QR-DQN acts
        # through the same Q-learner path with its head's mean (tests/unit/agents/test_qrdqn.py); left out for
        # the default suite's time.
        "c51-rainbow": C51Config(**dqn_small, num_atoms=11, double_q=True, dueling=True, n_step=3, prioritized=True,
                             noisy=True, epsilon_start=0.0, epsilon_end=0.0),
        "d4pg": D4PGConfig(total_timesteps=4 * 60, updates_per_chunk=10, num_envs=4, batch_size=16, buffer_size=128,
                           learning_starts=32, hidden_sizes=(16,), normalize_obs=True, num_atoms=11),
        # Search over a two-player game: a dict observation with a legal-action mask and whose turn it is.
        "alphazero": AlphaZeroConfig(env="TicTacToe-v0", total_timesteps=8 * 4 * 4, updates_per_chunk=2, num_envs=8,
                                     num_steps=4, num_minibatches=2, num_simulations=4, hidden_sizes=(16,),
                                     encoder="mlp", eval_interval=2, eval_episodes=8),
        # Search over a learned model, on the same game: categorical values and rewards, a two-step unroll.
        "muzero": MuZeroConfig(env="TicTacToe-v0", total_timesteps=8 * 4 * 4, updates_per_chunk=2, num_envs=8,
                               num_steps=4, num_minibatches=2, num_simulations=4, hidden_sizes=(16,), latent_size=8,
                               unroll_steps=2, support_size=3, encoder="mlp"),
    }


TINY_RUN_NAMES = ("ppo-cartpole", "ppo-pendulum", "dqn", "sac", "td3", "pqn", "c51-rainbow", "d4pg")
"""The tiny runs the load and export tests of every algorithm kind go over (the AlphaZero and MuZero runs, of a dict
observation, have their own in tests/integration/test_search_stack.py)."""


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """``tiny_run(name) -> (run_dir, TrainResult)``: the tiny run ``name`` (:data:`TINY_RUN_NAMES`),
    trained once per test process on first use and shared by the tests that only read it (load,
    eval, export). A test that writes into the run directory writes only below ``eval/``."""
    import rljax

    configs, cache = _tiny_runs(), {}

    def get(name: str):
        if name not in cache:
            run_dir = tmp_path_factory.mktemp(f"tiny-{name}") / "run"
            cache[name] = (run_dir, rljax.train(configs[name], options=rljax.RunOptions(run_dir=run_dir, quiet=True,
                                                handle_signals=False)))
        return cache[name]

    return get


# ----- the backend the suite runs on: tolerances, kernel checks and bit-exactness that know it -----
#
# The suite runs on the CPU (CI) and on a GPU machine. Three kinds of check depend on the backend:
# float tolerances (a GPU reduces in another order: a jit-vs-eager comparison differs by ~2e-5
# there), kernel checks (jaxlib's LAPACK custom calls exist only on the CPU), and bit-identity
# across processes (a GPU is bit-exact between processes only with XLA's deterministic flags).

GPU_DETERMINISTIC_FLAGS = ("--xla_gpu_deterministic_ops=true",)
"""The XLA flags that make GPU programs deterministic (``rljax.runtime.determinism.DETERMINISTIC_XLA_FLAGS``)."""


def backend() -> str:
    """The default JAX backend of this test process: ``"cpu"``, ``"gpu"`` or ``"tpu"``."""
    return jax.default_backend()


def bitexact_backend() -> bool:
    """Whether separate processes of the same program give the same bits here: always on the CPU;
    on other backends only when XLA's deterministic flags are set (:mod:`rljax.cli.process`)."""
    from rljax.runtime.determinism import deterministic_flags_set

    return backend() == "cpu" or deterministic_flags_set(os.environ.get("XLA_FLAGS", ""))


def float_rtol(cpu: float = 1e-5, accelerator: float = 1e-4) -> float:
    """A relative tolerance for comparing two float32 computations of the same maths (jit vs eager,
    vmapped vs not): ``cpu`` on the CPU, the looser ``accelerator`` elsewhere (other kernels,
    other reduction orders)."""
    return cpu if backend() == "cpu" else accelerator


def cpu_subprocess_env(devices: int = 1, **extra: str) -> dict:
    """The environment of a subprocess that must run on ``devices`` fake CPU devices even on a GPU
    machine (with the suite's XLA flags): ``JAX_PLATFORMS=cpu`` (JAX would otherwise pick the GPU) and no visible CUDA device
    (the CUDA plugin then never initialises, so it cannot crash the process at teardown), the
    repository on ``PYTHONPATH``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {**os.environ, "XLA_FLAGS": suite_xla_flags(devices), "JAX_PLATFORMS": "cpu",
            "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": root, **extra}


# ----- the default suite and --slow -----
#
# The default suite (CI's, about 11 minutes with two workers on a 2-core machine) runs every unit
# test and one end-to-end check of every guarantee; a test marked ``slow`` is a longer or repeated
# version of a check the default suite runs in short, and its marker's comment names that short
# version. What is marked slow: learning runs beyond PPO's, IMPALA's and the host path's (each
# algorithm's probe-env tests stand for them); multi-process and multi-device variants beyond one
# per mechanism; repeats of a guarantee over more algorithms, games or envs than it needs to be
# checked by default; registry-wide training; the benchmark scripts' full tables. README commands
# that are variants of others (tests/integration/test_doc_commands.py: README_VARIANTS) run with --slow
# when -m slow does not deselect them (full-size experiments: not in CI's slow tier).


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow: registry-wide training, full benchmark tables, long "
                          "learning runs (the default suite runs a short version of each)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long version of a check whose short version runs by default; "
                                       "runs only with --slow")
    config.addinivalue_line(
        "markers", "requires_bitexact_backend: compares bits across processes (a resume in another process); "
                   "runs on the CPU always, elsewhere only with XLA's deterministic flags in XLA_FLAGS")


# ----- scheduling over pytest-xdist workers (pyproject.toml: --dist loadfile --no-loadscope-reorder) -----
#
# Each test module is one unit of work, handed to whichever worker is free, so a module-scoped
# fixture (a trained run, a multi-process job) is built once. (pytest-xdist's finer ``loadgroup``
# cannot group tests under pytest 9: it renames node ids, which pytest 9 no longer lets a plugin do.)
# The modules below go first, the most expensive first (measured on a 2-core machine): long units
# started last would leave one worker alone at the end of the suite.

RUN_FIRST = (
    "tests/integration/test_doc_commands.py",
    "tests/integration/test_multihost.py",
    "tests/unit/policy/test_export.py",
    "tests/unit/test_env.py",
    "tests/integration/test_memory.py",
    "tests/integration/test_reliability.py",
    "tests/unit/store/test_checkpoint.py",
    "tests/integration/test_data_parallel.py",
    "tests/unit/training/test_sweep.py",
    "tests/unit/agents/test_ppo.py",
    "tests/unit/suites/test_brax.py",
    "tests/integration/test_observation_shapes.py",
    "tests/unit/suites/test_craftax.py",
    "tests/integration/test_gymnax_envs.py",
    "tests/integration/test_learning_signal.py",
    "tests/unit/agents/test_sac.py",
    "tests/integration/test_fault_soak.py",
    "tests/integration/test_run_directory.py",
)
"""Modules whose tests start first, in this order (the rest follow in collection order)."""


def _schedule(items: list) -> None:
    """Orders ``items`` as :data:`RUN_FIRST` says."""
    rank = {path: i for i, path in enumerate(RUN_FIRST)}
    keys = {id(item): rank.get(item.nodeid.split("::")[0], len(RUN_FIRST)) for item in items}
    items.sort(key=lambda item: keys[id(item)])  # stable: collection order within a module


def pytest_collection_modifyitems(config, items):
    _schedule(items)
    if not config.getoption("--slow"):
        skip_slow = pytest.mark.skip(reason="a long version of a check the default suite runs in short: run with --slow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip_slow)
    marked = [item for item in items if "requires_bitexact_backend" in item.keywords]
    if not marked or bitexact_backend():  # (asking starts JAX's backend: only when a test needs the answer)
        return
    skip = pytest.mark.skip(reason=f"bit-identity across processes is guaranteed on the {backend()} backend only in "
                                   f"deterministic mode: rerun with XLA_FLAGS={' '.join(GPU_DETERMINISTIC_FLAGS)}")
    for item in marked:
        item.add_marker(skip)
