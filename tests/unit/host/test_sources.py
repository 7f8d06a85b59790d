"""Host env names: what they parse to, and the errors a bad one gets."""

from __future__ import annotations

import pytest

from rljax.host.gymnasium_env import GymnasiumEnv
from rljax.host.server import TOKEN_VARIABLE, EnvServer
from rljax.host.sources import is_host_env, make_host_env, parse_server


def test_names():
    assert is_host_env("gymnasium/CartPole-v1") and is_host_env("server:127.0.0.1:5555")
    assert is_host_env("envpool/Pong-v5")
    assert not is_host_env("CartPole-v1") and not is_host_env("gymnax/CartPole-v1") and not is_host_env("m:Env")
    assert parse_server("server:127.0.0.1:5555") == ("127.0.0.1", 5555)
    assert parse_server("server:[::1]:80") == ("::1", 80)
    assert parse_server("server:sim.example.org:6000") == ("sim.example.org", 6000)


@pytest.mark.parametrize("name", ["server:127.0.0.1", "server::5555", "server:h:0", "server:h:99999", "server:h:x"])
def test_a_bad_server_name_says_the_form(name):
    with pytest.raises(ValueError, match="server:HOST:PORT with a port in 1..65535"):
        parse_server(name)


def test_make_host_env_builds_each_source_and_checks_the_batch_size(monkeypatch):
    env = make_host_env("gymnasium/CartPole-v1", 2)
    assert isinstance(env, GymnasiumEnv) and env.spec.num_envs == 2
    env.close()
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    with EnvServer(lambda: GymnasiumEnv("CartPole-v1", 3)) as srv:
        srv.start()
        host, port = srv.address
        with pytest.raises(ValueError, match="serves 3 envs, not num_envs=2: pass --num-envs 3"):
            make_host_env(f"server:{host}:{port}", 2)
        env = make_host_env(f"server:{host}:{port}", 3)
        assert env.reset(0).shape == (3, 4)
        env.close()
    with pytest.raises(ValueError, match="not a host env name: use gymnasium/<id> .*, envpool/<id> .* or server:"):
        make_host_env("atari/Pong-v5", 2)


def test_the_documented_example_runs_as_written():
    import pathlib
    import re

    doc = pathlib.Path(__file__).resolve().parents[3] / "docs" / "host-envs.md"
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S) if "make_host_env(" in b]
    namespace: dict = {}
    exec(compile(block, str(doc), "exec"), namespace)  # noqa: S102 - our own documentation
    assert namespace["obs"].shape == (8, 4) and namespace["step"].obs.shape == (8, 4)


@pytest.mark.parametrize("name, kind", [("envpool/Pong-v5", "an EnvPool batch"),
                                        ("server:127.0.0.1:1", "an env server")])
def test_only_gymnasium_envs_are_made_to_render(name, kind):
    with pytest.raises(ValueError, match=f"{name} cannot be drawn: it is {kind}, which sends no frames"):
        make_host_env(name, 1, render=True)
