"""rljax.bench.spec: a bench spec is read, narrowed and refused before anything runs (nothing here trains)."""

import dataclasses

import pytest

from rljax.bench.spec import (BenchSpec, SpecError, cell_config, check_spec, load_spec, narrow, parse_spec,
                              spec_differences)


def _doc(**changes):
    doc = {"name": "t", "seeds": 2, "total_timesteps": 4096,
           "evaluation": {"episodes": 4, "interval": 1, "last": 2, "random_episodes": 10},
           "algorithms": {"ppo": {"num_steps": 64}, "dqn": {}},
           "envs": {"CartPole-v1": {"reference": 500.0, "citation": "max return"},
                    "Pendulum-v1": {"reference": 0.0, "citation": "max return", "algorithms": ["ppo"]}}}
    doc.update(changes)
    return doc


def test_a_spec_gives_its_cells_env_by_env_with_each_envs_algorithms_and_budget():
    spec = parse_spec(_doc(envs={"CartPole-v1": {"reference": 500, "citation": "c", "total_timesteps": 8192},
                                 "Pendulum-v1": {"reference": 0, "citation": "c", "algorithms": ["ppo"]}}))
    cells = spec.cells()
    assert [c.name for c in cells] == ["ppo/CartPole-v1", "dqn/CartPole-v1", "ppo/Pendulum-v1"]
    assert [c.total_timesteps for c in cells] == [8192, 8192, 4096]


def test_the_cell_config_carries_the_bench_fields_and_the_overrides():
    spec = parse_spec(_doc(envs={"CartPole-v1": {"reference": 500, "citation": "c", "params": {"length": 0.7}}}))
    config = cell_config(spec, spec.cells()[0])
    assert (config.env, config.seed, config.total_timesteps, config.eval_interval, config.eval_episodes,
            config.num_steps, config.env_params) == ("CartPole-v1", 0, 4096, 1, 4, 64, ("length=0.7",))


@pytest.mark.parametrize("change, words", [
    ({"algorithms": {"ppo": {}, "nosuch": {}}}, ["algorithms.nosuch", "'nosuch'", "ppo"]),
    ({"algorithms": {"ppo": {"learning_starts": 10}}}, ["cell ppo/CartPole-v1", "'learning_starts'", "PPOConfig"]),
    ({"algorithms": {"ppo": {"learning_rate": -1.0}}}, ["cell ppo/CartPole-v1", "learning_rate", "-1.0"]),
    ({"algorithms": {"ppo": {"seed": 3}}}, ["cell ppo/CartPole-v1", "seed", "set by the bench"]),
    ({"algorithms": {"ppo": {}, "sac": {}}}, ["cell sac/CartPole-v1", "does not fit", "Discrete(2)", "ppo"]),
    ({"envs": {"NoSuchEnv-v0": {"reference": 1, "citation": "c"}}}, ["NoSuchEnv-v0", "rljax envs"]),
    ({"envs": {"CartPole-v1": {"reference": 1, "citation": "c", "params": {"nosuch": 1}}}},
     ['envs."CartPole-v1".params', "nosuch"]),
    ({"envs": {"CartPole-v1": {"reference": 1, "citation": "c", "algorithms": ["a2c"]}}},
     ['envs."CartPole-v1".algorithms', "'a2c'"]),
    ({"algorithms": {"ppo": {}, "fast": {"algorithm": "nosuch"}}}, ["algorithms.fast.algorithm", "'nosuch'", "c51"]),
    ({"algorithms": {"ppo": {}, "fast": {"algorithm": 3}}}, ["algorithms.fast.algorithm", "3"]),
    ({"algorithms": {"ppo": {}, "soft": {"algorithm": "sac"}}}, ["cell soft/CartPole-v1", "soft (sac) does not fit",
                                                               "Discrete(2)"]),
    ({"algorithms": {"ppo": {}, "rainbow": {"algorithm": "c51", "clip_eps": 0.1}}},
     ["cell rainbow/CartPole-v1", "'clip_eps'", "C51Config"]),
])
def test_a_spec_that_cannot_run_is_refused_naming_the_cell_and_the_value(change, words):
    with pytest.raises(SpecError) as err:
        check_spec(parse_spec(_doc(**change)))
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_a_named_variant_configures_its_registered_algorithm_under_its_own_name():
    spec = parse_spec(_doc(algorithms={"dqn": {}, "rainbow": {"algorithm": "c51", "noisy": True, "n_step": 3}},
                           envs={"CartPole-v1": {"reference": 500, "citation": "c"}}))
    dqn, rainbow = check_spec(spec)
    assert [c.name for c in spec.cells()] == ["dqn/CartPole-v1", "rainbow/CartPole-v1"]
    assert type(dqn).__name__ == "DQNConfig" and type(rainbow).__name__ == "C51Config"
    assert (rainbow.noisy, rainbow.n_step, dqn.noisy) == (True, 3, False)
    assert parse_spec(spec.to_dict()) == spec  # the key is kept in bench.json


