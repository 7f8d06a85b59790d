"""``rljax eval``: the command end to end on a tiny trained run (a single
run and a sweep member). The report's statistics and files: tests/unit/policy/test_report.py;
``--env-param`` parsing: tests/unit/core/test_registry.py."""

from __future__ import annotations

import json

import pytest

import rljax
from rljax.policy import report
from rljax.cli.eval import eval_dir


def test_each_kind_of_evaluation_has_its_own_folder(tmp_path):
    assert eval_dir(tmp_path, 64) == tmp_path / "eval" / "64"
    assert eval_dir(tmp_path, 64, "lr=0.1", True) == tmp_path / "members" / "lr=0.1" / "eval" / "64"
    assert eval_dir(tmp_path, 64, None, False, {"length": 0.7, "gravity": 3.0}).name == "64-stochastic-gravity=3-length=0.7"


def test_a_search_of_another_size_than_the_runs_has_its_own_folder():
    """``--search --simulations S`` other than the run's ``num_simulations`` goes into ``-search-S``:
    a search of another size replaced the report of the run's own size in ``-search`` before."""
    import argparse
    import types

    from rljax.cli.eval import _search_kind

    policy = types.SimpleNamespace(config=types.SimpleNamespace(num_simulations=64))
    kinds = [_search_kind(argparse.Namespace(search=search, simulations=sims), policy)
             for search, sims in ((False, None), (True, None), (True, 64), (True, 128))]
    assert kinds == ["", "-search", "-search", "-search-128"]



# ------------------------------------------------------------------------------------------------
# The command end to end, on tiny trained runs (trained once per module)
# ------------------------------------------------------------------------------------------------

TINY = dict(env="CartPole-v1", total_timesteps=2048, num_envs=4, num_steps=64, num_epochs=1, num_minibatches=2,
            hidden_sizes=(16,))
REPORT_KEYS = {"return", "length", "returns", "lengths", "truncated", "checkpoint_step", "config_hash",
               "deterministic", "env_param_overrides", "seed", "num_episodes", "algorithm", "env", "member"}
STAT_KEYS = {"mean", "std", "median", "q25", "q75", "iqr", "min", "max", "ci_low", "ci_high"}


@pytest.fixture(scope="module")
def ppo_run(tiny_run):
    """The session's tiny PPO CartPole run (``tests/conftest.py``); these tests write only its ``eval/``."""
    return tiny_run("ppo-cartpole")[0]


def _eval(capsys, *args):
    from rljax.cli import main as cli

    status = cli.main(["eval", *map(str, args), "--no-compile-cache"])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_eval_writes_a_report_of_the_newest_checkpoint(ppo_run, capsys):
    from rljax.store.rundir import checkpoint_steps

    before = {p: p.stat().st_mtime_ns for p in ppo_run.rglob("*") if p.is_file()}
    status, out, err = _eval(capsys, ppo_run, "--episodes", 8)
    assert status == 0, err
    step = checkpoint_steps(ppo_run)[-1]
    folder = ppo_run / "eval" / str(step)
    assert sorted(p.name for p in folder.iterdir()) == sorted(report.REPORT_FILES)
    saved = json.loads((folder / "report.json").read_text())
    assert REPORT_KEYS <= saved.keys() and STAT_KEYS <= saved["return"].keys()
    assert saved["checkpoint_step"] == step and saved["num_episodes"] == 8 and len(saved["returns"]) == 8
    assert saved["deterministic"] is True and saved["seed"] == 0 and saved["member"] is None
    config = json.loads((ppo_run / "config.json").read_text())
    assert saved["config_hash"] == json.loads((ppo_run / "manifest.json").read_text())["config_hash"]
    assert config["env"] == saved["env"] == "CartPole-v1" and saved["algorithm"] == "ppo"
    assert all(1 <= n <= 500 for n in saved["lengths"])
    assert out.startswith("eval CartPole-v1 ppo step") and str(folder / "report.md") in out
    # nothing outside eval/ changed, and no lock or temporary file was left
    after = {p: p.stat().st_mtime_ns for p in ppo_run.rglob("*") if p.is_file() and "eval" not in p.parts}
    assert after == before
    assert not [p for p in ppo_run.rglob("*") if "tmp" in p.name]


