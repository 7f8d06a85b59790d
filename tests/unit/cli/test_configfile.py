"""Config files (:mod:`rljax.cli.configfile`): ``rljax config ALGO`` writes every field at its default,
a file is flags written down (typed flags override it, a repeatable typed flag replaces its
entries), a run's ``config.json`` reproduces the run's config, and every bad file is one error
line naming the file, the key and what would be valid. Parsing only: nothing trains here (the
README's and the CLI tests train from files)."""

from __future__ import annotations

import argparse
import json
import tomllib

import pytest

from rljax.agents.dqn import DQNConfig
from rljax.agents.ppo import PPOConfig
from rljax.cli.configfile import config_toml, parse_with_config
from rljax.cli.flags import build_parser, config_from_args, explicit_flags, train_kwargs
from rljax.cli.main import main
from rljax.cli.sweep import sweep_parser
from rljax.store.tracking import config_to_dict


def _parse(tmp_path, text: str, argv=(), config_cls=PPOConfig, suffix=".toml", parser=None):
    path = tmp_path / f"run{suffix}"
    path.write_text(text)
    parser = parser or build_parser(config_cls, prog="rljax train")
    args, tokens = parse_with_config(parser, ["--config", str(path), *argv], config_cls)
    return config_from_args(config_cls, args), args, explicit_flags(parser, tokens)


def test_the_written_file_holds_every_field_at_its_default_and_reads_back(tmp_path, capsys):
    assert main(["config", "ppo"]) == 0
    text = capsys.readouterr().out
    data = tomllib.loads(text)
    assert data.pop("algorithm") == "ppo"
    run = data.pop("run")
    assert set(data) == {f for f in PPOConfig.__dataclass_fields__}
    assert data["learning_rate"] == PPOConfig().learning_rate and data["hidden_sizes"] == list(PPOConfig().hidden_sizes)
    assert run["checkpoint_every"] == 0 and run["log_every"] == 0 and run["no_tensorboard"] is False
    assert "resume" not in run and "config" not in run  # what to read and resume is the command line's
    assert "# run_dir = \"...\"" in text and "# Adam step size (before annealing) [sweepable]\nlearning_rate = " in text
    assert all(len(line) <= 100 for line in text.splitlines())
    config, args, _ = _parse(tmp_path, text)
    assert config == PPOConfig() and args.checkpoint_every == 0


def test_file_values_apply_and_typed_flags_override_them(tmp_path):
    text = ('total_timesteps = 2e4\nhidden_sizes = [32, 32]\nnormalize_obs = false\nenv_params = ["length=0.7"]\n'
            'learning_rate = 1e-3\n[run]\nlog_every = 4\nno_tensorboard = true\ncheckpoint_every = 2\n')
    config, args, explicit = _parse(tmp_path, text, ["--learning-rate", "3e-4", "--checkpoint-every", "5"])
    assert (config.total_timesteps, config.hidden_sizes, config.normalize_obs) == (20000, (32, 32), False)
    assert config.env_params == ("length=0.7",) and config.learning_rate == 3e-4
    options = train_kwargs(args)
    assert (options["log_every"], options["tensorboard"], options["checkpoint_every"]) == (4, False, 5)
    assert {"total_timesteps", "hidden_sizes", "learning_rate", "log_every"} <= explicit  # a file's values count as typed
    # A repeatable flag typed on the command line replaces the file's entries.
    config, _, _ = _parse(tmp_path, text, ["--env-param", "gravity=3"])
    assert config.env_params == ("gravity=3",)


def test_a_value_starting_with_a_dash_stays_a_value(tmp_path):
    """Regression: ``env = "-x"`` gave "argument --env: expected one argument"."""
    config, _, _ = _parse(tmp_path, 'env = "-x"\nhidden_sizes = [8]')
    assert config.env == "-x" and config.hidden_sizes == (8,)


def test_a_runs_config_json_reproduces_its_config(tmp_path):
    saved = PPOConfig(seed=3, hidden_sizes=(32,), env_params=("length=0.7",), env_kwargs=("max_steps=50",),
                      total_timesteps=4096, normalize_reward=False)
    config, _, _ = _parse(tmp_path, json.dumps(config_to_dict(saved)), suffix=".json")
    assert config == saved


def test_a_sweep_reads_its_flags_from_the_run_table(tmp_path):
    parser = sweep_parser(PPOConfig, None, "rljax sweep ppo")
    _, args, _ = _parse(tmp_path, '[run]\ngrid = ["learning_rate=1e-4,1e-3"]\nseeds = 3\n', parser=parser)
    assert args.grid == ["learning_rate=1e-4,1e-3"] and args.seeds == 3


