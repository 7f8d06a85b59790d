"""``rljax eval RUN_DIR``: evaluate a run's checkpoint and write a report beside it.

::

    rljax eval RUN_DIR [--episodes N] [--stochastic] [--env-param k=v ...] [--video FILE.gif]
                       [--step S] [--member NAME] [--seed N]
    rljax eval RUN_DIR [--opponent random|RUN_DIR|MODULE:NAME] [--games N] [--search [--simulations S]]

A run of a two-player game (an observation with ``current_player``) is evaluated by matches instead
of episodes (:mod:`rljax.policy.games`): ``N`` games as the first mover and ``N`` as the second
against the opponent (random by default), the report's ``as_first`` and ``as_second`` holding the
wins, draws and losses on each side; against the default opponent with the network's greedy policy
it goes into ``eval/<step>/``, otherwise into ``eval/<step>-vs-<opponent>[-search[-S]]/`` (``-S``: a search of
``--simulations S`` other than the run's own ``num_simulations``, so searches of two sizes keep two reports).

Loads the policy read-only (:func:`rljax.policy.trained.load`: no run lock, so a run that is still training
can be evaluated), plays ``N`` episodes in parallel on the device with the env's time limit
(:func:`rljax.policy.evaluate.evaluate`), and writes ``report.json``, ``report.md`` and ``returns.png``
(:mod:`rljax.policy.report`) into ``RUN_DIR/eval/<step>/`` (a sweep member's into
``RUN_DIR/members/<name>/eval/<step>/``). An evaluation of another kind than the default gets its
own folder, so it never replaces the default one: ``<step>-stochastic``, ``<step>-length=0.7``
(``--env-param`` overrides, sorted by name), or both. ``--env-param NAME=V1,V2,...`` evaluates each
value (every combination, for several such params), each into its own folder with its own summary
line: a robustness grid from one compiled evaluation. A run trained on host envs (``gymnasium/<id>``,
``envpool/<id>``, ``server:HOST:PORT``) is evaluated on ``N`` of those envs stepped on the host, the
policy jitted (:func:`rljax.policy.evaluate.run_host_episodes`), and its video drawn by a Gymnasium
env's ``rgb_array`` renderer (other host envs cannot draw: a usage error). Every input is checked before any episode is
played, so bad input writes nothing; each file is written to a temporary name and moved into
place. Exit statuses: :mod:`rljax.cli.process` (2: usage error, 74: I/O error).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys
import time
from typing import Any

from rljax.cli.process import EXIT_IO, EXIT_USAGE, enable_compilation_cache
from rljax.core.registry import parse_env_params  # shared with every --env-param flag

__all__ = ["add_parser", "run", "parse_env_params", "env_param_grid", "eval_dir", "MAX_EPISODES", "MAX_HOST_EPISODES"]

PROG = "rljax eval"
"""The command as its error lines name it."""


MAX_EPISODES = 1 << 20
"""The most episodes one evaluation plays (each is an env of one batch, all on the device at once)."""
MAX_HOST_EPISODES = 4096
"""The most episodes one evaluation of a host-env run plays (each a host env, all stepped together)."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``eval`` to the ``rljax`` subcommands."""
    parser = subparsers.add_parser("eval", help="evaluate a checkpoint and write a report beside it",
                                   description="Evaluate a trained policy and write a report into "
                                               "RUN_DIR/eval/<step>/.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run (or sweep) directory with checkpoints")
    parser.add_argument("--episodes", type=int, default=100, help="episodes to play (in parallel); default 100")
    parser.add_argument("--stochastic", action="store_true",
                        help="sample the policy (default: act deterministically, i.e. greedily)")
    parser.add_argument("--env-param", action="append", default=[], metavar="NAME=VALUE",
                        help="override an env param (e.g. length=0.7 for CartPole); repeat for several; "
                             "NAME=V1,V2,... evaluates each value (a robustness grid: one report each)")
    parser.add_argument("--video", metavar="FILE.gif", help="also write a GIF of one episode")
    parser.add_argument("--step", type=int, help="checkpoint step (env steps); default: the newest")
    parser.add_argument("--member", help="sweep member: its name (members/<name>) or index")
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes' randomness; default 0")
    parser.add_argument("--opponent", metavar="random|RUN_DIR|MODULE:NAME",
                        help="two-player games: play matches against this opponent instead of episodes (the "
                             "default for a game: random); MODULE:NAME is a function (obs, legal_action_mask, key) "
                             "-> action, e.g. envs.board_games:tictactoe_perfect")
    parser.add_argument("--games", type=int, default=100,
                        help="two-player games: games as the first mover and as many as the second; default 100")
    parser.add_argument("--search", action="store_true",
                        help="two-player games: an AlphaZero policy (and an AlphaZero opponent run) plays with its "
                             "search instead of its network alone")
    parser.add_argument("--league", action="store_true",
                        help="two-player games: every kept checkpoint and a random player play each other "
                             "(--games per side per pair) and get Elo ratings (random = 0); report in eval/league/")
    parser.add_argument("--simulations", type=int,
                        help="with --search: simulations per move (default: the run's num_simulations)")
    parser.add_argument("--env", metavar="NAME",
                        help="a run on host envs: evaluate on these host envs instead of the run's own (e.g. "
                             "gymnasium/CartPole-v1 for a run trained on an env server or on rollout workers); "
                             "their spaces must be the run's")
    parser.add_argument("--no-compile-cache", action="store_true", help="do not use the persistent compile cache")
    return parser


