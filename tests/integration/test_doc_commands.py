"""Every command the docs show runs as written: README.md, docs/runbook.md and the --help examples.

The commands are extracted from the files themselves (``bash`` code fences, joined across ``\\``
line ends, trailing ``# comments`` dropped) and from what ``--help`` prints (lines that start with
``python -m`` or ``rljax``), so a wrong command added to a doc fails here. Each runs in a shell, in
a fresh working directory (the repository on ``PYTHONPATH``, ``python``/``python3``/``.venv/bin/python``
being this interpreter, ``rljax`` the console script), with small step counts: a training command
runs a few updates, its ``--total-timesteps X`` becoming round(X / 5e5) updates (1 to 4, so an
extension stays longer than the run it extends) and a command without it 2 (:func:`_small`; the
env steps per update come from the command's own config, or for a resume from the run's manifest).
Commands of one doc run in its order (the README's ``rljax eval runs/cp3`` needs the run an earlier
line trained), each with a hard timeout; the docs are checked by separate tests, so pytest-xdist runs
them side by side.

To check another docs file (say ``docs/scale-out.md``), add it to :data:`DOCS`; placeholders its
commands use (``RUN_DIR``) are substituted from :data:`PLACEHOLDERS`.
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import suite_xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/runbook.md", "docs/scale-out.md")
PLACEHOLDERS = {"RUN_DIR": "runs/cp3", "SWEEP_DIR": "runs/sweep1"}
"""Names the docs use for a directory an earlier command made (README and runbook both train runs/cp3)."""

TIMEOUT_S = 240  # one command: a start-up, a compile and a few chunks; hangs fail instead of stalling CI

# The two set-up commands create a virtual environment and install into it (pip, from the network):
# not run here. Their shape is checked instead (test_setup_commands_have_the_documented_shape), and
# what they end with (the quick-start training run) runs like every other command.
SETUP = re.compile(r"^python3 -m venv \.venv && \.venv/bin/pip install -e (?P<spec>\S+) "
                   r"&& (?P<then>\.venv/bin/python .*)$")


def _join_lines(lines: list[str]) -> list[str]:
    """Joins ``\\``-continued lines; drops blank and comment-only lines and trailing ``  # comments``."""
    out, pending = [], ""
    for raw in lines:
        line = raw.strip()
        if not line or (line.startswith("#") and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        line = re.sub(r"\s+#.*$", "", pending + line).strip()   # no command here has '#' inside quotes
        pending = ""
        out.append(line)
    return out


def fenced_commands(path: pathlib.Path) -> list[str]:
    """The commands in ``path``'s ``bash`` (or ``sh``/``shell``) code fences, in order."""
    commands, block = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if block is None and re.match(r"^```(bash|sh|shell)\s*$", line.strip()):
            block = []
        elif block is not None and line.strip().startswith("```"):
            commands += _join_lines(block)
            block = None
        elif block is not None:
            block.append(line)
    return commands


def _help(argv: list[str], main) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(argv)
    return out.getvalue()


def help_texts() -> dict[str, str]:
    """``--help`` of every experiment module (and its ``sweep``) and of ``rljax train``/``sweep ALGO``."""
    import importlib

    from rljax.cli import main as cli
    from rljax.cli.flags import algorithm_classes

    texts = {}
    for path in sorted((ROOT / "experiments").glob("*.py")):
        if path.stem == "__init__":
            continue
        main = importlib.import_module(f"experiments.{path.stem}").main
        texts[f"python -m experiments.{path.stem} --help"] = _help(["--help"], main)
        texts[f"python -m experiments.{path.stem} sweep --help"] = _help(["sweep", "--help"], main)
    for algo in sorted(algorithm_classes()):
        for sub in ("train", "sweep"):
            texts[f"rljax {sub} {algo} --help"] = _help([sub, algo, "--help"], cli.main)
    return texts


def help_commands() -> list[str]:
    """The example commands ``--help`` prints: its lines that start with ``python -m`` or ``rljax``."""
    commands = []
    for text in help_texts().values():
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("usage:")]
        joined, pending = [], []
        for line in lines:
            if pending or re.match(r"^\s*(python -m |rljax )", line):
                pending.append(line)
                if not line.rstrip().endswith("\\"):
                    joined += _join_lines(pending)
                    pending = []
        commands += joined
    return list(dict.fromkeys(commands))


