"""User envs named on the command line (``--env module:Name``, ``--env-param``, ``--env-kwarg``), and
runs of env objects recorded so that ``rljax resume RUN_DIR`` rebuilds them.

The env is a small pure-JAX env in a module written to a temporary directory (never on the import
path of the test process unless a test puts it there), so each test sees what a user project sees.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.store.checkpoint import PREEMPTED_EXIT_CODE
from rljax.store.tracking import read_chunks
from tests.support.runs import final_leaves, sigterm_after_progress, strip

ROOT = pathlib.Path(__file__).resolve().parents[2]

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
    return subprocess.run([sys.executable, "-m", "rljax.cli.main", *args], cwd=cwd, env=_env_vars(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(600)
def test_an_env_object_is_recorded_by_name_and_resumes_from_the_cli(user_module, tmp_path):
    """Regression: ``rljax.train(config, env=LineWalk())`` recorded ``"env": "CartPole-v1"`` (the
    config default), so ``rljax resume`` rebuilt CartPole and found no restorable checkpoint."""
    name, project = user_module
    module = __import__(name)
    config = PPOConfig(**SMALL)
    full = rljax.train(config, env=module.LineWalk(), options=rljax.RunOptions(run_dir=tmp_path / "full", quiet=True,
                                                                               checkpoint_every=1,
                                                                               handle_signals=False))
    cut = tmp_path / "cut"
    part = rljax.train(config, env=module.LineWalk(), options=rljax.RunOptions(run_dir=cut, quiet=True,
                                                                               checkpoint_every=1, handle_signals=False,
                                                                               on_chunk=lambda c, state, row: c == 1))
    assert part.preempted == "on_chunk"
    assert json.loads((cut / "config.json").read_text())["env"] == f"{name}:LineWalk"
    resumed = _cli(["resume", str(cut), "--quiet", "--no-compile-cache"], cwd=project)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = final_leaves(tmp_path / "full"), final_leaves(cut)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert strip(read_chunks(cut)) == strip(full.rows) and len(full.rows) == 4


LAUNCHER = textwrap.dedent('''
    # What the installed `rljax` console script is: sys.path[0] is this file's folder, not the cwd.
    import sys
    from rljax.cli.main import main
    sys.exit(main())
''')


@pytest.mark.slow  # by default the CLI resume of a named env object below and the fault soak's SIGTERM/SIGKILL resumes
@pytest.mark.requires_bitexact_backend
@pytest.mark.timeout(900)
def test_a_named_user_env_preempted_by_sigterm_resumes_bit_exactly(user_module, tmp_path):
    """The target: ``--env mod:LineWalk --env-param ... --env-kwarg ...`` trains from the command
    line, SIGTERM stops it (status 75), and ``rljax resume RUN_DIR``, run as the console script
    (whose ``sys.path`` lacks the working directory), continues it to the bits and rows of an
    uninterrupted run. As in test_checkpoint's SIGTERM test, the stopped run is planned for 10**8
    env steps and resumed with the reference's shorter total (learning rate not annealed)."""
    name, project = user_module
    steps_per_chunk = 4 * 16 * 2
    flags = ["--env", f"{name}:LineWalk", "--env-param", "goal=0.5", "--env-param", "max_steps_in_episode=30",
             "--env-kwarg", "start_width=0.25", "--checkpoint-every", "3", *SMALL_FLAGS]
    cmd = [sys.executable, "-m", "experiments.ppo_cartpole"]
    run = tmp_path / "cut"
    returncode, err = sigterm_after_progress(cmd + flags + ["--total-timesteps", str(10**8), "--run-dir", str(run)],
                                             _env_vars(), project, tmp_path / "cut.stderr")
    assert returncode == PREEMPTED_EXIT_CODE, err[-2000:]
    saved = json.loads((run / "config.json").read_text())
    assert saved["env"] == f"{name}:LineWalk"
    assert saved["env_params"] == ["goal=0.5", "max_steps_in_episode=30"]
    assert saved["env_kwargs"] == ["start_width=0.25"]
    cut_rows = read_chunks(run)
    assert 2 <= len(cut_rows) < 10**8 // steps_per_chunk

    total = steps_per_chunk * (len(cut_rows) + 3)
    ref = subprocess.run(cmd + flags + ["--total-timesteps", str(total), "--quiet", "--run-dir", str(tmp_path / "ref")],
                         env=_env_vars(), cwd=project, capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-2000:]
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "rljax_script.py").write_text(LAUNCHER)
    resumed = subprocess.run([sys.executable, str(tmp_path / "bin" / "rljax_script.py"), "resume", str(run),
                              "--total-timesteps", str(total), "--quiet"], env=_env_vars(), cwd=project,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = final_leaves(tmp_path / "ref"), final_leaves(run)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    rows = read_chunks(run)
    assert len(rows) == len(cut_rows) + 3
    assert strip(rows) == strip(read_chunks(tmp_path / "ref"))
    # The params the run trained with are the overridden ones.
    policy = rljax.load(run)
    assert float(policy.env_params.goal) == 0.5 and int(policy.env_params.max_steps_in_episode) == 30


# ----- make("module:Name"): what it accepts, and each error naming the bad value -----

def test_make_builds_a_class_or_a_factory_with_kwargs(user_module):
    name, _ = user_module
    env, params = rljax.make(f"{name}:LineWalk", start_width=0.25)
    assert type(env).__name__ == "LineWalk" and env.start_width == 0.25 and params == env.default_params
    env, params = rljax.make(f"{name}:make_line", goal=0.3)  # a factory returning (env, params)
    assert float(params.goal) == 0.3
    env, params = rljax.make(f"{name}:make_line_env")  # a factory returning the env alone
    assert params == env.default_params


@pytest.mark.parametrize("attr, message", [
    ("LineWlk", r"has no attribute 'LineWlk' \(did you mean 'LineWalk'\?\); its callables: .*make_line"),
    ("GOAL", r"GOAL is a float, not callable; name a class or a factory function"),
    ("not_an_env", r"not_an_env\(\.\.\.\) returned dict, not an env: it must return an env object"),
    ("LineWalk.nope", r"has no attribute 'nope'"),
])
def test_make_errors_name_the_bad_attribute(user_module, attr, message):
    name, _ = user_module
    with pytest.raises(ValueError, match=message) as err:
        rljax.make(f"{name}:{attr}")
    assert f"env '{name}:{attr}'" in str(err.value)


def test_make_errors_for_a_missing_module_a_bad_spec_and_a_bad_call(user_module):
    name, project = user_module
    with pytest.raises(ValueError, match=r"env 'no_such_mod_x:Env': no module named 'no_such_mod_x' \(searched the "
                                         r"working directory .*run from the folder that holds no_such_mod_x\.py"):
        rljax.make("no_such_mod_x:Env")
    with pytest.raises(ValueError, match=r"env 'my mod:Env': a user env is named 'package\.module:Name'"):
        rljax.make("my mod:Env")
    with pytest.raises(ValueError, match=rf"calling {name}:LineWalk\(size=3\) failed: TypeError"):
        rljax.make(f"{name}:LineWalk", size=3)
    (project / "broken_env_mod.py").write_text("import not_installed_anywhere_x\n")
    with pytest.raises(ValueError, match=r"importing module 'broken_env_mod' failed: ModuleNotFoundError: .*"
                                         r"not_installed_anywhere_x"):
        rljax.make("broken_env_mod:Env")
    sys.modules.pop("broken_env_mod", None)
    with pytest.raises(ValueError, match=r"unknown environment 'Nothing-v9'.*'package\.module:ClassName'"):
        rljax.make("Nothing-v9")


def test_the_working_directory_is_importable_without_being_on_sys_path(user_module, monkeypatch):
    """The `rljax` console script's sys.path lacks the working directory; `python -m` has it."""
    name, project = user_module
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(project))])
    env, _ = rljax.make(f"{name}:LineWalk")
    assert type(env).__name__ == "LineWalk" and str(project) in sys.path


