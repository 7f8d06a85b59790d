"""rljax.bench.report: the report is a pure function of scores.csv (nothing here trains)."""

import json

import numpy as np
import pytest

from rljax.bench import stats
from rljax.bench.report import compute_report, read_scores, report_markdown, score_matrices, write_report
from rljax.bench.runner import write_scores


def _rows():
    """ppo on envs a, b (3 seeds); dqn on a only (2 seeds): normalised = score / 10."""
    rows = []
    for algo, env, seeds, base in (("ppo", "a", 3, 5.0), ("ppo", "b", 3, 8.0), ("dqn", "a", 2, 3.0)):
        for s in range(seeds):
            score = base + s
            rows.append({"algorithm": algo, "env": env, "seed": s, "score": score, "normalized_score": score / 10})
    return rows


def test_score_matrices_are_seeds_by_envs_per_algorithm():
    m = score_matrices(_rows())
    assert m["ppo"][0] == ["a", "b"]
    np.testing.assert_array_equal(m["ppo"][1], [[0.5, 0.8], [0.6, 0.9], [0.7, 1.0]])
    assert m["dqn"][0] == ["a"] and m["dqn"][1].shape == (2, 1)


def test_an_algorithm_whose_envs_ran_different_seeds_is_refused():
    rows = [r for r in _rows() if not (r["algorithm"] == "ppo" and r["env"] == "b" and r["seed"] == 2)]
    with pytest.raises(ValueError, match="ppo: env b has seeds \\[0, 1\\] but a has \\[0, 1, 2\\]"):
        score_matrices(rows)


def test_the_report_holds_the_stats_modules_figures_over_each_algorithms_own_envs():
    report = compute_report(_rows(), reps=500, seed=1)
    ppo = np.array([[0.5, 0.8], [0.6, 0.9], [0.7, 1.0]])
    expected = stats.as_plain(stats.aggregate_intervals({"ppo": ppo}, reps=500, seed=1))["ppo"]
    for name in ("iqm", "mean", "median", "optimality_gap"):
        assert report["algorithms"]["ppo"][name] == expected[name]
    # mean of the six normalised scores 0.5..1.0 is 0.75; the gap to 1 is 0.25.
    assert report["algorithms"]["ppo"]["mean"]["estimate"] == pytest.approx(0.75)
    assert report["algorithms"]["ppo"]["optimality_gap"]["estimate"] == pytest.approx(0.25)
    assert report["algorithms"]["dqn"]["envs"] == ["a"] and report["algorithms"]["dqn"]["runs"] == 2
    # P(ppo > dqn) over env a only: ppo's 0.5, 0.6, 0.7 all beat dqn's 0.3, 0.4.
    poi = report["probability_of_improvement"]
    assert poi["ppo"]["dqn"]["estimate"] == 1.0 and poi["dqn"]["ppo"]["estimate"] == 0.0
    assert poi["ppo"]["dqn"]["envs"] == ["a"]
    assert report["per_env"]["b"]["ppo"] == {"score": 9.0, "normalized_score": pytest.approx(0.9), "runs": 3}


def test_the_report_is_recomputed_from_scores_csv_alone_to_the_same_bits(tmp_path):
    write_scores(tmp_path, _rows())
    assert read_scores(tmp_path / "scores.csv") == _rows()
    report = write_report(tmp_path)
    assert json.loads((tmp_path / "report.json").read_text()) == report == compute_report(_rows())
    text = (tmp_path / "report.md").read_text()
    assert "| ppo | 2 | 3 |" in text and "| a | 3.50 (0.35) | 6.00 (0.60) |" in text


def test_report_md_names_each_envs_random_score_reference_and_citation():
    text = report_markdown(compute_report(_rows(), reps=100),
                           {"a": {"random": 1.5, "reference": 10.0, "citation": "Someone et al. 2020"}})
    assert "| a | 1.50 | 10 | Someone et al. 2020 |" in text


def test_no_scores_is_an_error_naming_why(tmp_path):
    with pytest.raises(ValueError, match="no finished cell"):
        compute_report([])
    (tmp_path / "scores.csv").write_text("algorithm,env,seed,score\n")
    with pytest.raises(ValueError, match="missing columns \\['normalized_score'\\]"):
        read_scores(tmp_path / "scores.csv")