def eval_dir(run_dir: str | os.PathLike, step: int, member: str | None = None, deterministic: bool = True,
             overrides: dict[str, Any] | None = None, kind: str = "") -> pathlib.Path:
    """Where an evaluation's report goes: ``RUN_DIR[/members/<member>]/eval/<step>[-stochastic][-k=v...][kind]``
    (``kind``: a match's ``-vs-<opponent>`` and ``-search[-S]``, empty for episodes and for the default
    match, the network against a random player)."""
    base = pathlib.Path(run_dir)
    if member is not None:
        base = base / "members" / str(member)
    name = str(int(step))
    if not deterministic:
        name += "-stochastic"
    for key in sorted(overrides or {}):
        name += f"-{key}={overrides[key]:g}" if isinstance(overrides[key], float) else f"-{key}={overrides[key]}"
    return base / "eval" / (name + kind)


def _check_video_path(video: str | None) -> None:
    if video is None:
        return
    path = pathlib.Path(video)
    if path.suffix.lower() != ".gif":
        raise ValueError(f"--video {video}: the video is a GIF; give a path ending in .gif")
    if not path.parent.resolve().is_dir():
        raise ValueError(f"--video {video}: folder {path.parent} does not exist")
    if not os.access(path.parent.resolve(), os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"--video {video}: cannot write there (permission denied)")


def env_param_grid(specs: list[str]) -> list[list[str]]:
    """``--env-param`` specs with comma-separated values as the list of their combinations, one
    ``NAME=VALUE`` list per evaluation: ``["length=0.5,1", "masscart=2"]`` ->
    ``[["length=0.5", "masscart=2"], ["length=1", "masscart=2"]]`` (later names vary fastest)."""
    import itertools

    choices = []
    for spec in specs:
        name, sep, text = spec.partition("=")
        values = text.split(",") if sep else [text]
        if sep and any(not v.strip() for v in values):
            raise ValueError(f"--env-param {spec!r}: an empty value in the list; write NAME=V1,V2,... "
                             f"(e.g. length=0.5,1,2)")
        choices.append([f"{name}={v.strip()}" if sep else spec for v in values])
    combos = [list(combo) for combo in itertools.product(*choices)]
    return [combo for i, combo in enumerate(combos) if combo not in combos[:i]]  # a repeated value once