def _main(argv, capsys):
    from rljax.cli.main import main

    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    return status, capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--env-param", "gaol=2"], "'gaol' is not a param of LineParams (did you mean 'goal'?); valid names: "),
    (["--env-param", "goal=far"], "--env-param goal=far: 'far' is not a number (goal is float)"),
    (["--env-param", "goal"], "env_params entry 'goal' must be NAME=VALUE"),
    (["--env-kwarg", "width=2"], "calling {name}:LineWalk(width=2) failed: TypeError"),
])
def test_cli_env_flag_errors_exit_2_naming_the_value(user_module, tmp_path, capsys, flags, message):
    name, _ = user_module
    run = tmp_path / "run"
    status, err = _main(["train", "ppo", "--env", f"{name}:LineWalk", *flags, "--run-dir", str(run), "--quiet",
                         "--no-compile-cache"], capsys)
    assert status == 2, err
    assert message.format(name=name) in err and "Traceback" not in err
    assert not (run / "config.json").exists()  # refused before the run directory got anything


# ----- what config.json records for an env object -----

def test_rebuild_names_are_claimed_only_when_they_rebuild_the_env(user_module):
    import gymnax

    from rljax.core.registry import rebuild_name

    name, _ = user_module
    module = __import__(name)
    walk = module.LineWalk()
    assert rebuild_name(walk, walk.default_params) == f"{name}:LineWalk"
    assert rebuild_name(walk, walk.default_params, f"{name}:make_line_env") == f"{name}:make_line_env"
    # Other constructor arguments or params: only with the kwargs / overrides that rebuild them.
    narrow = module.LineWalk(0.25)
    assert rebuild_name(narrow, narrow.default_params) is None
    assert rebuild_name(narrow, narrow.default_params, env_kwargs=["start_width=0.25"]) == f"{name}:LineWalk"
    moved = walk.default_params.replace(goal=2.0)
    assert rebuild_name(walk, moved) is None
    assert rebuild_name(walk, moved, env_param_specs=["goal=2"]) == f"{name}:LineWalk"
    # A lambda in the env, a class defined in a function: no name rebuilds them.
    odd = module.LineWalk()
    odd.start_width = lambda: 0.5
    assert rebuild_name(odd, odd.default_params) is None

    class Local(module.LineWalk):
        pass

    assert rebuild_name(Local(), Local().default_params) is None
    # Registered and gymnax envs get their own names, whatever config.env said.
    pendulum, params = rljax.make("Pendulum-v1")
    assert rebuild_name(pendulum, params, "CartPole-v1") == "Pendulum-v1"
    acrobot, params = gymnax.make("Acrobot-v1")
    assert rebuild_name(acrobot, params, "CartPole-v1") == "gymnax/Acrobot-v1"