_TRAINS = re.compile(r"(?:^|\s)(?:python3?|\.venv/bin/python) -m experiments\.(\w+)(.*)"
                     r"|(?:^|\s)rljax (train|sweep) (\w+)(.*)")
_RESUMES = re.compile(r"(?:^|\s)rljax resume (\S+)")


def _steps_per_update(segment: str, cwd: pathlib.Path) -> int | None:
    """The env steps per update of the run ``segment`` starts (from its own flags and defaults) or
    resumes (from the run's manifest); None for a command that trains nothing."""
    import importlib
    import json
    import shlex

    from rljax.core.config import RunConfig
    from rljax.cli.flags import algorithm_classes, build_parser, config_from_args

    m = _TRAINS.search(segment)
    if m and m.group(1):
        module = importlib.import_module(f"experiments.{m.group(1)}")
        config_cls = next(v for v in vars(module).values() if isinstance(v, type) and issubclass(v, RunConfig))
        defaults, args = dict(module.DEFAULTS), m.group(2)
    elif m:
        config_cls, defaults, args = algorithm_classes()[m.group(4)], {}, m.group(5)
    else:
        r = _RESUMES.search(segment)
        manifest = cwd / os.path.expandvars(r.group(1).strip("\"'")) / "manifest.json" if r else None
        return json.loads(manifest.read_text())["plan"]["env_steps_per_update"] if manifest and manifest.exists() \
            else None
    tokens = [t for t in shlex.split(args) if t != "sweep"]
    namespace, _ = build_parser(config_cls, defaults).parse_known_args(tokens)
    return config_from_args(config_cls, namespace).env_steps_per_update


def _small(segment: str, cwd: pathlib.Path) -> str:
    """A training command with small step counts (see the module docstring); others as they are."""
    per_update = _steps_per_update(segment, cwd)
    if per_update is None:
        return segment
    if "--total-timesteps" in segment:  # a run, a sweep, a resume that extends: keep the order of sizes
        def shrink(m: re.Match) -> str:
            return f"--total-timesteps {per_update * min(4, max(1, round(float(m.group(1)) / 5e5)))}"

        return re.sub(r"--total-timesteps\s+(\S+)", shrink, segment)
    if _RESUMES.search(segment) or "--resume" in segment:
        return segment  # continues to the run's own total
    return f"{segment} --total-timesteps {2 * per_update}"


def runnable(command: str, cwd: pathlib.Path = ROOT) -> str:
    """``command`` as the test runs it in ``cwd``: placeholders filled, every training part made small."""
    for name, value in PLACEHOLDERS.items():
        command = re.sub(rf"\b{name}\b", value, command)
    parts = re.split(r"(\s*(?:&&|\|\||;)\s*)", command)
    return "".join(p if i % 2 else _small(p, cwd) for i, p in enumerate(parts))


@pytest.fixture
def shell_env(tmp_path_factory):
    """PATH with ``python``, ``python3`` and ``rljax`` for this interpreter and checkout; a HOME of
    its own beside the test session's compile cache (tests/conftest.py), so the experiments' cache
    (~/.cache/rljax/xla) is shared by every command and xdist worker, and leaves the user's alone.
    (Per test, not per module: a module-scoped fixture keeps a module's tests on one xdist worker, see
    tests/conftest.py, and the README's groups should run side by side.)"""
    bin_dir = tmp_path_factory.mktemp("bin")
    # Scripts, not symlinks: a venv's python finds its venv from the path it was started by.
    _script(bin_dir / "python", "")
    _script(bin_dir / "python3", "")
    _script(bin_dir / "rljax", "-m rljax.cli.main ")
    home = pathlib.Path(os.environ.get("JAX_COMPILATION_CACHE_DIR") or tmp_path_factory.mktemp("cache")) / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(home),
           "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    env["XLA_FLAGS"] = suite_xla_flags()  # --num-devices sets up its own fake CPU devices
    return env


