"""The shipped bench suites (rljax/bench/suites/*.toml): each parses and passes the checks, no reference is a
placeholder, and minatar runs the published configurations at the published budgets (nothing here trains)."""

import pytest

from rljax.bench.spec import check_spec, load_spec, shipped_suites
from experiments import dqn_minatar, ppo_minatar, pqn_minatar, rainbow_minatar


def test_the_suites_are_shipped():
    assert set(shipped_suites()) >= {"classic", "minatar", "bsuite", "memory"}


@pytest.mark.parametrize("name", shipped_suites())
def test_a_shipped_suite_parses_and_passes_the_checks(name):
    if name == "marl":
        pytest.importorskip("jaxmarl")  # its env is JaxMARL's (the jaxmarl extra)
    spec = load_spec(name)
    configs = check_spec(spec)  # builds each env once and validates each cell's config
    assert len(configs) == len(spec.cells()) > 0
    assert [c.total_timesteps for c in configs] == [c.total_timesteps for c in spec.cells()]


@pytest.mark.parametrize("name", shipped_suites())
def test_no_shipped_suite_cites_a_placeholder_or_an_unverified_reference(name):
    for env in load_spec(name).envs:
        words = env.citation.lower()
        assert env.citation.strip() and "placeholder" not in words and "unverified" not in words, (env.id, env.citation)


def test_the_minatar_suite_runs_the_published_configurations_at_their_budgets():
    spec = load_spec("minatar")
    assert (spec.seeds, spec.total_timesteps) == (5, 10_000_000)  # PureJaxRL's and purejaxql's 1e7
    # a2c and impala have no published MinAtar config; rainbow is c51 configured as DQN's config plus Rainbow.
    assert list(spec.algorithms) == ["ppo", "pqn", "dqn", "rainbow"]

    def published(defaults):
        return {k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items() if k != "env"}

    # Each table is its experiment module's DEFAULTS (the budget where it is not the suite's own); ppo
    # flattens the planes into its MLP as PureJaxRL does; dqn adds only the chunk size (rljax's, not the
    # paper's: 10 chunks, each evaluated and checkpointed).
    assert {**spec.algorithms["ppo"], "total_timesteps": spec.total_timesteps} == published(
        {**ppo_minatar.DEFAULTS, "encoder": "mlp"})
    assert {**spec.algorithms["pqn"], "total_timesteps": spec.total_timesteps} == published(pqn_minatar.DEFAULTS)
    dqn = dict(spec.algorithms["dqn"])
    assert dqn.pop("updates_per_chunk") == 500_000
    assert dqn == published(dqn_minatar.DEFAULTS) and dqn["total_timesteps"] == 5_000_000  # the MinAtar paper's
    rainbow = dict(spec.algorithms["rainbow"])
    assert (rainbow.pop("algorithm"), rainbow.pop("updates_per_chunk")) == ("c51", 500_000)
    assert rainbow == published(rainbow_minatar.DEFAULTS)
    # Rainbow's fields beside DQN's: the Rainbow components, nothing else.
    assert {k: v for k, v in rainbow.items() if dqn.get(k) != v} == {
        "loss": "mse", "num_atoms": 51, "v_min": 0.0, "v_max": 100.0, "double_q": True, "dueling": True, "n_step": 3,
        "prioritized": True, "priority_alpha": 0.5, "noisy": True, "epsilon_start": 0.0, "epsilon_end": 0.0}
    assert {c.name: c.total_timesteps for c in spec.cells() if c.env.id == "Breakout-MinAtar"} == {
        "ppo/Breakout-MinAtar": 10_000_000, "pqn/Breakout-MinAtar": 10_000_000, "dqn/Breakout-MinAtar": 5_000_000,
        "rainbow/Breakout-MinAtar": 5_000_000}


def test_the_minatar_references_are_the_published_figures_each_cited_with_its_protocol():
    envs = {e.id: e for e in load_spec("minatar").envs}
    # gymnax-blines' PPO, the last evaluation of each committed results file; Seaquest: the MinAtar paper's DQN.
    assert {k: e.reference for k, e in envs.items()} == {
        "Asterix-MinAtar": 14.95, "Breakout-MinAtar": 22.88, "Freeway-MinAtar": 58.80, "Seaquest-MinAtar": 20.0,
        "SpaceInvaders-MinAtar": 131.64}
    for game in ("Asterix", "Breakout", "Freeway", "SpaceInvaders"):
        citation = envs[f"{game}-MinAtar"].citation
        for words in (f"agents/{game}-MinAtar/ppo.pkl", "3f029d6", "1e7 env steps", "1 seed", "sampled", "greedily"):
            assert words in citation, (game, words)
    assert "'PPO (R: 28)'" in envs["Breakout-MinAtar"].citation  # the README's figure, and why it is not used
    seaquest = envs["Seaquest-MinAtar"].citation
    for words in ("APPROXIMATE", "arXiv:1903.03176", "5e6", "30 seeds", "sticky actions", "oxygen"):
        assert words in seaquest, words


def test_the_marl_suite_runs_jaxmarls_configurations():
    pytest.importorskip("jaxmarl")
    from experiments import ippo_mpe, mappo_mpe

    spec = load_spec("marl")
    assert (spec.seeds, spec.total_timesteps) == (5, 10_000_000)  # JaxMARL's 1e7
    for name, module in (("ippo", ippo_mpe), ("mappo", mappo_mpe)):
        published = {k: list(v) if isinstance(v, tuple) else v for k, v in module.DEFAULTS.items()
                     if k not in ("env", "total_timesteps")}
        assert spec.algorithms[name] == published, name