def test_env_params_are_recorded_hashed_and_checked_on_resume(user_module, tmp_path):
    from rljax.store.rundir import ConfigMismatchError
    from rljax.store.tracking import config_hash

    name, _ = user_module
    config = PPOConfig(**SMALL, env=f"{name}:LineWalk", env_params=("goal=0.5",))
    run = tmp_path / "run"
    result = rljax.train(config, options=rljax.RunOptions(run_dir=run, quiet=True, handle_signals=False,
                                                          on_chunk=lambda c, s, r: c == 0))
    assert float(np.asarray(result.state.env_params.goal)) == 0.5
    saved = json.loads((run / "config.json").read_text())
    assert saved["env"] == f"{name}:LineWalk" and saved["env_params"] == ["goal=0.5"] and saved["env_kwargs"] == []
    assert config_hash(config) != config_hash(PPOConfig(**SMALL, env=f"{name}:LineWalk"))
    with pytest.raises(ConfigMismatchError, match=r"env_params: saved \['goal=0.5'\], now \['goal=0.7'\]"):
        rljax.train(PPOConfig(**SMALL, env=f"{name}:LineWalk", env_params=("goal=0.7",)),
                    options=rljax.RunOptions(run_dir=run, resume=True, quiet=True, handle_signals=False))


def _snapshot(run_dir):
    """Every file under a run directory (except its lock) -> its bytes."""
    return {p.relative_to(run_dir): p.read_bytes() for p in sorted(pathlib.Path(run_dir).rglob("*"))
            if p.is_file() and "lock" not in p.name}