def test_a_run_that_holds_its_lock_can_be_evaluated(ppo_run, capsys):
    """A run that is still training holds its run lock; evaluation reads its checkpoints beside it."""
    from rljax.store.runlock import RunLock

    with RunLock(ppo_run) as lock:
        status, _, err = _eval(capsys, ppo_run, "--episodes", 2, "--seed", 5)
        assert status == 0, err
        assert lock.held


def test_eval_variants_get_their_own_folders_and_a_video(ppo_run, capsys, tmp_path):
    from PIL import Image

    gif = tmp_path / "episode.gif"
    status, out, err = _eval(capsys, ppo_run, "--episodes", 4, "--stochastic", "--env-param", "length=0.25",
                             "--video", gif, "--seed", 3)
    assert status == 0, err
    folder = next((ppo_run / "eval").glob("*-stochastic-length=0.25"))
    saved = json.loads((folder / "report.json").read_text())
    assert saved["deterministic"] is False and saved["seed"] == 3
    assert saved["env_param_overrides"] == {"length": 0.25} and saved["env_params"]["length"] == 0.25
    with Image.open(gif) as frames:
        assert frames.size == (600, 400) and 1 <= frames.n_frames <= 500
    assert f"video {gif}" in out


@pytest.mark.parametrize("args, match", [
    (["--env-param", "lenght=0.7"], "did you mean 'length'"),
    (["--step", "7"], "7"),
    (["--member", "0"], "member"),
    (["--episodes", "0"], "--episodes must be in [1, 1048576]"),
    (["--episodes", str(1 << 21)], f"got {1 << 21}"),
    (["--seed", "-1"], "--seed must be in [0, 2**32 - 1], got -1"),
    (["--video", "ep.mp4"], "give a path ending in .gif"),
    (["--env-param", "length=0.5,,1"], "an empty value in the list"),
    (["--env-param", "length=0.5,x"], "length"),
    (["--env-param", "length=0.5,1", "--video", "ep.gif"], "--env-param lists 2 evaluations"),
])
def test_bad_input_is_a_usage_error_and_writes_nothing(ppo_run, capsys, args, match):
    from rljax.cli.process import EXIT_USAGE

    before = sorted(ppo_run.rglob("*"))
    status, _, err = _eval(capsys, ppo_run, *args)
    assert status == EXIT_USAGE and err.startswith("rljax eval: error:") and match in err, err
    assert sorted(ppo_run.rglob("*")) == before


def test_a_list_of_env_param_values_is_a_robustness_grid_of_reports(ppo_run, capsys):
    from rljax.policy.evaluate import evaluate

    status, out, err = _eval(capsys, ppo_run, "--episodes", 6, "--env-param", "length=0.25,2",
                             "--env-param", "masscart=1,3")
    assert status == 0, err
    lines = out.strip().splitlines()
    combos = ["length=0.25, masscart=1", "length=0.25, masscart=3", "length=2, masscart=1", "length=2, masscart=3"]
    assert [line[1:line.index("]")] for line in lines] == combos
    policy = rljax.load(ppo_run)
    for line, (length, masscart) in zip(lines, [(0.25, 1), (0.25, 3), (2, 1), (2, 3)]):
        folder = eval_dir(ppo_run, policy.step, overrides={"length": float(length), "masscart": float(masscart)})
        saved = json.loads((folder / "report.json").read_text())
        assert saved["env_param_overrides"] == {"length": length, "masscart": masscart}
        # Each report holds the episodes of its own env params, as evaluate() plays them.
        params = policy.env_params.replace(length=float(length), masscart=float(masscart))
        assert saved["returns"] == pytest.approx(evaluate(policy, 6, env_params=params).returns.tolist())
        assert str(folder / "report.md") in line


def test_a_value_listed_twice_is_evaluated_once():
    from rljax.cli.eval import env_param_grid

    assert env_param_grid(["length=0.5,2", "length=0.5"]) == [["length=0.5", "length=0.5"], ["length=2", "length=0.5"]]
    assert env_param_grid(["length=1,1,2"]) == [["length=1"], ["length=2"]]
    assert env_param_grid([]) == [[]]


