"""The flags of a config (:mod:`rljax.cli.flags`): what each kind of field parses to, a resumed run's
saved config and options under the typed flags, the errors a bad flag gets, and the algorithm
argument of ``rljax train``/``sweep``."""

from __future__ import annotations

import argparse

import pytest

from rljax.agents.ppo import PPOConfig
from rljax.cli.flags import (FLAGS_HINT, CommandParser, UsageError, algorithm_config, build_parser, config_from_args,
                             explicit_flags, train_kwargs)


def _parse(argv, defaults=None):
    parser = build_parser(PPOConfig, defaults, prog="prog")
    args = parser.parse_args(argv)
    return parser, args, config_from_args(PPOConfig, args)


def test_each_kind_of_field_parses_to_its_type():
    _, args, config = _parse(["--total-timesteps", "1e6", "--learning-rate", "3e-4", "--hidden-sizes", "64, 32",
                              "--env-param", "length=0.7", "--env-param", "gravity=3", "--no-normalize-obs"])
    assert config.total_timesteps == 1_000_000 and isinstance(config.total_timesteps, int)
    assert config.learning_rate == 3e-4
    assert config.hidden_sizes == (64, 32)
    assert config.env_params == ("length=0.7", "gravity=3")   # a repeatable flag: one entry per use
    assert config.normalize_obs is False


def test_experiment_defaults_override_the_class_defaults_and_flags_override_both():
    _, _, config = _parse([], defaults=dict(env="Pendulum-v1", total_timesteps=4096))
    assert (config.env, config.total_timesteps) == ("Pendulum-v1", 4096)
    _, _, config = _parse(["--total-timesteps", "2048"], defaults=dict(total_timesteps=4096))
    assert config.total_timesteps == 2048


@pytest.mark.parametrize("argv, message", [
    (["--total-timesteps", "1.5"], "argument --total-timesteps: '1.5' is not an integer"),
    (["--learning-rate", "fast"], "argument --learning-rate: 'fast' is not a number"),
    (["--hidden-sizes", "64,x"], "argument --hidden-sizes: '64,x' is not a comma-separated list of integers, "
                                  "e.g. 64,64"),
    (["--learning-rat", "1"], "unrecognized arguments: --learning-rat 1 (--learning-rat -> did you mean "
                              "--learning-rate?)"),
])
def test_a_bad_flag_exits_2_with_one_line_naming_it(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        _parse(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == f"prog: error: {message}\n{FLAGS_HINT}\n", err   # no usage block: --help is one flag away


def test_a_bad_value_is_the_configs_own_error():
    _, args, _ = _parse([])
    args.num_envs = 0
    with pytest.raises(ValueError, match="num_envs"):
        config_from_args(PPOConfig, args)


@pytest.mark.parametrize("text, value", [("-1e-3", -1e-3), ("-.5", -0.5), ("-2E+4", -2e4), ("-3", -3.0), ("-0.25", -0.25)])
def test_a_negative_number_is_a_value_in_any_notation(text, value, capsys):
    # `--learning-rate -1e-3` used to be argparse's "expected one argument": only -3 and -0.5 were numbers.
    parser = build_parser(PPOConfig, prog="prog")
    args = parser.parse_args(["--ent-coef", text, "--seed", "1"])
    assert args.ent_coef == value and explicit_flags(parser, ["--ent-coef", text]) == {"ent_coef"}
    with pytest.raises(ValueError, match=f"ent_coef must be >= 0, got {value}"):   # the config's own range check
        config_from_args(PPOConfig, args)
    with pytest.raises(SystemExit):   # a flag-like word is still not a value
        parser.parse_args(["--ent-coef", "-1e-3x"])
    assert "argument --ent-coef: expected one argument" in capsys.readouterr().err


def test_a_resumed_runs_config_and_options_keep_what_was_not_typed():
    argv = ["--total-timesteps", "4096", "--no-tensorboard", "--keep-checkpoints", "5"]
    parser, args, _ = _parse(argv)
    explicit = explicit_flags(parser, argv)
    assert explicit == {"total_timesteps", "no_tensorboard", "keep_checkpoints"}
    base = {"total_timesteps": 1024, "learning_rate": 0.01, "hidden_sizes": [8, 8], "env": "CartPole-v1"}
    config = config_from_args(PPOConfig, args, base, explicit)
    assert (config.total_timesteps, config.learning_rate, config.hidden_sizes) == (4096, 0.01, (8, 8))
    saved = {"keep_checkpoints": 2, "checkpoint_every": 7, "tensorboard": True}
    options = train_kwargs(args, saved, explicit)
    assert options["keep_checkpoints"] == 5 and options["tensorboard"] is False   # typed: the new values
    assert options["checkpoint_every"] == 7                                       # not typed: the saved one
    assert options["resume"] is False and options["deterministic"] == "auto"


def test_video_interval_and_tracker_timeout_reach_the_run_and_a_resume_keeps_them():
    argv = ["--video-interval", "5000", "--tracker-timeout", "2.5"]
    parser, args, _ = _parse(argv)
    options = train_kwargs(args)
    assert (options["video_interval"], options["tracker_timeout_s"]) == (5000, 2.5)
    _, plain, _ = _parse([])
    saved = {"video_interval": 5000, "tracker_timeout_s": 2.5}
    kept = train_kwargs(plain, saved, explicit_flags(parser, []))
    assert (kept["video_interval"], kept["tracker_timeout_s"]) == (5000, 2.5)
    assert (train_kwargs(plain)["video_interval"], train_kwargs(plain)["tracker_timeout_s"]) == (0, 5.0)


def test_explicit_flags_sees_both_forms_of_a_bool_and_the_equals_form():
    parser = build_parser(PPOConfig)
    assert explicit_flags(parser, ["--normalize-obs", "--seed=3"]) == {"normalize_obs", "seed"}
    assert explicit_flags(parser, ["--no-normalize-obs"]) == {"normalize_obs"}
    assert explicit_flags(parser, []) == set()


def test_a_parser_without_a_hint_prints_its_usage_line(capsys):
    parser = CommandParser(prog="tool")
    parser.add_argument("--count", type=int)
    with pytest.raises(SystemExit):
        parser.parse_args(["--cout", "2"])
    assert capsys.readouterr().err == ("usage: tool [-h] [--count COUNT]\ntool: error: unrecognized arguments: --cout 2"
                                       " (--cout -> did you mean --count?)\n")


def test_the_algorithm_argument_names_the_registered_algorithms():
    assert algorithm_config(argparse.Namespace(algorithm="ppo"), "train") is PPOConfig
    with pytest.raises(UsageError, match=r"^sweep needs an algorithm, one of \['a2c', 'alphazero', 'c51', 'd4pg', 'dqn', 'impala', 'ippo', 'mappo', 'muzero', 'ppo', 'pqn', 'qrdqn', 'sac', 'td3'\]; "
                                         r"got \['r2d2'\]$"):
        algorithm_config(argparse.Namespace(algorithm="r2d2"), "sweep")
    with pytest.raises(UsageError, match=r"got \[\]$"):
        algorithm_config(argparse.Namespace(algorithm=None), "train")