@pytest.mark.timeout(600)
def test_a_python_object_env_is_recorded_as_such_and_the_cli_says_what_to_pass(user_module, tmp_path, capsys):
    from rljax.core.registry import EnvNotRebuildableError

    name, _ = user_module
    module = __import__(name)
    config = PPOConfig(**SMALL)
    run = tmp_path / "run"
    rljax.train(config, env=module.LineWalk(0.25), options=rljax.RunOptions(run_dir=run, quiet=True, checkpoint_every=1,
                                                                            handle_signals=False,
                                                                            on_chunk=lambda c, s, r: c == 1))
    recorded = f"python-object:{name}:LineWalk"
    assert json.loads((run / "config.json").read_text())["env"] == recorded
    before = _snapshot(run)
    status, err = _main(["resume", str(run), "--quiet", "--no-compile-cache"], capsys)
    assert status == 2, err
    assert f"class {name}:LineWalk that cannot be rebuilt by name" in err
    assert f"rljax.train(config, env=LineWalk(...), options=rljax.RunOptions(run_dir={str(run)!r}, resume=True))" in err
    assert "--env package.module:Name" in err and "compiling" not in err
    assert _snapshot(run) == before  # nothing written, moved or lost
    status, err = _main(["eval", str(run), "--episodes", "2", "--no-compile-cache"], capsys)
    assert status == 2 and "cannot be rebuilt by name" in err
    with pytest.raises(EnvNotRebuildableError, match=r"rljax\.load\("):
        rljax.load(run)
    assert rljax.load(run, env=module.LineWalk(0.25)).config.env == recorded
    # From Python, with the object again, the run resumes (and keeps its record).
    rest = rljax.train(config, env=module.LineWalk(0.25), options=rljax.RunOptions(run_dir=run, resume=True, quiet=True,
                       checkpoint_every=1, handle_signals=False))
    assert rest.timings["start_chunk"] == 2 and len(read_chunks(run)) == 4
    assert json.loads((run / "config.json").read_text())["env"] == recorded


@pytest.mark.timeout(600)
def test_a_run_saved_before_env_records_resumes_from_python_as_before(user_module, tmp_path, monkeypatch):
    """A config.json and checkpoints written before ``env_kwargs``/``env_params`` existed (simulated:
    the fields dropped as they are written, the env object not recorded) say ``CartPole-v1`` for an
    env object; resuming from
    Python with the object (twice: the first resume writes the new fields) ends with the bits of an
    uninterrupted run, and keeps the old name."""
    import rljax.core.registry
    import rljax.store.tracking

    name, _ = user_module
    module = __import__(name)
    config = PPOConfig(**SMALL)
    full = rljax.train(config, env=module.LineWalk(), options=rljax.RunOptions(run_dir=tmp_path / "full", quiet=True,
                                                                               handle_signals=False))
    real, real_resolve = rljax.store.tracking.config_to_dict, rljax.core.registry.resolve_run
    monkeypatch.setattr(rljax.store.tracking, "config_to_dict",
                        lambda c: {k: v for k, v in real(c).items() if k not in ("env_kwargs", "env_params")})
    monkeypatch.setattr(rljax.core.registry, "resolve_run",
                        lambda c, env=None, params=None, **kw: real_resolve(c, env, params, **{**kw, "record": False}))
    run = tmp_path / "old"
    rljax.train(config, env=module.LineWalk(), options=rljax.RunOptions(run_dir=run, quiet=True, checkpoint_every=1,
                                                                        handle_signals=False,
                                                                        on_chunk=lambda c, s, r: c == 0))
    old = json.loads((run / "config.json").read_text())
    assert old["env"] == "CartPole-v1" and "env_params" not in old
    monkeypatch.setattr(rljax.store.tracking, "config_to_dict", real)
    monkeypatch.setattr(rljax.core.registry, "resolve_run", real_resolve)
    mid = rljax.train(config, env=module.LineWalk(), options=rljax.RunOptions(run_dir=run, resume=True, quiet=True,
                                                                              checkpoint_every=1, handle_signals=False,
                                                                              on_chunk=lambda c, s, r: c == 2))
    assert mid.preempted == "on_chunk"
    rest = rljax.train(config, env=module.LineWalk(), options=rljax.RunOptions(run_dir=run, resume=True, quiet=True,
                                                                               checkpoint_every=1,
                                                                               handle_signals=False))
    a, b = final_leaves(tmp_path / "full"), final_leaves(run)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert strip(read_chunks(run)) == strip(full.rows)
    assert rest.timings["start_chunk"] == 3
    assert json.loads((run / "config.json").read_text())["env"] == "CartPole-v1"


# ----- sweeps -----

