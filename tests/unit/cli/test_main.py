"""The ``rljax`` command line as a new user meets it: what they read (--help, the usage lines,
`rljax envs`, --version), what a run prints (the line before compiling, a resume of a finished run,
a sweep's progress and ranking) and what it records (the manifest's command line).
"""

from __future__ import annotations

import json
import sys

import pytest

from rljax.cli import main as cli
from rljax.training.program import MAX_AUTO_CHUNK, plan_updates


def test_the_automatic_chunk_is_at_most_200_updates():
    # 2170 updates: the nearest divisor of n to 200 within a factor 2 is 217, which the planner used
    # to pick although its docstring and --help say "at most 200".
    for n in [2170, 401, 398, 1990, 4000, 12345, 976, 7, 1]:
        plan = plan_updates(n * 4, 4)
        assert plan.updates_per_chunk <= MAX_AUTO_CHUNK, (n, plan)
        assert plan.num_chunks * plan.updates_per_chunk == plan.num_updates
        assert n <= plan.num_updates < n + plan.num_chunks, (n, plan)   # fewer than one update per chunk extra
    assert plan_updates(976 * 512, 512).updates_per_chunk == 122      # PureJaxRL's CartPole: 8 chunks of 122
    assert plan_updates(2170, 1).updates_per_chunk == 155              # a divisor of 2170 below 200