def test_a_missing_run_directory_and_a_bad_flag_are_usage_errors(tmp_path, capsys):
    status, _, err = _eval(capsys, tmp_path / "nope")
    assert status == 2 and "does not exist" in err
    (tmp_path / "file").write_text("")
    status, _, err = _eval(capsys, tmp_path / "file")
    assert status == 2 and "file is not a directory" in err, err
    status, _, err = _eval(capsys, tmp_path, "--episode", "3")
    assert status == 2


# Slow: by default tests/unit/policy/test_trained.py's test_load_sweep_members_and_their_evaluations (a member
# loaded and evaluated) and the eval CLI tests above stand for it.
@pytest.mark.slow
def test_eval_of_a_sweep_member_goes_under_its_folder(tmp_path, capsys):
    from rljax.agents.ppo import PPOConfig
    from rljax.training.sweep import SweepSpec, run_sweep

    run = tmp_path / "sweep"
    _, members, _ = run_sweep(PPOConfig(**TINY), SweepSpec(grid={"env.length": [0.4, 0.6]}), run_dir=run,
                              quiet=True, plots=False, handle_signals=False)
    status, _, err = _eval(capsys, run, "--episodes", 2)
    assert status == 2 and "member" in err  # a sweep needs --member
    name = members[1].name
    status, out, err = _eval(capsys, run, "--member", name, "--episodes", 2)
    assert status == 0, err
    (path,) = (run / "members" / name / "eval").glob("*/report.json")
    saved = json.loads(path.read_text())
    assert saved["member"] == name and saved["env_params"]["length"] == pytest.approx(0.6)
    status, _, err = _eval(capsys, run, "--member", 0, "--episodes", 2)  # by index
    assert status == 0, err
    (path,) = (run / "members" / members[0].name / "eval").glob("*/report.json")
    assert json.loads(path.read_text())["env_params"]["length"] == pytest.approx(0.4)
    assert not (run / "eval").exists()


def test_a_greedy_video_is_the_reports_first_episode(ppo_run, capsys, tmp_path):
    from rljax.policy.evaluate import evaluate
    from rljax.policy.video import episode_frames

    policy = rljax.load(ppo_run)
    episodes = evaluate(policy, 5, seed=2)
    drawn = episode_frames(policy, __import__("jax").random.key(2), batch=5, index=0)
    assert drawn.length == episodes.lengths[0] and drawn.episode_return == pytest.approx(episodes.returns[0])
    assert len(drawn.frames) == drawn.length and drawn.finished


def test_a_full_disk_is_an_io_error(ppo_run, capsys, monkeypatch):
    import errno

    from rljax.cli.process import EXIT_IO

    def full(directory, record):
        raise OSError(errno.ENOSPC, "No space left on device", str(directory))

    monkeypatch.setattr(report, "write_report", full)
    status, _, err = _eval(capsys, ppo_run, "--episodes", 2, "--seed", 9)
    assert status == EXIT_IO and "I/O error" in err and "No space left" in err


# ------------------------------------------------------------------------------------------------
# A run trained on host envs (the actor-learner path): evaluated on host envs, drawn by Gymnasium
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host_runs(tmp_path_factory):
    """``{"gymnasium": run_dir, "envpool": run_dir}``: two-update PPO runs on host CartPole envs."""
    from rljax.actorlearner.learner import HostOptions
    from rljax.actorlearner.run import run_host
    from rljax.agents.ppo import PPOConfig

    runs = {}
    for kind in ("gymnasium", "envpool"):
        if kind == "envpool":
            pytest.importorskip("envpool")
        config = PPOConfig(env=f"{kind}/CartPole-v1", num_envs=4, num_steps=32, total_timesteps=256, num_epochs=1,
                           num_minibatches=2, hidden_sizes=(16,))
        runs[kind] = tmp_path_factory.mktemp(f"host-{kind}") / "run"
        run_host(config, rljax.RunOptions(run_dir=runs[kind], quiet=True, handle_signals=False),
                 HostOptions(max_policy_lag=0))
    return runs


