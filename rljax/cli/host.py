"""The actor-learner path from the command line: ``rljax train ppo|impala --env HOST_ENV``.

::

    rljax train ppo --env gymnasium/CartPole-v1 --num-envs 8 --num-steps 64 --max-policy-lag 1
    rljax env-server gymnasium/CartPole-v1 --num-envs 8 --port 5555 &
    rljax train impala --env server:127.0.0.1:5555 --num-envs 8 --num-actors 2
    rljax train ppo --env server:127.0.0.1:5555 --num-envs 8 --num-actors 2 --max-actors 8   # autoscaled
    rljax resume runs/host-cp                   # continues with the saved layout

An ``--env`` that names host envs (:func:`rljax.host.sources.is_host_env`) sends ``rljax train``
and ``rljax resume`` here (:func:`train_host_command`) instead of the compiled JAX path. The flags of
:func:`add_host_flags` lay out actors and learner (:class:`rljax.actorlearner.learner.HostOptions`);
a resume keeps the saved layout except for the flags typed again.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

__all__ = ["HOST_FLAGS", "add_host_flags", "host_options", "parse_device", "parse_devices",
           "refuse_host_flags_for_jax_envs", "supports_host", "train_host_command"]

HOST_FLAGS = {"num_actors": "num_actors", "max_policy_lag": "max_policy_lag", "queue_size": "queue_size",
              "rollout_timeout": "rollout_timeout_s", "max_env_restarts": "max_env_restarts",
              "restart_backoff": "restart_backoff_s", "min_actors": "min_actors", "max_actors": "max_actors",
              "scale_window": "scale_window", "apex_epsilon": "apex_epsilon", "apex_alpha": "apex_alpha",
              "initial_priority": "initial_priority", "replay": "replay", "frames_per_item": "frames_per_item"}
"""Host flags (dest) -> :class:`~rljax.actorlearner.learner.HostOptions` field, for those a run saves."""


def supports_host(config_cls: Any) -> bool:
    """Whether the actor-learner path trains ``config_cls`` (PPO, IMPALA, PQN and the off-policy algorithms)."""
    from rljax.agents.impala import IMPALAConfig
    from rljax.agents.offpolicy import OffPolicyConfig
    from rljax.agents.ppo import PPOConfig
    from rljax.agents.pqn import PQNConfig

    return issubclass(config_cls, (PPOConfig, IMPALAConfig, PQNConfig, OffPolicyConfig))


def add_host_flags(parser: argparse.ArgumentParser, parse_int: Any, parse_float: Any, offpolicy: bool = False) -> None:
    """The ``host envs`` flag group (used only with an ``--env`` that names host envs); ``offpolicy``:
    with the off-policy learner's (Ape-X's exploration rates and initial priorities)."""
    group = parser.add_argument_group(
        "host envs (--env gymnasium/<id>, envpool/<id>, server:HOST:PORT, or listen:HOST:PORT for rollout workers "
        "that connect: actors step them, a learner updates; docs/host-envs.md, docs/serving.md)")
    group.add_argument("--num-actors", type=parse_int, default=1, metavar="N",
                       help="actor threads, each with its own batch of --num-envs host envs (listen:HOST:PORT: the "
                            "rollout workers the run waits for before it starts, up to --rollout-timeout)")
    group.add_argument("--min-actors", type=parse_int, default=0, metavar="N",
                       help="autoscaling: the fewest actors (0: --num-actors); the run starts with --num-actors and "
                            "a controller adds or retires actors from the learner's and actors' busy fractions "
                            "(docs/host-envs.md, Autoscaled actors)")
    group.add_argument("--max-actors", type=parse_int, default=0, metavar="N",
                       help="autoscaling: the most actors (0: --num-actors)")
    group.add_argument("--scale-window", type=parse_int, default=8, metavar="UPDATES",
                       help="autoscaling: updates measured before each decision, and after each change")
    group.add_argument("--max-policy-lag", type=parse_int, default=1, metavar="K",
                       help="a rollout acts with params at most K updates old (0: act and learn in turn)")
    group.add_argument("--queue-size", type=parse_int, default=2, metavar="N",
                       help="rollouts that may wait for the learner")
    group.add_argument("--actor-devices", default=None, metavar="DEVICES",
                       help="where the actors run the policy, comma-separated: each an index into this process's devices or "
                            "PLATFORM:INDEX (e.g. 0, cpu:1, gpu:0,gpu:1); actor a on the (a mod count)-th; "
                            "default: the process's first device")
    group.add_argument("--learner-devices", default=None, metavar="DEVICES",
                       help="where the learner updates (as --actor-devices); on several it is data-parallel, each "
                            "rollout's envs split over them (--num-envs a multiple of their count); in a job of several "
                            "processes, these devices of every process")
    group.add_argument("--rollout-timeout", type=parse_float, default=600.0, metavar="SECONDS",
                       help="the learner's longest wait for a rollout before the run fails")
    group.add_argument("--max-env-restarts", type=parse_int, default=3, metavar="N",
                       help="failures in a row an actor's envs may have (each one restarts them after a back-off) "
                            "before the run stops")
    group.add_argument("--restart-backoff", type=parse_float, default=1.0, metavar="SECONDS",
                       help="the first back-off before restarting failed envs (doubling per failure in a row)")
    if not offpolicy:
        return
    from rljax.actorlearner.offpolicy import INITIAL_PRIORITIES, REPLAYS

    group.add_argument("--apex-epsilon", type=parse_float, default=0.0, metavar="EPS",
                       help="Ape-X exploration (dqn, c51, qrdqn): actor i of A explores with the fixed rate "
                            "EPS^(1 + apex_alpha * i / (A - 1)) instead of the epsilon schedule (Ape-X: 0.4); 0: the "
                            "schedule")
    group.add_argument("--apex-alpha", type=parse_float, default=7.0, metavar="ALPHA",
                       help="the spread of the Ape-X exploration rates (Ape-X: 7)")
    group.add_argument("--initial-priority", choices=INITIAL_PRIORITIES, default="max",
                       help="prioritised replay on host envs: new items enter with the largest priority seen (max) or "
                            "their TD error under the learner's params (td, as Ape-X)")
    group.add_argument("--replay", choices=REPLAYS, default="device",
                       help="where the replay lives: the learner's device, or host memory (stacked uint8 frames "
                            "stored once: a 1e6-item Atari replay in ~10 GiB; with --prioritized the priorities stay "
                            "on the device; docs/host-envs.md)")
    group.add_argument("--frames-per-item", type=parse_float, default=1.5, metavar="F",
                       help="--replay host with stacked uint8 frames: the frame ring's frames per item (about 1 when "
                            "each observation shifts by a frame); 0 stores observations as they are")


def parse_devices(text: str | None) -> tuple[Any, ...]:
    """The JAX devices a comma-separated ``text`` names (each as :func:`parse_device`); ``()`` for None.

    Raises:
        ValueError: an empty item, no such device, or a device named twice.
    """
    if text is None:
        return ()
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise ValueError(f"devices {text!r}: an empty item (give e.g. 0,1 or gpu:0,gpu:1)")
    devices = tuple(parse_device(item) for item in items)
    if len(set(devices)) != len(devices):
        raise ValueError(f"devices {text!r}: names a device more than once")
    return devices


def parse_device(text: str) -> Any:
    """The JAX device ``text`` names: an index into this process's devices (``jax.local_devices()``;
    all of them with one process) or ``PLATFORM:INDEX``.

    Raises:
        ValueError: no such device; the message lists the devices there are.
    """
    import jax

    platform, _, index = text.rpartition(":")
    try:
        devices = jax.local_devices(backend=platform or None)
    except RuntimeError:
        devices = []
    if index.isdigit() and int(index) < len(devices):
        return devices[int(index)]
    have = ", ".join(f"{d.platform}:{i}" for i, d in enumerate(jax.local_devices()))
    raise ValueError(f"no device {text!r}: this process has {have} (give an index or PLATFORM:INDEX)")


def host_options(args: argparse.Namespace, saved: dict[str, Any] | None, explicit: set[str]) -> Any:
    """The :class:`~rljax.actorlearner.learner.HostOptions` of the flags, the saved layout (a resume)
    under those typed again."""
    from rljax.actorlearner.learner import HostOptions

    values = {field: getattr(args, dest) for dest, field in HOST_FLAGS.items() if hasattr(args, dest)}
    for dest, field in HOST_FLAGS.items():
        if saved and field in saved and dest not in explicit:
            values[field] = saved[field]
    return HostOptions(**values, actor_devices=parse_devices(args.actor_devices),
                       learner_devices=parse_devices(args.learner_devices))


def refuse_host_flags_for_jax_envs(parser: argparse.ArgumentParser, args: argparse.Namespace,
                                   explicit: set[str]) -> None:
    """A host flag set to other than its default with an env that is not a host env is a usage error
    naming it (a config file that ``rljax config`` wrote holds every flag at its default)."""
    typed = sorted(f"--{d.replace('_', '-')}" for d in [*HOST_FLAGS, "actor_devices", "learner_devices"]
                   if d in explicit and getattr(args, d, None) != parser.get_default(d))
    if typed:
        parser.error(f"{', '.join(typed)} lay out the actor-learner path for host envs (--env gymnasium/<id>, "
                     f"envpool/<id> or server:HOST:PORT); this run's env runs inside the compiled program")


def train_host_command(config: Any, args: argparse.Namespace, parser: argparse.ArgumentParser, explicit: set[str],
                       options: dict[str, Any], saved_run_dir: str | None, run_dir: str | None) -> int:
    """Trains ``config`` on host envs with the run options ``options`` (those of
    :func:`rljax.cli.flags.train_kwargs`); returns the exit status."""
    if config.env.startswith("envpool/") and not _installed("envpool"):
        parser.error(f"--env {config.env} needs EnvPool, which is not installed: pip install -e \".[envpool]\"")
    if not supports_host(type(config)):
        parser.error(f"--env {config.env} names host envs, which the actor-learner path trains with ppo, impala, "
                     f"pqn or an off-policy algorithm (dqn, c51, qrdqn, sac, td3, d4pg), not "
                     f"{type(config).__name__.removesuffix('Config').lower()}")
    from rljax.actorlearner.run import done_line, no_videos_while_training, run_host, saved_host
    from rljax.cli.process import call_training
    from rljax.runtime.distributed import launched_as_leader
    from rljax.training.options import RunOptions

    if options.get("video_interval"):
        parser.error(no_videos_while_training(config.env, options["video_interval"]))
    try:
        saved = dataclasses.asdict(saved_host(saved_run_dir)) if saved_run_dir else None
        host = host_options(args, saved, explicit)
    except ValueError as err:
        parser.error(str(err))
    result, status = call_training(lambda: run_host(config, RunOptions(run_dir=run_dir, **options), host), run_dir)
    if status is not None:
        return status
    if launched_as_leader():  # processes 1.. of a multi-process run stay quiet
        print(done_line(result, config, run_dir), flush=True)
    return 0


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