@pytest.mark.parametrize("text, message", [
    ("lerning_rate = 3", r"'lerning_rate' is not a field of PPOConfig; did you mean 'learning_rate'\?"),
    ("[run]\ncheckpoint_evry = 3", r"\[run\] 'checkpoint_evry' is not a flag of this command; did you mean "
                                   r"'checkpoint_every'\?"),
    ("[run]\nresume = 'runs/a'", r"\[run\] 'resume' is not a flag of this command"),
    ("normalize_obs = 'yes'", r"normalize_obs must be true or false, got 'yes'"),
    # A bad value is named by the file and key it came from, not by the flag it stands for.
    ("learning_rate = 'fast'", r"--config \S+run.toml: learning_rate = \"fast\": 'fast' is not a number\n"),
    ("total_timesteps = 1.5", r"--config \S+run.toml: total_timesteps = 1.5: '1.5' is not an integer\n"),
    ("[run]\nlog_every = 'x'", r"--config \S+run.toml: \[run\] log_every = \"x\": 'x' is not an integer\n"),
    ("[run]\ndeterministic = 'x'", r"\[run\] deterministic = \"x\": must be one of 'auto', 'on', 'off'\n"),
    # A quoted number is refused, with the unquoted form to write.
    ("learning_rate = \"0.001\"", r"--config \S+run.toml: learning_rate = \"0.001\" is a string, not a number: "
                                  r"write it unquoted, learning_rate = 0.001\n"),
    ("total_timesteps = '1e4'", r"total_timesteps = \"1e4\" is a string, not a number: write it unquoted, "
                                r"total_timesteps = 10000\n"),
    ("hidden_sizes = ['64', 64]", r"hidden_sizes = \[\"64\", 64\] holds a number in quotes: write it unquoted, "
                                  r"hidden_sizes = \[64, 64\]\n"),
    ("[run]\nkeep_checkpoints = '5'", r"\[run\] keep_checkpoints = \"5\" is a string, not a number: write it "
                                     r"unquoted, keep_checkpoints = 5\n"),
    # A number or boolean for a string flag is refused, with the quoted form to write.
    ("[run]\nrun_dir = 5", r"\[run\] run_dir = 5 is a number, not a string: write it quoted, run_dir = \"5\"\n"),
    ("[run]\nwandb = true", r"\[run\] wandb = true is a boolean, not a string: write it quoted, wandb = \"true\"\n"),
    ("env = 5", r"env = 5 is a number, not a string: write it quoted, env = \"5\"\n"),
    # A key in the other table says where it belongs.
    ("checkpoint_every = 2", r"'checkpoint_every' is a run option, not a field of PPOConfig: put it under \[run\]"),
    ("[run]\nlearning_rate = 1e-3", r"\[run\] 'learning_rate' is a field of PPOConfig: put it at the top level, "
                                    r"above \[run\]"),
    ("hidden_sizes = [[1]]", r"hidden_sizes must be a number, a string or a boolean, got \[1\]"),
    ("algorithm = 'dqn'", r"is for algorithm 'dqn', not PPOConfig"),
    ("run = 3", r"'run' must be a table"),
    ("x = [", r"is not valid TOML"),
])
def test_a_bad_file_is_one_error_naming_the_key(tmp_path, capsys, text, message):
    with pytest.raises(SystemExit) as exit_:
        _parse(tmp_path, text)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("rljax train: error: ") and pytest.importorskip("re").search(message, err), err


def test_a_missing_file_and_an_unknown_algorithm(tmp_path, capsys):
    parser = build_parser(DQNConfig, prog="rljax train")
    with pytest.raises(SystemExit):
        parse_with_config(parser, ["--config", str(tmp_path / "nope.toml")], DQNConfig)
    assert f"--config {tmp_path / 'nope.toml'}: no such file" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}")
    with pytest.raises(SystemExit):
        parse_with_config(parser, ["--config", str(tmp_path / "run")], DQNConfig)
    assert f"is a directory, not a file; did you mean {tmp_path / 'run' / 'config.json'}?" in capsys.readouterr().err
    (tmp_path / "latin.toml").write_bytes(b"env = '\xff'")
    with pytest.raises(SystemExit):
        parse_with_config(parser, ["--config", str(tmp_path / "latin.toml")], DQNConfig)
    assert f"--config {tmp_path / 'latin.toml'} is not valid TOML" in capsys.readouterr().err
    assert main(["config", "nope"]) == 2
    assert "config needs an algorithm, one of" in capsys.readouterr().err


def test_strings_that_only_look_like_numbers_stay_strings(tmp_path):
    # A string flag takes a string of digits; a repeatable flag's entries are strings.
    config, _, _ = _parse(tmp_path, 'env = "123"\nenv_params = ["length=0.5"]\nrandomize = ["length=0.25:2"]')
    assert (config.env, config.env_params, config.randomize) == ("123", ("length=0.5",), ("length=0.25:2",))


def test_help_is_not_read_as_a_file():
    parser = build_parser(PPOConfig, prog="rljax train")
    with pytest.raises(SystemExit) as exit_:
        parse_with_config(parser, ["--config", "missing.toml", "--help"], PPOConfig)
    assert exit_.value.code in (0, 2)
    assert isinstance(parser, argparse.ArgumentParser)