@pytest.mark.timeout(600)
def test_a_sweep_over_a_named_user_env_with_kwargs_and_params(user_module, tmp_path, capsys):
    from experiments import ppo_cartpole

    name, _ = user_module
    sweep = tmp_path / "sweep"
    status = ppo_cartpole.main(["sweep", "--env", f"{name}:make_line", "--env-kwarg", "goal=0.7",
                                "--env-param", "step_size=0.2", "--grid", "env.max_steps_in_episode=10,30",
                                "--total-timesteps", str(4 * 16 * 2), *SMALL_FLAGS, "--run-dir", str(sweep),
                                "--no-plots", "--quiet"])
    assert status == 0, capsys.readouterr().err
    saved = json.loads((sweep / "config.json").read_text())
    assert (saved["env"], saved["env_kwargs"], saved["env_params"]) == (f"{name}:make_line", ["goal=0.7"],
                                                                        ["step_size=0.2"])
    for member, steps in ((0, 10), (1, 30)):
        params = rljax.load(sweep, member=member).env_params
        assert (int(params.max_steps_in_episode), float(params.step_size)) == (steps, np.float32(0.2))
        assert float(params.goal) == np.float32(0.7)
    status, err = _main(["sweep", "ppo", "--env", f"{name}:LineWalk", "--env-param", "gaol=1", "--seeds", "2",
                         "--run-dir", "none", "--quiet", "--no-compile-cache"], capsys)
    assert status == 2 and "(did you mean 'goal'?)" in err, err


# ----- env objects holding spaces, the console script's import order, one-line errors -----


def test_env_objects_holding_spaces_are_recorded_by_name():
    """An env that keeps its spaces as attributes (every suite env, a user env building them in
    __init__) compared unequal to its own rebuild: rljax's Box and Discrete have a shape and dtype but
    are not arrays."""
    from rljax.env import Box, Discrete
    from rljax.core.registry import _same, rebuild_name

    assert _same(Box(-1.0, 1.0, (2,)), Box(-1.0, 1.0, (2,))) and _same(Discrete(3), Discrete(3))
    assert not _same(Box(-1.0, 1.0, (2,)), Box(-1.0, 2.0, (2,))) and not _same(Discrete(3), Discrete(4))
    pytest.importorskip("navix", reason="needs the 'navix' extra")
    env, params = rljax.make("navix/Navix-Empty-5x5-v0")
    assert rebuild_name(env, params, "CartPole-v1") == "navix/Navix-Empty-5x5-v0"
    assert rebuild_name(env, params.replace(max_steps_in_episode=7), "CartPole-v1") is None


def test_the_console_script_imports_the_users_module_before_installed_ones(tmp_path):
    """The rljax console script has the working directory nowhere on sys.path; it is put first, as
    ``python -m`` has it, so a user's own ``envs`` package wins over the ``envs`` rljax installs."""
    pkg = tmp_path / "envs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from rljax.core.registry import make as _make\n\n"
                                     "def MyEnv():\n    return _make('Pendulum-v1')[0]\n")
    code = (f"import sys; sys.path.append({str(ROOT)!r}); from rljax.core.registry import make; "
            f"env, _ = make('envs:MyEnv'); print(type(env).__name__)")
    out = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "Pendulum", out.stderr[-2000:]


@pytest.mark.parametrize("name", ["CartPole-v1", "gymnax/Acrobot-v1"])
def test_constructor_arguments_an_env_does_not_take_are_one_line(name):
    with pytest.raises(ValueError, match=rf"env '{name}' cannot be built with the constructor arguments foo=1 "
                                         r"\(--env-kwarg"):
        rljax.make(name, foo=1)


def test_an_env_param_that_is_not_a_number_is_refused():
    import dataclasses

    import jax.numpy as jnp
    from flax import struct

    from rljax.core.registry import parse_env_params

    @struct.dataclass
    class Params:
        gain: jnp.ndarray = dataclasses.field(default_factory=lambda: jnp.ones((3,)))
        inner: tuple = (1, 2)
        scale: float = 1.0

    with pytest.raises(ValueError, match=r"'inner' holds a tuple, not a number or bool"):
        parse_env_params(["inner=1"], Params())
    with pytest.raises(ValueError, match=r"'gain' holds a \w*Array"):
        parse_env_params(["gain=2"], Params())
    assert float(parse_env_params(["scale=2"], Params())[0].scale) == 2.0


def test_a_missing_suite_package_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    from rljax.core import registry as env_registry

    (tmp_path / "fake_suite_mod.py").write_text(
        "from rljax.suites._adapter import require\n\n"
        "def ids():\n    return ['x']\n\n"
        "def make(env_id, **kwargs):\n    require('no_such_package_rljax_test', 'fakesuite')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(env_registry.SUITES, "fakesuite", "fake_suite_mod")
    from experiments import ppo_cartpole

    assert ppo_cartpole.main(["--env", "fakesuite/x", "--total-timesteps", "512", "--run-dir", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: the 'fakesuite' env suite needs the package 'no_such_package_rljax_test'")
    assert "Traceback" not in "\n".join(err)