def _script(path: pathlib.Path, args: str) -> None:
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" {args}"$@"\n')
    path.chmod(0o755)


def _workdir(tmp_path: pathlib.Path) -> pathlib.Path:
    """A working directory with what the docs assume beside the commands: ``.venv/bin/python`` (the
    venv the set-up command made) and ``my_envs.py`` (the README's own env module, as its
    comment says: a ``GridWorld`` class and a ``make_grid`` factory)."""
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    _script(tmp_path / ".venv" / "bin" / "python", "")
    shutil.copy(ROOT / "tests" / "support" / "grid_env.py", tmp_path / "my_envs.py")
    with open(tmp_path / "my_envs.py", "a", encoding="utf-8") as f:
        f.write("\n\nGridWorld = GridWalk\n\n\ndef make_grid(size: int = 8):\n    return GridWalk()\n")
    return tmp_path


def _run_all(commands: list[str], cwd: pathlib.Path, env: dict[str, str]) -> None:
    failures = []
    for i, command in enumerate(commands):
        shell = runnable(command, cwd)
        try:  # $D (the runbook's requeue examples): a new run directory for each command
            proc = subprocess.run(["bash", "-c", shell], cwd=cwd, env={**env, "D": f"runs/requeue{i}"},
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            failures.append(f"{command}\n  (ran as: {shell})\n  timed out after {TIMEOUT_S} s")
            continue
        if proc.returncode != 0:
            failures.append(f"{command}\n  (ran as: {shell})\n  exit {proc.returncode}: {proc.stderr[-1500:]}")
    assert not failures, "\n\n".join(failures)


def _doc_commands(doc: str) -> list[str]:
    commands = []
    for command in fenced_commands(ROOT / doc):
        m = SETUP.match(command)
        commands.append(m.group("then") if m else command)
    return commands


def test_the_extractor_finds_every_command():
    readme = fenced_commands(ROOT / "README.md")
    assert sum(bool(SETUP.match(c)) for c in readme) == 2, "the README's two set-up commands"
    assert "rljax envs" in readme and any(c.startswith("rljax eval runs/cp3") for c in readme)
    assert any("sweep --grid learning_rate=1e-4,3e-4,1e-3 --grid ent_coef=0,0.01 --seeds 4 --run-dir runs/sweep1"
               in c for c in readme), "a command continued over two lines is one command"
    # The sweep over randomisation bounds, with no --randomize of its own, runs in every suite run.
    dr_sweep = [c for c in readme if " sweep --grid randomize.length=0.25:1,0.25:2" in c]
    assert len(dr_sweep) == 1 and "--randomize" not in dr_sweep[0], dr_sweep
    assert dr_sweep[0] in _commands("README.md", variants=False)
    assert any("rljax resume RUN_DIR --total-timesteps 2e6" == c for c in fenced_commands(ROOT / "docs/runbook.md"))
    helps = help_commands()
    assert "python -m experiments.ppo_cartpole --seed 3 --total-timesteps 1e6 --run-dir runs/cp3" in helps
    sample = "python -m experiments.ppo_cartpole sweep --sample learning_rate=log:1e-4:3e-3 --num-samples 8 --seeds 2"
    assert sample in helps
    # Small step counts: whole updates (PPO CartPole: 4 envs x 128 steps), in the order of the sizes asked
    # for (an extension stays an extension), in every training part of a command.
    assert runnable("python -m experiments.ppo_cartpole --seed 3 --total-timesteps 1e6 --run-dir runs/cp3") == (
        "python -m experiments.ppo_cartpole --seed 3 --total-timesteps 1024 --run-dir runs/cp3")
    assert runnable("python -m experiments.ppo_minatar") == "python -m experiments.ppo_minatar --total-timesteps 16384"
    assert runnable("rljax sweep sac --num-envs 8 --grid learning_rate=1e-4,3e-4") == (
        "rljax sweep sac --num-envs 8 --grid learning_rate=1e-4,3e-4 --total-timesteps 16")
    assert runnable("python -m experiments.ppo_cartpole --run-dir \"$D\" || [ $? -eq 75 ] && rljax resume \"$D\"") == (
        "python -m experiments.ppo_cartpole --run-dir \"$D\" --total-timesteps 1024 || [ $? -eq 75 ] "
        "&& rljax resume \"$D\"")


def test_setup_commands_have_the_documented_shape():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for command in fenced_commands(ROOT / "README.md"):
        m = SETUP.match(command)
        if m:
            spec = m.group("spec").strip("\"'")
            assert spec == "." or re.fullmatch(r"\.\[[\w,]+\]", spec), spec
            assert set(re.findall(r"\w+", spec[2:-1]) if spec != "." else []) <= set(extras), spec
    ci = (ROOT / ".ci" / "run").read_text()
    # What the README says CI runs: its test command, then the slow tier.
    assert 'pip install -q -e ".[test,suites]"' in ci and "python -m pytest -q -n 2\n" in ci
    assert "python -m pytest -q -n 2 --slow -m slow" in ci


ALWAYS_RUN = ("README.md",)
"""The sources whose commands every suite run executes; the others need RLJAX_ALL_DOC_COMMANDS=1."""

README_VARIANTS = (
    # AlphaZero's experiment and its match against the perfect player: tests/integration/test_search_stack.py
    # trains the tiny run and evaluates it from the command line (the experiment itself with --slow).
    "python -m experiments.alphazero_tictactoe --run-dir runs/ttt",
    "rljax eval runs/ttt --opponent envs.board_games:tictactoe_perfect --search --simulations 128",
    # MuZero's experiment: the tiny MuZero run (tests/integration/test_search_stack.py) and its unit tests stand
    # for it; its targets are benchmarks/muzero_targets.py.
    "python -m experiments.muzero_cartpole",
    # IPPO on JaxMARL's MPE: tests/unit/agents/test_mappo.py (IPPO and MAPPO trained, resumed, evaluated,
    # loaded) and tests/unit/suites/test_jaxmarl.py (the adapter) stand for it; its numbers: benchmarks/marl.py.
    "python -m experiments.ippo_mpe",
    # Rainbow is DQN's command above with C51's head and every option on; the tiny Rainbow run of
    # tests/conftest.py (load, eval, export) and tests/unit/agents/test_c51.py stand for it.
    "python -m experiments.rainbow_cartpole",
    # A second sweep of the same module as the README's randomize sweep above (which runs by default, with
    # tests/unit/training/test_sweep.py's grids); here for the default suite's time.
    "python -m experiments.ppo_cartpole sweep --grid learning_rate=1e-4,3e-4,1e-3 --grid ent_coef=0,0.01 --seeds 4 "
    "--run-dir runs/sweep1",
    "python -m experiments.ppo_cartpole --num-devices 2",
    "python -m experiments.ppo_cartpole --env gymnax/Acrobot-v1",
    "python -m experiments.ppo_minatar --encoder mlp --env SpaceInvaders-MinAtar",
    "python -m experiments.ppo_cartpole --randomize length=0.25:2.0 --total-timesteps 1e6 --run-dir runs/dr-mlp",
    "python -m experiments.ppo_cartpole sweep --grid env.length=0.25,0.5,1.0 --seeds 2 --num-devices 2",
    "rljax train sac --env Pendulum-v1",
    "rljax train dqn --env my_envs:make_grid --env-kwarg size=12",
    "python -m experiments.ppo_cartpole --eval-interval 5 --eval-episodes 32",
    "python -m experiments.ppo_pendulum",
    "rljax eval runs/cp3 --env-param length=0.7",
    "rljax train a2c --env CartPole-v1 --rmsprop torch --gae-lambda 1",
    "python -m experiments.ppo_minatar",
    "python -m experiments.dqn_minatar",
    "rljax launch -n 2 -d 2 -- python -m experiments.ppo_cartpole --num-devices 4 --run-dir runs/mh",
    "rljax launch -n 2 -d 2 -- rljax resume runs/mh",
    "python -m experiments.ppo_cartpole --randomize length=0.25:2.0 --total-timesteps 1e6 --run-dir runs/dr-gru "
    "--memory gru --memory-size 128 --hidden-sizes 128 --activation relu",
    "rljax eval runs/dr-gru --env-param length=0.25,0.5,1,1.5,2",
    # Varies sac_pendulum (the same off-policy continuous-control module shape; TD3 trains in test_td3.py).
    "python -m experiments.td3_pendulum",
    # The other on-policy modules beside ppo_cartpole (PQN's and IMPALA's learning and resume: test_pqn.py,
    # test_impala.py) and a user env by name beside the README's other user-env commands (test_user_env_cli.py
    # trains named user envs with kwargs and params from the command line): for the default suite's time.
    "python -m experiments.pqn_cartpole",
    "python -m experiments.impala_cartpole",
    "rljax train ppo --env my_envs:GridWorld --env-param max_steps_in_episode=100",
    # Varies the grid sweep above it (PBT's lineage, perturbation and resume: tests/unit/training/hooks/test_pbt.py).
    "python -m experiments.ppo_cartpole sweep --sample learning_rate=log:1e-4:3e-3 --num-samples 8 "
    "--pbt-interval 4 --pbt learning_rate=1e-5:1e-2 --run-dir runs/pbt1",
)
"""README commands that run only with ``--slow``: variants of a command the README runs anyway (the same
experiment or subcommand with one more flag or another action space), whose difference other default
tests cover (data parallelism, gymnax envs, the flat encoder, domain randomisation, env-param sweeps,
``rljax train`` of a user env factory, evaluation during training, continuous PPO, ``rljax eval
--env-param``, A2C's RMSprop forms: ``tests/unit/agents/test_a2c.py``; the MinAtar experiments at
their full sizes: ``tests/integration/test_minatar.py`` trains each module small; ``rljax launch`` and
a launched resume: ``tests/integration/test_multihost.py`` launches its jobs so; a randomised
recurrent run and its robustness grid: the README's randomisation sweep, ``test_memory.py``,
``test_domain_randomization.py`` and ``tests/unit/cli/test_eval.py``; TD3's module beside SAC's: TD3
trains in ``tests/unit/agents/test_td3.py``; the PBT sweep beside the grid sweep:
``tests/unit/training/hooks/test_pbt.py`` runs PBT sweeps and resumes them). Every other README command runs in every suite run, and every
command of every doc is parsed in every run (:func:`test_every_documented_command_parses_as_written`)."""

GROUPS = 4  # per source: the commands are spread over this many tests, so pytest-xdist runs them side by side


def _groups(commands: list[str], n: int = GROUPS) -> list[list[str]]:
    """``commands`` in ``n`` groups, each in document order: a command that names a directory or
    file an earlier command made (``--run-dir runs/cp3``, then ``rljax eval runs/cp3``; ``> run.toml``,
    then ``--config run.toml``) joins that command's group; the others are dealt out in turn."""
    groups: list[list[str]] = [[] for _ in range(n)]
    made: dict[str, int] = {}
    for i, command in enumerate(commands):
        text = runnable(command)  # placeholders filled: RUN_DIR is runs/cp3
        paths = re.findall(r"(?<![\w/])((?:runs|out)/[\w.-]+)", text) + text.split()
        used = [made[p] for p in paths if p in made]
        g = used[0] if used else i % n
        groups[g].append(command)
        for path in re.findall(r"(?:--run-dir\s+|>\s*)((?:runs|out)/[\w.-]+|[\w.-]+\.\w+)", text):
            made.setdefault(path, g)
    return groups


def _commands(source: str, variants: bool = True) -> list[str]:
    """A doc's commands (the set-up commands' final parts; not the test suite itself; without
    ``variants``, not the README's :data:`README_VARIANTS`), or, for ``--help``, the help examples
    that are not already in a doc."""
    if source != "--help":
        return [c for c in _doc_commands(source) if not c.startswith(".venv/bin/python -m pytest")
                and (variants or source != "README.md" or _variant(c) is None)]
    in_docs = {c for doc in DOCS for c in _doc_commands(doc)}
    return [c for c in help_commands() if c not in in_docs]


def _variant(command: str) -> str | None:
    """The entry of :data:`README_VARIANTS` that ``command`` is, or None (:func:`fenced_commands` has
    already dropped its comment)."""
    return command if command in README_VARIANTS else None


def test_the_readme_variants_are_readme_commands():
    commands = _commands("README.md")
    assert all(any(_variant(c) == v for c in commands) for v in README_VARIANTS), \
        [v for v in README_VARIANTS if not any(_variant(c) == v for c in commands)]
    assert len(_commands("README.md", variants=False)) == len(commands) - len(README_VARIANTS)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("source", [*DOCS, "--help"])
@pytest.mark.parametrize("group", range(GROUPS))
def test_documented_commands_run(source, group, tmp_path, shell_env, request):
    if source not in ALWAYS_RUN and not os.environ.get("RLJAX_ALL_DOC_COMMANDS"):
        # Each command is a fresh process that compiles: all sources take ~7 CPU-minutes more than the
        # README's, which would push the suite past its budget. The README's always run.
        pytest.skip(f"the commands of {source} run with RLJAX_ALL_DOC_COMMANDS=1")
    commands = _groups(_commands(source, variants=request.config.getoption("--slow")))[group]
    if not commands:
        pytest.skip(f"no commands of {source} fell in group {group}")
    _run_all(commands, _workdir(tmp_path), shell_env)


def test_every_source_has_commands_and_groups_keep_dependencies():
    for source in [*DOCS, "--help"]:
        commands = _commands(source)
        assert commands, f"no commands found in {source}"
        groups = _groups(commands)
        assert sorted(c for g in groups for c in g) == sorted(commands)
    readme = _groups(_commands("README.md"))
    for i, group in enumerate(readme):  # each eval/export runs in the group that trained its run directory
        for command in group:
            if command.startswith(("rljax eval", "rljax export")):
                run = re.search(r"runs/[\w.-]+", runnable(command)).group(0)
                trains = next(j for j, g in enumerate(readme) if any(f"--run-dir {run}" in c for c in g))
                assert i == trains, (command, run)
    assert any("rljax eval runs/cp3" in c for g in readme for c in g)
    writes_toml = next(i for i, g in enumerate(readme) if any("> run.toml" in c for c in g))
    assert all(i == writes_toml for i, g in enumerate(readme) for c in g if "--config run.toml" in c or "cfg3" in c)


# Every command of every doc parses as written, in every suite run (cheap: nothing trains). Running
# them all takes several CPU-minutes (RLJAX_ALL_DOC_COMMANDS=1, above); parsing catches what rots
# most: a renamed flag or subcommand, a value out of range, a flag of one command given to another.
ALL_DOCS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))