def test_an_env_table_may_name_the_env_to_build_and_its_constructor_arguments():
    """One env built two ways is two envs of a bench: the table's name labels the cells, `env` is built
    with `kwargs` (as --env-kwarg); a table without them saves as it did (old bench.json files match)."""
    spec = parse_spec(_doc(envs={"Wide": {"env": "envs.memory:MemoryCue", "kwargs": {"num_cues": 3}, "reference": 1,
                                          "citation": "c"}}, algorithms={"ppo": {"memory": "gru"}}))
    (config,) = check_spec(spec)
    assert [c.name for c in spec.cells()] == ["ppo/Wide"]
    assert (config.env, config.env_kwargs) == ("envs.memory:MemoryCue", ("num_cues=3",))
    assert parse_spec(spec.to_dict()) == spec and spec.to_dict()["envs"]["Wide"]["kwargs"] == {"num_cues": 3}
    assert set(parse_spec(_doc()).to_dict()["envs"]["CartPole-v1"]) == {"params", "reference", "citation",
                                                                        "algorithms", "total_timesteps"}
    for table, words in (({"env": 3}, ['envs."Wide".env', "3"]), ({"kwargs": {"no such": 1}}, ["'no such'"]),
                         ({"kwargs": 2}, ['envs."Wide".kwargs', "2"]),
                         ({"env": "envs.memory:MemoryCue", "kwargs": {"nosuch": 1}}, ['envs."Wide"', "nosuch"])):
        with pytest.raises(SpecError) as err:
            check_spec(parse_spec(_doc(envs={"Wide": {"reference": 1, "citation": "c", **table}})))
        assert all(word in str(err.value) for word in words), str(err.value)
    with pytest.raises(SpecError, match="env_kwargs is set by the bench"):
        check_spec(parse_spec(_doc(algorithms={"ppo": {"env_kwargs": ["a=1"]}})))


@pytest.mark.parametrize("change, words", [
    ({"seeds": 0}, ["seeds", ">= 1", "0"]),
    ({"total_timesteps": "lots"}, ["total_timesteps", "'lots'"]),
    ({"total_timesteps": 1.5}, ["total_timesteps", "1.5"]),
    ({"evaluation": {"last": 0}}, ["evaluation.last", "0"]),
    ({"evaluation": {"every": 2}}, ["evaluation", "'every'", "interval"]),
    ({"envs": {"CartPole-v1": {"citation": "c"}}}, ['envs."CartPole-v1".reference', "None"]),
    ({"envs": {"CartPole-v1": {"reference": 1}}}, ['envs."CartPole-v1".citation']),
    ({"algorithms": {}}, ["algorithms", "no algorithm"]),
    ({"bogus": 1}, ["'bogus'", "known keys"]),
])
def test_a_malformed_document_is_refused_naming_the_key_and_the_value(change, words):
    with pytest.raises(SpecError) as err:
        parse_spec(_doc(**change))
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_narrowing_keeps_the_named_algorithms_and_envs_and_overrides_seeds_and_budget():
    spec = parse_spec(_doc(envs={"CartPole-v1": {"reference": 500, "citation": "c", "total_timesteps": 8192}}))
    out = narrow(spec, algorithms=["dqn"], envs=["CartPole-v1"], seeds=3, total_timesteps=2048.0)
    assert list(out.algorithms) == ["dqn"] and out.seeds == 3
    assert [(c.name, c.total_timesteps) for c in out.cells()] == [("dqn/CartPole-v1", 2048)]
    # Pendulum lists only ppo: narrowed to dqn it leaves the bench; narrowed to ppo it stays.
    assert [e.id for e in narrow(parse_spec(_doc()), algorithms=["dqn"]).envs] == ["CartPole-v1"]
    kept = narrow(parse_spec(_doc()), algorithms=["ppo"])
    assert [c.name for c in kept.cells()] == ["ppo/CartPole-v1", "ppo/Pendulum-v1"]
    both = narrow(parse_spec(_doc()), algorithms=["ppo"], envs=["Pendulum-v1"])
    assert [c.name for c in both.cells()] == ["ppo/Pendulum-v1"] and check_spec(both)
    with pytest.raises(SpecError, match="--algorithms 'td3': not in the spec; its algorithms: ppo, dqn"):
        narrow(spec, algorithms=["td3"])
    with pytest.raises(SpecError, match="--seeds must be a whole number >= 1, got 0"):
        narrow(spec, seeds=0)
    with pytest.raises(SpecError, match="--total-timesteps"):
        narrow(spec, total_timesteps=float("nan"))