def test_a_host_run_is_evaluated_on_host_envs_with_its_video(host_runs, capsys, tmp_path):
    """The issue: ``rljax eval`` of a ``gymnasium/CartPole-v1`` run said "unknown environment"."""
    run = host_runs["gymnasium"]
    status, out, err = _eval(capsys, run, "--episodes", 6, "--seed", 3, "--video", tmp_path / "host.gif")
    assert status == 0, err
    saved = json.loads((run / "eval" / "256" / "report.json").read_text())
    assert REPORT_KEYS <= saved.keys() and saved["env"] == "gymnasium/CartPole-v1" and saved["num_episodes"] == 6
    assert saved["returns"] == saved["lengths"] and saved["env_params"] == {}  # CartPole pays 1 a step
    first = saved["returns"][0]
    assert f"video {tmp_path / 'host.gif'} (return {first:.2f}, {int(first)} steps)" in out  # the first episode
    from PIL import Image

    with Image.open(tmp_path / "host.gif") as gif:
        assert gif.n_frames >= 1 and gif.size == (600, 400)


@pytest.mark.parametrize("kind, args, match", [
    ("gymnasium", ["--env-param", "length=0.7"], "host env, which has no env params"),
    ("gymnasium", ["--episodes", "5000"], "at most 4096"),
    ("envpool", ["--video", "{tmp}/v.gif"], "cannot be drawn: it is an EnvPool batch"),
])
def test_what_a_host_run_cannot_do_is_a_usage_error(host_runs, capsys, tmp_path, kind, args, match):
    before = sorted(host_runs[kind].rglob("*"))
    status, out, err = _eval(capsys, host_runs[kind], *[a.format(tmp=tmp_path) for a in args])
    assert status == 2 and match in err and not out
    assert sorted(host_runs[kind].rglob("*")) == before and not (tmp_path / "v.gif").exists()


def test_a_run_trained_on_an_env_server_is_evaluated_there_in_rounds_or_on_a_local_source(
        tmp_path, capsys, monkeypatch):
    """A server sets its own batch (4 envs): 10 episodes are 3 rounds of 4, the first 10 kept (they used to
    be refused: 'serves 4 envs, not num_envs=10'). ``--env gymnasium/CartPole-v1`` evaluates on a local
    source of the same envs (seeded alike: the same episodes); a source of other spaces is refused by
    name; with the server gone the error is one line that names --env."""
    from rljax.actorlearner.learner import HostOptions
    from rljax.actorlearner.run import run_host
    from rljax.agents.ppo import PPOConfig
    from rljax.host.gymnasium_env import GymnasiumEnv
    from rljax.host.server import TOKEN_VARIABLE, EnvServer

    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    run = tmp_path / "run"
    with EnvServer(lambda: GymnasiumEnv("CartPole-v1", 4)) as server:
        server.start()
        config = PPOConfig(env=f"server:127.0.0.1:{server.address[1]}", num_envs=4, num_steps=16,
                           total_timesteps=4 * 16 * 2, num_minibatches=1, num_epochs=1, hidden_sizes=(16,))
        run_host(config, rljax.RunOptions(run_dir=run, quiet=True, handle_signals=False), HostOptions())
        status, out, err = _eval(capsys, run, "--episodes", 10)
        assert status == 0, err
    served = json.loads((run / "eval" / "128" / "report.json").read_text())
    assert served["num_episodes"] == 10 and served["env"] == config.env
    status, out, err = _eval(capsys, run, "--episodes", 10, "--env", "gymnasium/CartPole-v1")
    assert status == 0, err
    local = json.loads((run / "eval" / "128-on-gymnasium_CartPole_v1" / "report.json").read_text())
    assert local["env"] == "gymnasium/CartPole-v1" and local["returns"] == served["returns"]
    status, out, err = _eval(capsys, run, "--episodes", 2, "--env", "gymnasium/Pendulum-v1")
    assert status == 2 and "its observation space is Box(shape=(3,)" in err and "is Box(shape=(4,)" in err and not out
    status, out, err = _eval(capsys, run, "--episodes", 2)  # the server is gone
    assert status == 74 and "cannot connect to the env server" in err and "--env" in err
    assert len(err.strip().splitlines()) == 1