def _prepare(args: argparse.Namespace) -> tuple[Any, list[tuple[Any, dict[str, Any]]], Any]:
    """Everything that can fail on bad input, before any episode is played.

    Returns:
        ``(policy, [(env_params, overrides)] one per evaluation, draw)``; ``draw`` is None without
        ``--video``: a :func:`~rljax.policy.video.frame_drawer`, or for a policy of host envs the
        host env that draws (:func:`~rljax.policy.video.host_renderer`).
    """
    if not 1 <= args.episodes <= MAX_EPISODES:
        raise ValueError(f"--episodes must be in [1, {MAX_EPISODES}] (all of them run at once, one env each), "
                         f"got {args.episodes}")
    if not 0 <= args.seed < 2 ** 32:
        raise ValueError(f"--seed must be in [0, 2**32 - 1], got {args.seed}")
    if not pathlib.Path(args.run_dir).is_dir():
        if pathlib.Path(args.run_dir).exists():
            raise FileNotFoundError(f"{args.run_dir} is not a directory: pass the run directory of a training run")
        raise FileNotFoundError(f"run directory {args.run_dir} does not exist")
    _check_video_path(args.video)
    from rljax.policy.trained import load

    member = int(args.member) if args.member is not None and args.member.isdigit() else args.member
    grid = env_param_grid(args.env_param)
    if args.video and len(grid) > 1:
        raise ValueError(f"--video draws one episode, but --env-param lists {len(grid)} evaluations: give one value "
                         f"per param with --video")
    from rljax.policy.trained import is_host_policy

    policy = load(args.run_dir, args.step, member=member)
    if args.env and not is_host_policy(policy):
        raise ValueError(f"--env {args.env}: this run trained on the JAX env {policy.config.env}, which it evaluates "
                         f"on (--env-param changes its params); --env names other host envs for a run on host envs")
    if args.env:
        policy = dataclasses.replace(policy, env=_other_host_envs(policy, args.env))
    if is_host_policy(policy):  # stepped on the host: one host env per episode, drawn by the env itself
        if args.env_param:
            raise ValueError(f"--env-param {args.env_param[0]}: {policy.env.name} is a host env, which has no env "
                             f"params to change")
        if args.episodes > MAX_HOST_EPISODES:
            raise ValueError(f"--episodes {args.episodes}: a host env run evaluates at most {MAX_HOST_EPISODES} "
                             f"episodes (one host env each, stepped together on the CPU)")
        if not args.video:
            return policy, [(None, {})], None
        from rljax.policy.video import host_renderer

        return policy, [(None, {})], host_renderer(policy)
    evaluations = [parse_env_params(specs, policy.env_params) for specs in grid]
    draw = None
    if args.video:
        from rljax.policy.video import frame_drawer

        draw = frame_drawer(policy.env, evaluations[0][0])
    return policy, evaluations, draw


def _other_host_envs(policy: Any, name: str) -> Any:
    """The policy's host env spaces for the envs ``name`` names, after checking (one env made and
    closed) that their spaces are the run's: as its checkpoint records them
    (:func:`~rljax.actorlearner.run.space_json`), an observation's bounds aside (a policy acts on any
    value of its shape and dtype; an action space's bounds clip and scale its actions)."""
    from rljax.actorlearner.run import space_json
    from rljax.env import describe_space
    from rljax.host.spaces import HostEnvSpaces

    spaces = policy.env.on(name)
    probe = spaces.make(None)  # the source's own batch (an env server's), or one env
    try:
        made = HostEnvSpaces(name, probe.spec.observation_space, probe.spec.action_space)
    finally:
        probe.close()
    for what, want, got in (("observation", policy.env.observation_space(), made.observation_space()),
                            ("action", policy.env.action_space(), made.action_space())):
        ignored = ("low", "high") if what == "observation" else ()
        if {k: v for k, v in space_json(want).items() if k not in ignored} != \
                {k: v for k, v in space_json(got).items() if k not in ignored}:
            raise ValueError(f"--env {name}: its {what} space is {describe_space(got)}, the run's {policy.config.env} "
                             f"is {describe_space(want)}: a policy acts only on the spaces it trained on")
    return spaces


def _env_params_dict(env_params: Any) -> dict[str, Any]:
    from rljax.store.tracking import json_scalar

    if not dataclasses.is_dataclass(env_params):
        return {}
    return {f.name: json_scalar(getattr(env_params, f.name)) for f in dataclasses.fields(env_params)}


def _write_video(args: argparse.Namespace, policy: Any, env_params: Any, draw: Any) -> str:
    """Plays and draws one episode, writes the GIF; returns a note for the summary line."""
    import jax

    from rljax.policy.trained import is_host_policy
    from rljax.policy.video import DEFAULT_FPS, episode_frames, host_episode_frames, write_gif

    if is_host_policy(policy):  # env 0 of the evaluation's seeds: a greedy video is the report's first episode
        episode = host_episode_frames(policy, args.seed, deterministic=not args.stochastic, envs=draw)
        fps = getattr(draw, "render_fps", None) or DEFAULT_FPS
    else:  # evaluate()'s key and batch: a greedy video is the report's first episode
        episode = episode_frames(policy, jax.random.key(args.seed), env_params=env_params,
                                 deterministic=not args.stochastic, batch=args.episodes, index=0, draw=draw)
        fps = getattr(policy.env, "render_fps", DEFAULT_FPS)
    write_gif(episode.frames, args.video, fps)
    ended = "" if episode.finished else ", did not end"
    return f"; video {args.video} (return {episode.episode_return:.2f}, {episode.length} steps{ended})"