def test_the_saved_form_reads_back_to_the_same_spec_and_differences_are_named():
    spec = parse_spec(_doc())
    assert parse_spec(spec.to_dict()) == spec
    other = dataclasses.replace(spec, seeds=3)
    assert spec_differences(spec.to_dict(), other.to_dict()) == ["seeds: 2 -> 3"]
    assert isinstance(spec, BenchSpec)


def test_a_file_that_is_not_toml_or_a_name_that_is_no_suite_is_refused(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("seeds = = 3\n")
    with pytest.raises(SpecError, match="bad.toml"):
        load_spec(bad)
    with pytest.raises(SpecError, match="neither a file nor a shipped suite; suites: bsuite, classic"):
        load_spec("no-such-suite")


def test_an_algorithms_own_budget_comes_after_the_envs_and_before_the_specs():
    # ppo sets none (the spec's 4096), dqn its own 5e6; CartPole sets its own, which wins over both.
    doc = _doc(algorithms={"ppo": {}, "dqn": {"total_timesteps": 5e6}},
               envs={"CartPole-v1": {"reference": 500, "citation": "c", "total_timesteps": 8192},
                     "Acrobot-v1": {"reference": -100, "citation": "c"}})
    spec = parse_spec(doc)
    assert spec.algorithms["dqn"]["total_timesteps"] == 5_000_000  # a whole float is read as an int
    assert [(c.name, c.total_timesteps) for c in spec.cells()] == [
        ("ppo/CartPole-v1", 8192), ("dqn/CartPole-v1", 8192), ("ppo/Acrobot-v1", 4096),
        ("dqn/Acrobot-v1", 5_000_000)]
    # The budget reaches each cell's config and is not passed to it as an override besides.
    assert [c.total_timesteps for c in check_spec(spec)] == [8192, 8192, 4096, 5_000_000]
    # --total-timesteps replaces every budget, the algorithm's too; narrowing to algorithms keeps it.
    assert {c.total_timesteps for c in narrow(spec, total_timesteps=1000).cells()} == {1000}
    assert "total_timesteps" not in narrow(spec, total_timesteps=1000).algorithms["dqn"]
    assert [c.total_timesteps for c in narrow(spec, algorithms=["dqn"]).cells()] == [8192, 5_000_000]


@pytest.mark.parametrize("value", [0, -5, 1.5, "lots", True, float("inf")])
def test_an_algorithms_budget_that_is_not_a_positive_whole_number_is_refused_naming_it_and_its_cells(value):
    doc = _doc(algorithms={"ppo": {}, "dqn": {"total_timesteps": value}})
    with pytest.raises(SpecError) as err:
        parse_spec(doc)
    message = str(err.value)
    assert message.startswith(f"algorithms.dqn.total_timesteps must be a whole number >= 1, got {value!r}"), message
    assert "(the budget of cells dqn/CartPole-v1)" in message  # Pendulum runs only ppo
    # Every env of the algorithm setting its own, the message says the budget reaches no cell.
    doc["envs"]["CartPole-v1"]["total_timesteps"] = 100
    with pytest.raises(SpecError, match="no cell: every env of the algorithm sets its own"):
        parse_spec(doc)
    # A spec built in Python (no parse_spec) is refused by check_spec, naming the cell.
    spec = dataclasses.replace(parse_spec(_doc()), algorithms={"ppo": {}, "dqn": {"total_timesteps": value}})
    with pytest.raises(SpecError, match=r"cell dqn/CartPole-v1: algorithms\.dqn\.total_timesteps must be"):
        check_spec(spec)


def test_an_algorithms_budget_is_saved_in_bench_json_and_a_change_is_named():
    spec = parse_spec(_doc(algorithms={"ppo": {"num_steps": 64}, "dqn": {"total_timesteps": 8192}}))
    assert spec.to_dict()["algorithms"]["dqn"] == {"total_timesteps": 8192}
    assert parse_spec(spec.to_dict()) == spec
    assert parse_spec(spec.to_dict()).cells() == spec.cells()
    other = parse_spec(_doc(algorithms={"ppo": {"num_steps": 64}, "dqn": {"total_timesteps": 16384}}))
    assert spec_differences(spec.to_dict(), other.to_dict()) == ["algorithms.dqn.total_timesteps: 8192 -> 16384"]
    plain = parse_spec(_doc())
    assert spec_differences(plain.to_dict(), spec.to_dict()) == ["algorithms.dqn.total_timesteps: '<absent>' -> 8192"]