def test_total_timesteps_help_says_what_the_plan_does(capsys):
    # PPO on Pendulum: 2048 env steps per update, so 5e5 is 244 updates, run as 10 chunks of 25: 512,000 steps.
    plan = plan_updates(500_000, 2048)
    assert plan.total_env_steps == 512_000
    with pytest.raises(SystemExit):
        cli.main(["train", "ppo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "rounded to whole updates" not in text
    assert "rounded up to a whole number of equal chunks" in text
    assert "up to one update per chunk more" in text


TINY = ["--total-timesteps", "256", "--num-envs", "4", "--num-steps", "32", "--num-epochs", "1", "--num-minibatches",
        "1", "--hidden-sizes", "8", "--no-tensorboard"]


def test_a_run_says_what_it_compiles_before_compiling_and_a_finished_run_resumes_to_a_message(
        tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert cli.main(["train", "ppo", *TINY, "--run-dir", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # The first line, before JAX starts: algorithm, env and run directory; the second, before the
    # compile: devices and the plan too.
    assert lines[0] == f"rljax: setting up PPO on CartPole-v1, run directory {run} ..."
    assert lines[1].startswith("rljax: training PPO on CartPole-v1, 1 cpu device, run directory " + str(run))
    assert "plan: 2 chunks x 1 updates x 128 env steps = 256 env steps" in lines[1] and "compiling" in lines[1]
    assert lines[2].startswith("[ 50.0%]")

    # Resuming the finished run compiled it for nothing and printed `return nan ... (0 steps/s)`.
    import rljax.training.loop

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained (compiled) again")

    monkeypatch.setattr(rljax.training.loop, "train", no_training)
    assert cli.main(["resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert "has finished" in out and "256 env steps" in out and "nothing compiled" in out
    assert f"rljax resume {run} --total-timesteps N" in out
    assert "nan" not in out and "compiling" not in out
    monkeypatch.undo()
    # Extending it still trains (the message is only for a run with nothing left).
    assert cli.main(["resume", str(run), "--total-timesteps", "384", "--quiet"]) == 0
    assert "done: 384 env steps" in capsys.readouterr().out


def test_manifest_records_the_whole_command(monkeypatch):
    from rljax.agents.ppo import PPOConfig
    from rljax.store.tracking import manifest

    # `python -m experiments.ppo_cartpole` with no flags: sys.argv holds only the module's file path.
    monkeypatch.setattr(sys, "argv", ["/repo/experiments/ppo_cartpole.py"])
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "experiments.ppo_cartpole"])
    assert manifest(PPOConfig())["argv"] == [sys.executable, "-m", "experiments.ppo_cartpole"]


def test_a_sweeps_progress_line_is_the_populations(capsys):
    import types

    from rljax.store.tracking import Tracking

    program = types.SimpleNamespace(isolated=True, size=3, names=("a", "b", "c"))
    tracking = Tracking(None, program, 1000, {"tensorboard": False}, quiet=False, resume=False, resume_env_steps=None,
                        saved_rows=None, manifest_extra={})
    rows = [{"env_steps": 500, "sps": 100.0, "episode_return_mean": r} for r in (10.0, 40.0, None)]
    tracking.record(None, 0, rows)
    line = capsys.readouterr().out
    # Member 0 alone said 10.00; the population's mean over members with episodes is 25, its best 40.
    assert "return    25.00" in line and "best    40.00" in line and "3 members" in line and "sps       300" in line


def test_help_keeps_example_lines_and_names_the_sweep(capsys):
    from experiments import ppo_cartpole

    with pytest.raises(SystemExit):
        ppo_cartpole.main(["--help"])
    out = capsys.readouterr().out
    for line in ppo_cartpole.__doc__.splitlines():
        if line.strip().startswith("python -m"):
            assert line.rstrip() in out.splitlines(), line   # one example a line, as written
    assert "Sweeps (seeds x hyperparameters x env params as one compiled program, ranked): " \
           "python -m experiments.ppo_cartpole sweep --help" in out
    with pytest.raises(SystemExit):
        cli.main(["train", "ppo", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: rljax train ppo ") and "rljax sweep ppo --help" in out
    assert "fake devices that share the same cores" in " ".join(out.split())   # --num-devices on a CPU
    assert cli.main(["--help"]) == 0 and "rljax sweep" in capsys.readouterr().out


def test_resume_shows_its_own_usage_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env": "CartPole-v1"}))
    (run / "manifest.json").write_text(json.dumps({"algorithm": "PPOConfig"}))
    with pytest.raises(SystemExit):
        cli.main(["resume", str(run), "--help"])
    out = capsys.readouterr().out
    assert out.startswith(f"usage: rljax resume {run}") and "python -m experiments.ppo" not in out


def test_sweeps_take_num_devices_and_rank_without_a_run_directory(capsys):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "ppo", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--num-devices NUM_DEVICES devices to split the population over" in out
    assert "--devices DEVICES deprecated: use --num-devices" in out
    # --run-dir none printed no ranking; --devices (the old name) still works, with a warning.
    status = cli.main(["sweep", "ppo", *TINY, "--grid", "learning_rate=1e-3,3e-3", "--devices", "1",
                       "--run-dir", "none",
                       "--no-plots"])
    captured = capsys.readouterr()
    assert status == 0
    assert "--devices is deprecated; use --num-devices" in captured.err
    assert "| rank | config |" in captured.out and "learning_rate=0.001" in captured.out
    assert captured.out.count("progress of 2 members: return = mean over the members") == 1


def test_envs_lists_spaces_and_fitting_algorithms(capsys, monkeypatch):
    import importlib.util

    from rljax.cli import envs as envs_cli

    real = importlib.util.find_spec
    monkeypatch.setattr(envs_cli.importlib.util, "find_spec", lambda name: None if name == "brax" else real(name))
    assert cli.main(["envs"]) == 0
    out = capsys.readouterr().out
    table = {line.split()[0]: line for line in out.split("\n\n")[0].splitlines()[1:]}
    assert "Box(4,) float32" in table["CartPole-v1"] and "Discrete(2)" in table["CartPole-v1"]
    assert table["CartPole-v1"].endswith("a2c alphazero c51 dqn impala muzero ppo pqn qrdqn") and table["Pendulum-v1"].endswith("a2c d4pg impala ppo sac td3")
    assert "Box(1,) float32 [-2, 2]" in table["Pendulum-v1"]
    # Every registered and gymnax env is listed, except MNISTBandit (it downloads MNIST), listed apart with why.
    from rljax.core import registry as env_registry

    assert "gymnax/MNISTBandit-bsuite" not in table
    assert "gymnax/MNISTBandit-bsuite: downloads the MNIST data set" in out
    assert len(table) == len(env_registry.registered()) + len(env_registry.gymnax_registered()) - 1
    assert 'brax/<id>: not installed; pip install -e ".[brax]"' in out
    assert cli.main(["envs", "nope"]) == 2


def test_several_cpu_devices_come_with_a_note(tmp_path):
    import os
    import subprocess

    from tests.conftest import suite_xla_flags

    # The suite's flags (so the program is the one the suite's cache holds); --num-devices sets the devices.
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "XLA_FLAGS": suite_xla_flags()}
    proc = subprocess.run([sys.executable, "-m", "rljax.cli.main", "train", "ppo", *TINY, "--num-devices", "2",
                           "--run-dir", "none"], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 cpu devices" in proc.stdout
    assert "note: the 2 CPU devices are fake devices sharing this machine's cores" in proc.stdout


def test_the_readme_gpu_install_line_names_the_cuda_extras():
    import pathlib
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[3]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["cuda"] == ["jax[cuda13]"] and extras["cuda12"] == ["jax[cuda12]"]
    readme = (root / "README.md").read_text()
    assert 'pip install -e ".[cuda]"' in readme and '".[cuda12]"' in readme


def test_nothing_installs_or_looks_up_the_distribution_by_the_taken_name():
    # `rljax` on PyPI is an unrelated project: the distribution is rljax-chunked (the import name stays rljax).
    import pathlib
    import re
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[3]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["name"] == "rljax-chunked" and project["scripts"] == {"rljax": "rljax.cli.main:main"}
    for extra, requirements in project["optional-dependencies"].items():
        for req in requirements:
            name = re.match(r"[\w.-]+", req).group(0)
            assert name != "rljax", f"extra {extra!r} installs the unrelated PyPI project: {req}"
    offenders = []
    texts = [root / "README.md", *root.glob("docs/*.md"), *root.glob("rljax/**/*.py"), *root.glob("tests/**/*.py")]
    for path in [p for p in texts if p.name != pathlib.Path(__file__).name]:  # not this test's own pattern
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"(?<![\w-])(pip install ['\"]?rljax\b(?!-)|rljax\[[a-z]|version\(['\"]rljax['\"]\))", line):
                offenders.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert not offenders, offenders


def test_envs_lists_a_suite_with_its_spaces():
    pytest.importorskip("navix", reason='needs the navix extra: pip install -e ".[navix]"')
    from rljax.cli.envs import list_envs

    table = {line.split()[0]: line for line in list_envs("navix").splitlines()[1:] if line.strip()}
    assert "navix/Navix-Empty-5x5-v0" in table and table["navix/Navix-Empty-5x5-v0"].endswith("a2c alphazero c51 dqn impala muzero ppo pqn qrdqn")
    assert "Discrete(" in table["navix/Navix-Empty-5x5-v0"]


def test_version(capsys):
    # `rljax --version` used to be "error: unknown command '--version'".
    import rljax

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"rljax {rljax.__version__}\n"


def test_one_parser_with_a_subcommand_per_module(capsys):
    parser, commands = cli.command_parser()
    assert list(commands) == ["envs", "train", "sweep", "bench", "resume", "eval", "export", "supervise", "launch",
                             "inspect", "status", "stop", "config", "env-server", "serve"]
    assert all(sub.prog == f"rljax {name}" for name, sub in commands.items())
    args = parser.parse_args(["eval", "runs/x", "--episodes", "7", "--stochastic"])
    assert (args.subcommand, args.run_dir, args.episodes, args.stochastic) == ("eval", "runs/x", 7, True)
    assert args.run is cli.eval_command.run
    assert cli.main(["trian", "ppo"]) == 2
    err = capsys.readouterr().err
    # A typo gets the closest command; a name close to none gets them all.
    assert err.startswith("error: unknown command 'trian'; did you mean 'train'?\nusage: rljax envs [SUITE]")
    assert "rljax train {" in err
    assert cli.main(["stauts", "runs/x"]) == 2 and "did you mean 'status'?" in capsys.readouterr().err
    assert cli.main(["xyz"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown command 'xyz'; the commands: envs, train, sweep, "
                                              "bench, resume, eval, export, supervise, launch, inspect, status, stop, config, "
                                              "env-server, serve\n")
    assert cli.main([]) == 0 and "commands:" in capsys.readouterr().out


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly_with_sigpipes_status():
    # `rljax config ppo | head -1` with the reader gone before the first line: no traceback, 128 + SIGPIPE.
    import subprocess

    from tests.conftest import cpu_subprocess_env

    proc = subprocess.Popen([sys.executable, "-m", "rljax.cli.main", "config", "ppo"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=cpu_subprocess_env())
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err