def _evaluate_and_report(args: argparse.Namespace, policy: Any, env_params: Any, overrides: dict[str, Any],
                         draw: Any) -> str:
    """Plays the episodes, writes the report (and the video); returns the summary line."""
    import jax

    from rljax.policy.evaluate import evaluate
    from rljax.policy.report import build_report, write_report

    t0 = time.perf_counter()
    episodes = evaluate(policy, args.episodes, seed=args.seed, env_params=env_params,
                        deterministic=not args.stochastic)
    returns, lengths, truncated = jax.device_get((episodes.returns, episodes.lengths, episodes.truncated))
    wall = time.perf_counter() - t0
    report = build_report(returns, lengths, truncated, run_dir=str(args.run_dir), member=policy.member,
                          algorithm=policy.algorithm, env=args.env or str(getattr(policy.config, "env", policy.env)),
                          checkpoint_step=int(policy.step), config_hash=policy.config_hash,
                          deterministic=not args.stochastic, seed=args.seed, env_param_overrides=overrides,
                          env_params=_env_params_dict(env_params), eval_wall_s=round(wall, 3),
                          video=args.video)
    if episodes.won is not None:  # a multi-agent env that reports wins (SMAX)
        report["win_rate"] = float(jax.device_get(episodes.won).astype(float).mean())
    note = _write_video(args, policy, env_params, draw) if draw is not None else ""
    kind = f"-on-{_slug(args.env)}" if args.env else ""  # another source of the run's envs
    out = write_report(eval_dir(args.run_dir, policy.step, policy.member, not args.stochastic, overrides, kind),
                       report)
    r, n = report["return"], report["length"]
    wins = f", win rate {report['win_rate']:.3f}" if "win_rate" in report else ""
    mode = "greedy" if not args.stochastic else "stochastic"
    return (f"eval {report['env']} {report['algorithm']} step {policy.step} ({mode}), {args.episodes} episodes: "
            f"return {r['mean']:.2f} ± {r['std']:.2f} (95 % CI {r['ci_low']:.2f}..{r['ci_high']:.2f}, "
            f"min {r['min']:.2f}, max {r['max']:.2f}), length {n['mean']:.1f}"
            f"{wins}; {wall:.2f}s{note}; "
            f"report {out.parent / 'report.md'}")


def _prepare_match(args: argparse.Namespace, policy: Any) -> tuple[Any, str] | None:
    """``(opponent player, its label)`` when this evaluation is a match (``--opponent``, or any
    evaluation of a two-player game), None for episodes; bad input raises ``ValueError`` first."""
    from rljax.policy.trained import is_host_policy

    game_flags = [f for f, on in (("--search", args.search), ("--simulations", args.simulations is not None),
                                  ("--league", args.league)) if on]
    if args.opponent is None and (is_host_policy(policy) or not _is_game(policy)):
        if game_flags:
            raise ValueError(f"{game_flags[0]} applies to matches in two-player games; {policy.config.env} is not one")
        return None
    if is_host_policy(policy) or not _is_game(policy):
        raise ValueError(f"--opponent {args.opponent}: {policy.config.env} is not a two-player game (its observation "
                         f"has no 'current_player'; docs/env_api.md, 'Turn-based games')")
    for flag, on in (("--video", args.video), ("--env-param", args.env_param)):
        if on:
            raise ValueError(f"{flag} does not apply to a match (--opponent); evaluate episodes without --opponent")
    if args.league and (args.opponent is not None or args.step is not None):
        raise ValueError(f"--league plays every kept checkpoint against the others and a random player; it takes no "
                         f"{'--opponent' if args.opponent is not None else '--step'}")
    if not 1 <= args.games <= MAX_EPISODES // 2:
        raise ValueError(f"--games must be in [1, {MAX_EPISODES // 2}] (games per side, all at once), got {args.games}")
    if args.simulations is not None and not (args.search and args.simulations >= 1):
        raise ValueError(f"--simulations {args.simulations}: give a positive number of simulations, with --search")
    from rljax.policy.games import resolve_opponent

    return resolve_opponent(args.opponent or "random", policy, args.search, args.simulations)


def _is_game(policy: Any) -> bool:
    from rljax.policy.games import is_game

    return is_game(policy.env, policy.env_params)


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "._=" else "_" for c in label)