def _parse_error(tokens: list[str]) -> str | None:
    """Why ``tokens`` (one simple command, as a shell passes it) does not parse, or None; commands
    that are not rljax's (pip, tensorboard, test runners, benchmarks, shell built-ins) are not checked."""
    import importlib

    from rljax.core.config import RunConfig

    while tokens and re.fullmatch(r"\w+=.*", tokens[0]):  # VAR=value before the command
        tokens = tokens[1:]
    if not tokens:
        return None
    if tokens[0] in ("python", "python3", ".venv/bin/python") and tokens[1:2] == ["-m"] and len(tokens) > 2:
        module, argv = tokens[2], tokens[3:]
        if module in ("rljax", "rljax.cli.main"):
            return _rljax_parse_error(argv)
        if not module.startswith("experiments."):
            return None
        experiment = importlib.import_module(module)
        config_cls = next(v for v in vars(experiment).values() if isinstance(v, type) and issubclass(v, RunConfig)
                          and v is not RunConfig and getattr(v, "__module__", "").startswith("rljax.agents"))
        return _config_parse_error(config_cls, dict(getattr(experiment, "DEFAULTS", {})), argv)
    if tokens[0] == "rljax":
        return _rljax_parse_error(tokens[1:])
    return None


def _exits(parse) -> str | None:
    """Runs ``parse()``; the error it prints (and exits with), or None."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parse()
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            return err.getvalue().strip() or f"exit {exit_.code}"
    except (ValueError, TypeError) as error:
        return str(error)
    return None


def _config_parse_error(config_cls, defaults: dict, argv: list[str]) -> str | None:
    from rljax.cli.configfile import parse_with_config
    from rljax.cli.flags import build_parser, config_from_args
    from rljax.cli.sweep import sweep_parser

    sweep = argv[:1] == ["sweep"]
    parser = sweep_parser(config_cls, defaults, "sweep") if sweep else build_parser(config_cls, defaults)
    argv = argv[1:] if sweep else argv
    if "--config" in argv:  # the file is an earlier command's output: check the other flags
        i = argv.index("--config")
        argv = argv[:i] + argv[i + 2:]
    return _exits(lambda: config_from_args(config_cls, parse_with_config(parser, argv, config_cls)[0]))


def _rljax_parse_error(argv: list[str]) -> str | None:
    from rljax.cli.flags import algorithm_classes
    from rljax.cli.main import command_parser

    if argv[:1] in (["--version"], ["--help"]) or not argv:
        return None
    parser, _ = command_parser()
    args = None

    def parse():
        nonlocal args
        args = parser.parse_args(argv)

    error = _exits(parse)
    if error or args is None:
        return error
    if args.subcommand in ("train", "sweep"):
        algos = algorithm_classes()
        if args.algorithm not in algos:
            return f"unknown algorithm {args.algorithm!r}"
        flags = (["sweep"] if args.subcommand == "sweep" else []) + list(args.flags)
        return _config_parse_error(algos[args.algorithm], {}, flags)
    if args.subcommand == "resume" and args.flags:  # the flags of the run's algorithm: one of them
        errors = [_config_parse_error(cls, {}, list(args.flags)) for cls in algorithm_classes().values()]
        return None if None in errors else errors[0]
    if args.subcommand in ("launch", "supervise"):
        inner = list(args.command)
        return _parse_error(inner[1:] if inner[:1] == ["--"] else inner)
    return None


def test_every_documented_command_parses_as_written():
    checked, failures = 0, []
    sources = {doc: fenced_commands(ROOT / doc) for doc in ALL_DOCS}
    sources["--help"] = help_commands()
    for source, commands in sources.items():
        for command in commands:
            text = SETUP.match(command).group("then") if SETUP.match(command) else command
            for name, value in PLACEHOLDERS.items():
                text = re.sub(rf"\b{name}\b", value, text)
            for segment in re.split(r"\s*(?:&&|\|\||;|\|)\s*", text):
                segment = re.sub(r"\s*(>\s*\S+|&)$", "", segment)  # an output redirection, a background job
                try:
                    tokens = shlex.split(segment.replace('"$D"', "runs/d"))
                except ValueError:
                    continue
                error = _parse_error(tokens)
                checked += tokens[:1] in (["rljax"], ["python"], ["python3"], [".venv/bin/python"])
                if error:
                    failures.append(f"{source}: {segment}\n  {error}")
    assert checked >= 60, checked  # the commands were found
    assert not failures, "\n".join(failures)
