"""Host env names: ``gymnasium/<id>``, ``envpool/<id>`` and ``server:HOST:PORT`` to a batch of host envs.

:func:`make_host_env` is what ``--env`` resolves to on the host path; :func:`is_host_env` tells a
host env name from a JAX env name (the registry's ids, gymnax's, ``module:Name``).
"""

from __future__ import annotations

from typing import Any

from rljax.host.base import HostEnv, parse_server

__all__ = ["HOST_PREFIXES", "is_host_env", "make_host_env", "parse_server"]

HOST_PREFIXES = ("gymnasium/", "envpool/", "server:", "listen:")
"""How a host env name starts (``listen:HOST:PORT``: rollout workers connect to the learner,
:mod:`rljax.host.listen`)."""


def is_host_env(name: str) -> bool:
    """Whether ``name`` names a host env (see :data:`HOST_PREFIXES`)."""
    return isinstance(name, str) and name.startswith(HOST_PREFIXES)


def make_host_env(name: str, num_envs: int | None, render: bool = False, **kwargs: Any) -> HostEnv:
    """The batch of ``num_envs`` host envs ``name`` names.

    * ``gymnasium/<id>``: :class:`~rljax.host.gymnasium_env.GymnasiumEnv` (``asynchronous=True`` steps
      them in worker processes; other keyword arguments go to ``gymnasium.make_vec``);
    * ``envpool/<id>``: :class:`~rljax.host.envpool_env.EnvPoolEnv` (the ``envpool`` extra; keyword
      arguments go to ``envpool.make``);
    * ``server:HOST:PORT``: :class:`~rljax.host.client.ServerEnv` (keyword arguments: ``token``,
      ``timeout_s``); the server decides the batch size, which must equal ``num_envs``. A pool
      (``server:HOST:PORT,HOST:PORT``, ``server:@FILE``: :mod:`rljax.host.pool`) gives its first
      server's batch here; training follows the whole pool.

    ``num_envs=None`` asks for the source's own batch: an env server's, one env of the others.

    ``render=True`` makes envs that draw themselves (``env.render() -> uint8 [N, H, W, 3]``, for a
    video): Gymnasium envs with an ``rgb_array`` render mode. Raises ``ValueError`` naming the env
    for any other (EnvPool batches and env servers send no frames).
    """
    if num_envs is None and not name.startswith("server:"):  # the source's own batch: one env here
        num_envs = 1
    if render and not name.startswith("gymnasium/"):
        kind = "an EnvPool batch" if name.startswith("envpool/") else "an env server" if name.startswith("server:") \
            else "not a host env"
        raise ValueError(f"{name} cannot be drawn: it is {kind}, which sends no frames; host envs draw only as "
                         f"Gymnasium envs with an rgb_array render mode (gymnasium/<id>)")
    if name.startswith("gymnasium/"):
        from rljax.host.gymnasium_env import GymnasiumEnv

        return GymnasiumEnv(name[len("gymnasium/"):], num_envs, render=render, **kwargs)
    if name.startswith("envpool/"):
        from rljax.host.envpool_env import EnvPoolEnv

        return EnvPoolEnv(name[len("envpool/"):], num_envs, **kwargs)
    if name.startswith("listen:"):
        raise ValueError(f"{name} names the rollout workers that connect to a training run; outside that run there "
                         f"are none to step: evaluate on the env the workers step (e.g. rljax eval RUN_DIR --env "
                         f"gymnasium/CartPole-v1) or on an env server (server:HOST:PORT)")
    if name.startswith("server:"):
        from rljax.host.client import ServerEnv
        from rljax.host.pool import ServerPool, is_server_pool

        if is_server_pool(name):  # one batch (evaluation, a video): the pool's first server
            name = f"server:{ServerPool(name).addresses()[0]}"
        env = ServerEnv(*parse_server(name), **kwargs)
        if num_envs is not None and env.spec.num_envs != num_envs:
            env.close()
            raise ValueError(f"the env server {name} serves {env.spec.num_envs} envs, not num_envs={num_envs}: pass "
                             f"--num-envs {env.spec.num_envs}, or restart the server with --num-envs {num_envs}")
        return env
    raise ValueError(f"{name!r} is not a host env name: use gymnasium/<id> (e.g. gymnasium/CartPole-v1), "
                     f"envpool/<id> (e.g. envpool/Pong-v5) or server:HOST:PORT")