def _league_and_report(args: argparse.Namespace, policy: Any) -> str:
    """Plays the league (every kept checkpoint and a random player, each pair ``--games`` games per
    side), fits Elo ratings, writes ``eval/league/report.json`` and ``report.md``; returns the summary line."""

    from rljax.policy.games import elo_ratings, match, player_of, random_player
    from rljax.policy.trained import load
    from rljax.store.rundir import checkpoint_steps

    t0 = time.perf_counter()
    steps = checkpoint_steps(args.run_dir)
    member = policy.member
    names, players = ["random"], [random_player()]
    for step in steps:
        names.append(str(step))
        players.append(player_of(load(args.run_dir, step, member=member), args.search, args.simulations))
    results, pairs = [], []
    for i in range(len(players)):
        for j in range(i + 1, len(players)):
            out = match(policy.env, policy.env_params, players[i], players[j], args.games, seed=args.seed)
            score = sum(o.wins + 0.5 * o.draws for o in out.values())
            results.append((i, j, score, 2 * args.games))
            pairs.append({"player": names[i], "opponent": names[j], "score": score, "games": 2 * args.games,
                          "as_first": out["as_first"].as_dict(), "as_second": out["as_second"].as_dict()})
    elo = elo_ratings(len(players), results, anchor=0)
    wall = time.perf_counter() - t0
    report = {"run_dir": str(args.run_dir), "algorithm": policy.algorithm, "env": str(policy.config.env),
              "player": "search" if args.search else "network, greedy", "games_per_side": args.games,
              "seed": args.seed, "anchor": "random", "elo": dict(zip(names, [round(float(e), 1) for e in elo])),
              "pairs": pairs, "eval_wall_s": round(wall, 3)}
    base = pathlib.Path(args.run_dir) if member is None else pathlib.Path(args.run_dir) / "members" / str(member)
    out = base / "eval" / ("league" + _search_kind(args, policy))
    out.mkdir(parents=True, exist_ok=True)
    rows = "\n".join(f"| {n} | {e:.0f} |" for n, e in zip(names, elo))
    md = (f"# {report['env']}: {report['algorithm']} ({report['player']}), Elo of its checkpoints\n\n"
          f"Every pair played {args.games} games on each side; a random player is the anchor (Elo 0).\n\n"
          f"| checkpoint step | Elo |\n|---|---|\n{rows}\n")
    _write_md_and_json(out, md, report)
    ratings = ", ".join(f"{n} {e:.0f}" for n, e in zip(names[1:], elo[1:]))
    return (f"league {report['env']} {report['algorithm']} ({report['player']}): Elo by checkpoint step (random = 0): "
            f"{ratings}; {len(pairs)} pairings of {2 * args.games} games; {wall:.2f}s; report {out / 'report.md'}")


def _search_kind(args: argparse.Namespace, policy: Any) -> str:
    """The folder suffix of a search's report: empty without ``--search``, ``-search`` with the run's
    own ``num_simulations``, ``-search-S`` with ``--simulations S`` other than that."""
    if not args.search:
        return ""
    if args.simulations is None or args.simulations == policy.config.num_simulations:
        return "-search"
    return f"-search-{args.simulations}"


