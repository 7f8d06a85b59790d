"""``rljax eval``: report statistics (hand-computed), the report files, ``--env-param`` parsing, and
the command end to end on a tiny trained run (a single run and a sweep member)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import rljax
from rljax import report
from rljax.eval_cli import eval_dir, parse_env_params

VALUES = [1.0, 2.0, 3.0, 4.0, 10.0]


def test_summary_statistics_by_hand():
    s = report.summarize(VALUES)
    # mean 20/5; population std sqrt((9+4+1+0+36)/5); quantiles by linear interpolation over
    # positions 0..4: q25 at position 1, median at 2, q75 at 3.
    assert s["mean"] == 4.0 and s["std"] == pytest.approx(math.sqrt(10.0))
    assert (s["median"], s["q25"], s["q75"], s["iqr"]) == (3.0, 2.0, 4.0, 2.0)
    assert (s["min"], s["max"]) == (1.0, 10.0)
    assert s["ci_low"] <= s["mean"] <= s["ci_high"]
    assert 1.0 <= s["ci_low"] < s["ci_high"] <= 10.0


def test_bootstrap_interval_is_reproducible_and_narrows_with_more_episodes():
    rng = np.random.default_rng(3)
    few, many = rng.normal(100, 10, 10), rng.normal(100, 10, 1000)
    assert report.bootstrap_ci(few) == report.bootstrap_ci(few)
    lo, hi = report.bootstrap_ci(many)
    assert lo < many.mean() < hi and hi - lo < (report.bootstrap_ci(few)[1] - report.bootstrap_ci(few)[0])
    # ~ mean ± 1.96 sigma / sqrt(n) for a normal sample
    assert hi - lo == pytest.approx(2 * 1.96 * many.std() / math.sqrt(many.size), rel=0.1)
    assert report.bootstrap_ci([7.0]) == (7.0, 7.0) and report.bootstrap_ci([5.0] * 4) == (5.0, 5.0)
    with pytest.raises(ValueError, match="at least one"):
        report.bootstrap_ci([])


def test_report_files(tmp_path):
    rec = report.build_report(VALUES, [10, 20, 30, 40, 50], [False, False, True, False, True], checkpoint_step=64,
                              config_hash="abc", deterministic=True, seed=0, env_param_overrides={"length": 0.7},
                              env="CartPole-v1", algorithm="ppo", returns_extra=None)
    path = report.write_report(tmp_path / "eval" / "64", rec)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(report.REPORT_FILES)
    saved = json.loads(path.read_text())
    assert saved["returns"] == VALUES and saved["lengths"] == [10, 20, 30, 40, 50]
    assert saved["truncated"] == [False, False, True, False, True] and saved["truncated_fraction"] == 0.4
    assert saved["return"]["mean"] == 4.0 and saved["length"]["median"] == 30.0
    assert saved["checkpoint_step"] == 64 and saved["env_param_overrides"] == {"length": 0.7}
    md = (path.parent / "report.md").read_text()
    assert "| return | 4 |" in md and "`length=0.7`" in md and "step: 64" in md
    assert (path.parent / "returns.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="differ in length"):
        report.build_report([1.0], [1, 2], [False])


def test_env_param_overrides_are_cast_to_the_field_type():
    _, params = rljax.make("CartPole-v1")
    new, overrides = parse_env_params(["length=0.7", "max_steps_in_episode=2e2", "gravity = 3"], params)
    assert overrides == {"length": 0.7, "max_steps_in_episode": 200, "gravity": 3.0}
    assert new.length == 0.7 and new.max_steps_in_episode == 200 and isinstance(new.max_steps_in_episode, int)
    assert isinstance(new.gravity, float) and new.masscart == params.masscart
    assert parse_env_params([], params) == (params, {})
    # params restored from a checkpoint hold arrays: an override keeps the array's dtype
    import jax.numpy as jnp

    arrays = params.replace(length=jnp.float32(0.5), max_steps_in_episode=jnp.int32(500))
    new, _ = parse_env_params(["length=0.25", "max_steps_in_episode=100"], arrays)
    assert new.length.dtype == jnp.float32 and float(new.length) == 0.25 and new.max_steps_in_episode.dtype == jnp.int32


@pytest.mark.parametrize("spec, match", [
    ("lenght=0.7", r"'lenght' is not a param of CartPoleParams \(did you mean 'length'\?\); valid names: .*gravity, .*length"),
    ("length", "expected NAME=VALUE"),
    ("=1", "expected NAME=VALUE"),
    ("length=long", "'long' is not a number"),
    ("max_steps_in_episode=10.5", "max_steps_in_episode is an int"),
])
def test_env_param_errors_name_the_bad_input(spec, match):
    _, params = rljax.make("CartPole-v1")
    with pytest.raises(ValueError, match=match):
        parse_env_params([spec], params)


def test_each_kind_of_evaluation_has_its_own_folder(tmp_path):
    assert eval_dir(tmp_path, 64) == tmp_path / "eval" / "64"
    assert eval_dir(tmp_path, 64, "lr=0.1", True) == tmp_path / "members" / "lr=0.1" / "eval" / "64"
    assert eval_dir(tmp_path, 64, None, False, {"length": 0.7, "gravity": 3.0}).name == "64-stochastic-gravity=3-length=0.7"