def _match_and_report(args: argparse.Namespace, policy: Any, opponent: Any, label: str) -> str:
    """Plays the match, writes ``report.json`` and ``report.md``; returns the summary line."""

    from rljax.policy.games import match, policy_player, search_player

    t0 = time.perf_counter()
    if args.search:
        player = search_player(policy, policy.env, policy.env_params, num_simulations=args.simulations)
    else:
        player = policy_player(policy, deterministic=not args.stochastic)
    results = match(policy.env, policy.env_params, player, opponent, args.games, seed=args.seed)
    wall = time.perf_counter() - t0
    games = 2 * args.games
    wins = sum(o.wins for o in results.values())
    draws = sum(o.draws for o in results.values())
    report = {"run_dir": str(args.run_dir), "algorithm": policy.algorithm, "env": str(policy.config.env),
              "checkpoint_step": int(policy.step), "config_hash": policy.config_hash, "opponent": label,
              "player": "search" if args.search else ("network, sampled" if args.stochastic else "network, greedy"),
              "simulations": (args.simulations or policy.config.num_simulations) if args.search else None,
              "games_per_side": args.games, "seed": args.seed, "eval_wall_s": round(wall, 3),
              "as_first": results["as_first"].as_dict(), "as_second": results["as_second"].as_dict(),
              "win_rate": wins / games, "score": (wins + 0.5 * draws) / games}
    kind = "" if label == "random" and not args.search and not args.stochastic else \
        (f"-vs-{_slug(label)}" if label != "random" else "") + _search_kind(args, policy)
    out = eval_dir(args.run_dir, policy.step, policy.member, not args.stochastic, None, kind)
    out.mkdir(parents=True, exist_ok=True)
    rows = "\n".join(f"| {side.replace('_', ' ')} | {o.wins} | {o.draws} | {o.losses} | {o.unfinished} |"
                     for side, o in results.items())
    md = (f"# {report['env']}: {report['algorithm']} ({report['player']}) against {label}\n\n"
          f"Checkpoint step {policy.step}, {args.games} games on each side, seed {args.seed}.\n\n"
          f"| side | wins | draws | losses | unfinished |\n|---|---|---|---|---|\n{rows}\n\n"
          f"Win rate {report['win_rate']:.3f}, score (a draw counts 1/2) {report['score']:.3f}.\n")
    _write_md_and_json(out, md, report)
    first, second = results["as_first"], results["as_second"]
    return (f"eval {report['env']} {report['algorithm']} step {policy.step} ({report['player']}) vs {label}: "
            f"as first {first.wins}/{first.draws}/{first.losses}, as second {second.wins}/{second.draws}/"
            f"{second.losses} (wins/draws/losses of {args.games} each); {wall:.2f}s; report {out / 'report.md'}")


def run(args: argparse.Namespace) -> int:
    """The ``rljax eval`` command. Returns a process exit status (:mod:`rljax.cli.process`): 0, 2 (bad
    input, found before any episode is played) or 74 (reading the checkpoint or writing the report failed)."""
    if not args.no_compile_cache:
        enable_compilation_cache()
    from rljax.host.base import HostEnvError
    from rljax.policy.video import NotDrawableError

    try:
        policy, evaluations, draw = _prepare(args)
        match = _prepare_match(args, policy)
    except (FileNotFoundError, ValueError, NotDrawableError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except HostEnvError as err:  # --env's envs could not be made (an env server not there)
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_IO
    except OSError as err:  # the checkpoint could not be read
        print(f"{PROG}: error: I/O error: {err}", file=sys.stderr)
        return EXIT_IO
    if args.league:
        try:
            print(_league_and_report(args, policy), flush=True)
        except OSError as err:
            print(f"{PROG}: error: I/O error: {err}", file=sys.stderr)
            return EXIT_IO
        return 0
    if match is not None:
        try:
            print(_match_and_report(args, policy, *match), flush=True)
        except OSError as err:
            print(f"{PROG}: error: I/O error: {err}", file=sys.stderr)
            return EXIT_IO
        return 0
    for env_params, overrides in evaluations:  # one compiled evaluation: the env params are its inputs
        try:
            line = _evaluate_and_report(args, policy, env_params, overrides, draw)
        except OSError as err:  # writing the video or the report (a full disk)
            print(f"{PROG}: error: I/O error: {err}", file=sys.stderr)
            return EXIT_IO
        except HostEnvError as err:  # the run's env server is gone, or its envs failed
            hint = (" (evaluate on a local source of the same envs with --env, e.g. --env gymnasium/<id>)"
                    if str(getattr(policy.env, "name", "")).startswith("server:") and not args.env else "")
            print(f"{PROG}: error: {err}{hint}", file=sys.stderr)
            return EXIT_IO
        if len(evaluations) > 1:
            line = f"[{', '.join(f'{k}={v:g}' if isinstance(v, float) else f'{k}={v}' for k, v in overrides.items())}] " \
                + line
        print(line, flush=True)
    return 0


def _write_md_and_json(out: Any, md: str, report: dict) -> None:
    """A match's or a league's ``report.md``, then its ``report.json`` (last: a present JSON means the
    Markdown is there), each written atomically (:func:`rljax.policy.report.replace_into`)."""
    import json

    from rljax.policy.report import replace_into

    replace_into(out / "report.md", lambda tmp: tmp.write_text(md, encoding="utf-8"))
    text = json.dumps(report, indent=2, sort_keys=True) + "\n"
    replace_into(out / "report.json", lambda tmp: tmp.write_text(text, encoding="utf-8"))
