"""Mutation benchmark: plant realistic bugs one at a time and see which ones the tests catch.

    python -m tests.verification.mutants --list                      # the mutants and their killer tests
    python -m tests.verification.mutants                             # run them all (long: ~1 h on 2 cores)
    python -m tests.verification.mutants --only gae-lambda-dropped,ppo-entropy-sign --jobs 2
    python -m tests.verification.mutants --skip-slow --keep          # skip subprocess tests, keep the copies

Each mutant is a hand-written bug: an exact source snippet (it must occur exactly once in its file)
and its replacement, a one-line description, and the test node ids that should catch it (a focused,
fast subset, not the whole suite). The repository is copied once to a temporary directory when the
script starts (the working tree is never modified, and later edits do not leak in); for each
mutant that snapshot is copied again, the snippet replaced there, and the tests run with
``python -m pytest -q -x -p no:cacheprovider NODEIDS`` (cwd and ``PYTHONPATH`` the copy) under a
hard timeout. Outcomes:

* ``killed``: the tests failed (or could not even be collected) with the bug in place;
* ``survived``: they passed; the bug would ship;
* ``timeout``: they did not finish in the mutant's time (counted as not killed);
* ``stale``: the snippet no longer occurs exactly once (the code moved on); fix the mutant;
* ``broken``: the test subset already fails, or a named test is missing, on the *unmutated* copy,
  so a kill would say nothing. Every node id is first collected and run once, unmutated (each test
  once, however many mutants name it), before any mutant runs.

The kill rate is ``killed / applicable``, applicable meaning neither stale nor broken. The exit
status is 0 whatever the rate (this is a benchmark, not a test); only a failure of the script
itself (the copy does not import its own ``rljax``, a crash) exits non-zero.

A test id written ``?tests/file.py::name`` is *optional*: a test expected from another branch. It is
ignored while it does not exist (the mutant's ``needs`` says which test it waits for) and used once
it does; a mutant with no existing test at all is reported ``broken``.

All runs share one persistent XLA compilation cache (a temporary directory, unless
``--xla-cache DIR``): the unmutated baseline compiles every program once, and a mutant recompiles
only the programs its change alters (the cache key is the compiled program itself, so a cache hit
cannot hide a mutation).

Why not mutmut or cosmic-ray: both generate *operator* mutants automatically (flip ``<`` to ``<=``,
``+`` to ``-``, ...). mutmut 3 rewrites every function of the mutated modules into a trampoline that
dispatches to the mutant chosen by an environment variable, and picks tests from its own stats
collection over the whole suite; cosmic-ray keeps a session database of operator mutants and runs
one configured test command for all of them, patching the files in place. Here the point is a
chosen set of *semantic* bugs (a bootstrap from the wrong observation, a resume that forgets the
saved chunk size), several tokens or lines wide, each judged by a chosen subset of slow JAX tests
(compiles of 2-10 s each, subprocesses with fake devices): a generated mutant set would be
thousands of mostly-equivalent operator flips, each running the suite, and trampolines inside
jit-traced functions change what is traced. A few hundred lines of standard library do this job.
Equivalent mutants left out on purpose: removing ``stop_gradient`` from the DQN/SAC TD targets
changes nothing, because those targets depend only on parameters the loss is not differentiated
with respect to (target networks, the actor in the critic loss).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", "runs", ".pytest_cache",
                                     ".hypothesis", "*.egg-info", "build", "shared")
DEFAULT_TIMEOUT_S = 600


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One planted bug.

    Attributes:
        id: a short name.
        file: the mutated file, relative to the repository root.
        snippet: exact source text; must occur exactly once in ``file``.
        replacement: what replaces it.
        description: the bug, in one line.
        tests: pytest node ids that should fail with the bug (``?`` prefix: optional, see the module
            docstring); a file path or an unparametrised name selects every test under it.
        needs: the killer test still to be written (on another branch), when the listed ones are not
            expected to catch the bug.
        timeout_s: hard limit for the whole test run of this mutant.
        slow: its tests start subprocesses or train for long (skipped by ``--skip-slow``).
    """

    id: str
    file: str
    snippet: str
    replacement: str
    description: str
    tests: tuple[str, ...]
    needs: str = ""
    timeout_s: int = DEFAULT_TIMEOUT_S
    slow: bool = False


T_RET = "tests/unit/core/test_returns.py::"
T_BUF = "tests/unit/core/test_buffers.py::"
T_CKPT = "tests/unit/store/test_checkpoint.py::"
T_PARITY = "tests/integration/test_classic_control_parity.py::"
T_INTEGRITY = "tests/unit/store/test_checkpoint_integrity.py::"
T_BOUNDS = "tests/integration/test_action_bounds.py::"

MUTANTS: tuple[Mutant, ...] = (
    # ---------------------------------------------------------------- env stepping
    Mutant("env-cartpole-threshold", "envs/cartpole.py",
           "theta_threshold_radians: float = 12 * 2 * math.pi / 360",
           "theta_threshold_radians: float = 12 * math.pi / 360",
           "CartPole terminates at 6 degrees instead of 12 (the radian conversion loses its factor 2)",
           (T_PARITY + "test_step_parity[CartPole-v1]",)),
    Mutant("env-pendulum-angle-normalize", "envs/pendulum.py",
           "return jnp.mod(x + jnp.pi, 2 * jnp.pi) - jnp.pi",
           "return jnp.mod(x, 2 * jnp.pi) - jnp.pi",
           "Pendulum's angle normalisation maps to [-pi, pi) without the +pi shift (cost of the wrong angle)",
           (T_PARITY + "test_step_parity[Pendulum-v1]",)),
    Mutant("env-time-limit-off-by-one", "rljax/env.py",
           "terminated, state_st.time >= params.max_steps_in_episode)",
           "terminated, state_st.time > params.max_steps_in_episode)",
           "the time limit truncates one step late (episodes last max_steps_in_episode + 1 steps)",
           (T_PARITY + "test_truncation_short_limit[CartPole-v1]",
            "tests/unit/test_env.py::test_done_step_returns_next_episode_start")),
    Mutant("env-final-observation-after-reset", "rljax/env.py",
           'info = {**info, "final_observation": obs_st}',
           'info = {**info, "final_observation": obs}',
           "info['final_observation'] is the post-reset observation on done steps",
           ("tests/unit/test_env.py::test_done_step_returns_next_episode_start",)),
    Mutant("wrappers-episode-return-drops-last-reward", "rljax/core/wrappers.py",
           "return_=jnp.where(done, new_return, 0.0).astype(jnp.float32),",
           "return_=jnp.where(done, state.episode_return, 0.0).astype(jnp.float32),",
           "EpisodeStatistics reports a finished episode's return without its last reward",
           ("tests/unit/core/test_wrappers.py::test_episode_statistics_hand_sequence_termination_truncation_autoreset",)),
    Mutant("wrappers-normalize-reward-ignores-truncation", "rljax/core/wrappers.py",
           "discounted_return=jnp.where(done, 0.0, ret).astype(jnp.float32),",
           "discounted_return=jnp.where(terminated, 0.0, ret).astype(jnp.float32),",
           "NormalizeReward's discounted return runs on across a truncation into the next episode",
           ("tests/unit/core/test_wrappers.py::test_normalize_reward_resets_on_truncation_too",)),
    # ---------------------------------------------------------------- rollout
    Mutant("rollout-next-obs-after-reset", "rljax/core/rollout.py",
           'transition = Transition(c.obs, action, reward, terminated, truncated, info["final_observation"], extras)',
           "transition = Transition(c.obs, action, reward, terminated, truncated, obs, extras)",
           "transitions bootstrap from the next step's (post-reset) obs instead of final_observation",
           ("tests/unit/agents/test_ppo.py::test_value_bootstraps_through_truncation",
            "tests/unit/agents/test_dqn.py::test_truncation_bootstraps_from_final_observation",
            "tests/unit/agents/test_sac.py::test_truncation_bootstraps_from_final_observation",
            "tests/unit/core/test_rollout.py::test_rollout_next_obs_is_the_final_observation_on_truncation",
            "tests/integration/test_learning_signal.py::test_ppo_gae_bootstraps_from_the_final_observation"),
           slow=True),
    # ---------------------------------------------------------------- returns
    Mutant("gae-lambda-dropped", "rljax/core/returns.py",
           "advantage = delta + gamma * lambda_ * cont * next_advantage",
           "advantage = delta + gamma * cont * next_advantage",
           "GAE accumulates with gamma instead of gamma * lambda (lambda ignored)",
           (T_RET + "test_gae_lambda_zero_is_one_step_td", T_RET + "test_gae_matches_loop_reference")),
    Mutant("gae-discount-dropped", "rljax/core/returns.py",
           "deltas = rewards + gamma * not_terminated * next_values - values",
           "deltas = rewards + not_terminated * next_values - values",
           "GAE's TD error bootstraps undiscounted",
           (T_RET + "test_gae_no_episode_end",)),
    Mutant("gae-truncation-as-termination", "rljax/core/returns.py",
           "deltas = rewards + gamma * not_terminated * next_values - values",
           "deltas = rewards + gamma * not_done * next_values - values",
           "GAE masks the bootstrap with done instead of terminated (no bootstrap at a time limit)",
           (T_RET + "test_gae_truncation_in_middle_bootstraps_from_final_observation",)),
    Mutant("gae-recursion-crosses-truncation", "rljax/core/returns.py",
           "(deltas, not_done),",
           "(deltas, not_terminated),",
           "GAE's recursion carries the next episode's advantage back across a truncation",
           (T_RET + "test_gae_truncation_in_middle_bootstraps_from_final_observation",
            T_RET + "test_gae_matches_loop_reference")),
    Mutant("nstep-not-cut-at-truncation", "rljax/core/returns.py",
           "alive = alive & ~(terminated[k:k + out_t] | truncated[k:k + out_t])",
           "alive = alive & ~terminated[k:k + out_t]",
           "n-step replay items run on past a truncation into the next episode",
           (T_RET + "test_n_step_transitions_by_hand", T_RET + "test_n_step_transitions_agree_with_n_step_targets")),
    Mutant("nstep-targets-not-cut-at-truncation", "rljax/core/returns.py",
           "stop = (terminated | truncated).at[-1].set(True)",
           "stop = terminated.at[-1].set(True)",
           "n-step targets sum rewards of the next episode after a truncation",
           (T_RET + "test_n_step_truncation_inside_window",)),
    # ---------------------------------------------------------------- PPO loss
    Mutant("ppo-clip-one-sided", "rljax/agents/ppo.py",
           "jnp.clip(ratio, 1.0 - hyperparams.clip_eps, 1.0 + hyperparams.clip_eps) * adv",
           "jnp.minimum(ratio, 1.0 + hyperparams.clip_eps) * adv",
           "PPO's ratio clip keeps only the upper bound",
           ("tests/unit/agents/test_ppo.py::test_ppo_loss_by_hand", "tests/integration/test_learning_signal.py::test_ppo_clip_is_two_sided_by_hand")),
    Mutant("ppo-value-clip-min", "rljax/agents/ppo.py",
           "value_err = jnp.maximum(value_err, jnp.square(clipped - batch.target))",
           "value_err = jnp.minimum(value_err, jnp.square(clipped - batch.target))",
           "PPO's clipped value loss takes the min of the two errors (optimistic) instead of the max",
           ("tests/unit/agents/test_ppo.py::test_ppo_loss_by_hand",)),
    Mutant("ppo-entropy-sign", "rljax/agents/ppo.py",
           "loss = policy_loss + hyperparams.vf_coef * value_loss - hyperparams.ent_coef * entropy",
           "loss = policy_loss + hyperparams.vf_coef * value_loss + hyperparams.ent_coef * entropy",
           "PPO penalises entropy instead of rewarding it",
           ("tests/unit/agents/test_ppo.py::test_ppo_loss_by_hand",)),
    Mutant("ppo-advantages-not-centred", "rljax/agents/ppo.py",
           "adv = (adv - mean) / (jnp.sqrt(var) + 1e-8)",
           "adv = adv / (jnp.sqrt(var) + 1e-8)",
           "PPO's advantage normalisation divides by the std but does not subtract the mean",
           ("tests/unit/agents/test_ppo.py::test_ppo_loss_by_hand",)),
    # ---------------------------------------------------------------- DQN
    Mutant("dqn-double-q-not-passed", "rljax/agents/dqn.py",
           "axis_name=axis_name, double_q=config.double_q, head=head, keys=keys)",
           "axis_name=axis_name, double_q=False, head=head, keys=keys)",
           "DQN's double_q flag never reaches the loss (double DQN silently runs as DQN)",
           ("tests/unit/agents/test_dqn.py::test_two_step_probe_values", "tests/integration/test_learning_signal.py::test_dqn_agent_target_follows_double_q")),
    Mutant("dqn-no-target-network", "rljax/agents/dqn.py",
           "out_next_target = _apply(apply_fn, target_params, items.next_obs, k_target)",
           "out_next_target = _apply(apply_fn, params, items.next_obs, k_target)",
           "DQN's TD target uses the online network instead of the target network",
           ("tests/unit/agents/test_dqn.py::test_dqn_loss_by_hand",)),
    Mutant("dqn-nstep-discount-is-gamma", "rljax/agents/offpolicy.py",
           "discount=ns.discounts.astype(jnp.float32),",
           "discount=jnp.where(ns.discounts > 0, gamma, 0.0).astype(jnp.float32),",
           "n-step replay items discount the bootstrap by gamma instead of gamma^m",
           ("tests/unit/agents/test_dqn.py::test_truncation_bootstraps_from_final_observation[3]",), slow=True),
    # ---------------------------------------------------------------- distributional
    Mutant("c51-projection-unclipped", "rljax/core/distributional.py",
           "shifted = jnp.clip(rewards[:, None] + discounts[:, None] * atoms[None, :], v_min, v_max)",
           "shifted = rewards[:, None] + discounts[:, None] * atoms[None, :]",
           "C51's projection drops the mass of shifted atoms outside [v_min, v_max] instead of moving it to the ends",
           ("tests/unit/core/test_distributional.py::test_the_projection_equals_algorithm_1_with_clipping_terminations_and_exact_atom_hits",)),
    Mutant("qr-quantile-levels-flipped", "rljax/core/distributional.py",
           "weight = jnp.abs(taus[None, :, None] - below)",
           "weight = jnp.abs((1.0 - taus)[None, :, None] - below)",
           "QR-DQN's quantile loss weights each quantile by the mirrored level (the quantiles come out reversed)",
           ("tests/unit/core/test_distributional.py::test_the_quantile_huber_loss",
            "tests/unit/core/test_distributional.py::test_the_quantile_losss_minimiser_is_the_samples_quantiles")),
    Mutant("d4pg-target-from-online-critic", "rljax/agents/d4pg.py",
           "next_logits = nets.critic(target_critic_params, items.next_obs, next_action)",
           "next_logits = nets.critic(critic_params, items.next_obs, next_action)",
           "D4PG's target distribution comes from the online critic instead of the target critic",
           ("tests/unit/agents/test_d4pg.py::test_the_critic_loss_is_the_cross_entropy_to_the_projected_target_of_the_target_action",)),
    Mutant("d4pg-highest-critic", "rljax/agents/d4pg.py",
           "lowest = jnp.argmin(categorical_mean_std(next_logits, atoms)[0], axis=0)",
           "lowest = jnp.argmax(categorical_mean_std(next_logits, atoms)[0], axis=0)",
           "D4PG with two critics bootstraps from the higher-mean critic (overestimation) instead of the lower",
           ("tests/unit/agents/test_d4pg.py::test_with_two_critics_each_item_bootstraps_from_the_lower_mean_one",)),
    # ---------------------------------------------------------------- SAC
    Mutant("sac-entropy-sign-in-target", "rljax/core/returns.py",
           "return reward + discount * (jnp.min(next_q, axis=0) - alpha * next_log_prob)",
           "return reward + discount * (jnp.min(next_q, axis=0) + alpha * next_log_prob)",
           "SAC's soft target adds alpha * log pi instead of subtracting it",
           (T_RET + "test_soft_td_target_by_hand",)),
    Mutant("sac-target-max-of-twins", "rljax/core/returns.py",
           "return reward + discount * (jnp.min(next_q, axis=0) - alpha * next_log_prob)",
           "return reward + discount * (jnp.max(next_q, axis=0) - alpha * next_log_prob)",
           "SAC's target takes the max of the twin critics instead of the min",
           (T_RET + "test_soft_td_target_by_hand",)),
    Mutant("sac-alpha-loss-sign", "rljax/agents/sac.py",
           "return masked_mean(-jnp.exp(log_alpha) * jax.lax.stop_gradient(log_prob + target_entropy), mask)",
           "return masked_mean(jnp.exp(log_alpha) * jax.lax.stop_gradient(log_prob + target_entropy), mask)",
           "SAC's temperature loss has the wrong sign (alpha falls when entropy is too low)",
           ("tests/unit/agents/test_sac.py::test_alpha_loss_by_hand_and_gradient_sign",)),
    Mutant("sac-target-entropy-sign", "rljax/agents/sac.py",
           "target_entropy=-hyperparams.target_entropy_scale * action_dim,",
           "target_entropy=hyperparams.target_entropy_scale * action_dim,",
           "SAC's learn step gets the target entropy +scale * |A| instead of -scale * |A| (alpha chases too much entropy)",
           ("tests/unit/agents/test_sac.py::test_update_passes_minus_scale_times_action_dim_as_the_target_entropy",)),
    # ---------------------------------------------------------------- acting
    Mutant("act-clip-to-minus-high", "rljax/agents/base.py",
           "return lambda action: clip_to_space(action, space.low, space.high)",
           "return lambda action: clip_to_space(action, -space.high, space.high)",
           "policies clip Box actions to [-high, high] instead of [low, high] (acting, evaluation, export)",
           # (not test_exported_onnx_clips_to_low_and_high: it is skipped without jax2onnx, which the baseline
           # would report as broken)
           (T_BOUNDS + "test_greedy_actions_are_clipped_to_low_and_high_per_dimension",
            T_BOUNDS + "test_sampled_actions_stay_in_low_high_and_reach_both_bounds",
            T_BOUNDS + "test_evaluation_sends_the_clipped_actions_to_the_env",
            T_BOUNDS + "test_exported_stablehlo_clips_to_low_and_high")),
    # ---------------------------------------------------------------- population-based training
    Mutant("pbt-exploit-keeps-own-optimizer-state", "rljax/training/hooks/pbt.py",
           "new = new.replace(key=state.key, env_params=state.env_params)",
           "new = new.replace(key=state.key, env_params=state.env_params,\n"
           "                      **{k: getattr(state, k) for k in (\"opt_state\",) if hasattr(state, k)})",
           "PBT's exploit copies the donor's params but the replaced member keeps its own optimiser state",
           ("tests/unit/training/hooks/test_pbt.py::test_exploit_copies_every_leaf_of_the_donor_but_the_key_env_params_and_explored_hyperparams",)),
    # ---------------------------------------------------------------- replay
    Mutant("replay-ring-clamped-not-wrapped", "rljax/core/buffers.py",
           "return (cursor + jnp.arange(b, dtype=jnp.int32)) % capacity",
           "return jnp.minimum(cursor + jnp.arange(b, dtype=jnp.int32), capacity - 1)",
           "a batch straddling the ring's end is clamped onto the last slot instead of wrapping to slot 0",
           (T_BUF + "test_ring_wraparound_hand_checked", T_BUF + "test_straddling_batch_via_add")),
    Mutant("sumtree-root-not-updated", "rljax/core/buffers.py",
           "_, sum_tree, min_tree = jax.lax.fori_loop(0, depth, level, (nodes, sum_tree, min_tree))",
           "_, sum_tree, min_tree = jax.lax.fori_loop(0, depth - 1, level, (nodes, sum_tree, min_tree))",
           "the sum tree's update stops one level below the root (the total goes stale)",
           (T_BUF + "test_importance_weights_hand_computed", T_BUF + "test_sum_tree_invariants_property")),
    Mutant("is-weight-beta-ignored", "rljax/core/buffers.py",
           "(leaf / state.min_tree[1]) ** -beta",
           "(leaf / state.min_tree[1]) ** -1.0",
           "importance weights use exponent -1 whatever beta is (the annealing has no effect)",
           (T_BUF + "test_importance_weights_hand_computed",)),
    Mutant("priority-alpha-not-applied", "rljax/core/buffers.py",
           "_powered(priorities, state.alpha), keep)",
           "priorities, keep)",
           "updated priorities are stored raw instead of raised to alpha",
           (T_BUF + "test_alpha_is_applied_once_and_stored_in_leaves",)),
    # ---------------------------------------------------------------- the loop
    Mutant("loop-nan-guard-disabled", "rljax/training/hooks/health.py",
           "return None if reason is None else self.roll_back(run, chunk_index, rows[0], reason)",
           "return None",
           "a NaN/inf loss or train state no longer stops (or rolls back) the run",
           ("tests/integration/test_reliability.py::test_a_nan_from_the_env_stops_the_run_and_no_checkpoint_holds_it",
            "tests/integration/test_reliability.py::test_cli_divergence_exits_65_with_one_line")),
    Mutant("loop-health-check-not-called", "rljax/training/hooks/health.py",
           "        check_desync(rows[0], chunk_index)\n",
           "\n",
           "train() never runs the per-chunk desync check",
           ("tests/integration/test_data_parallel.py::test_train_raises_desync_error_on_two_devices",),
           slow=True),
    Mutant("loop-desync-tolerance", "rljax/training/hooks/health.py",
           "if desync != 0.0:",
           "if desync > 1.0:",
           "the desync check tolerates a checksum spread up to 1 (small desyncs pass)",
           ("tests/integration/test_data_parallel.py::test_train_raises_desync_error_on_two_devices",), slow=True),
    Mutant("loop-desync-min-over-chunk", "rljax/training/program.py",
           '(jnp.max(v) if k == "param_desync" else jnp.mean(v))',
           '(jnp.min(v) if k == "param_desync" else jnp.mean(v))',
           "a chunk reports the smallest desync of its updates, so a desync is seen a chunk late",
           ("tests/integration/test_data_parallel.py::test_train_raises_desync_error_on_two_devices",), slow=True),
    Mutant("loop-metrics-last-not-mean", "rljax/training/program.py",
           '(jnp.max(v) if k == "param_desync" else jnp.mean(v))',
           '(jnp.max(v) if k == "param_desync" else v[-1])',
           "a chunk's row reports its last update's metrics instead of their mean",
           ("tests/unit/training/test_loop.py::test_chunk_rows_average_updates_and_sum_episodes",)),
    Mutant("loop-episodes-mean-not-sum", "rljax/training/program.py",
           "episodes = psum(jax.tree.map(jnp.sum, outs.episodes), axis_name)",
           "episodes = psum(jax.tree.map(jnp.mean, outs.episodes), axis_name)",
           "a chunk averages its updates' episode sums instead of adding them (episode counts too low)",
           ("tests/unit/training/test_loop.py::test_chunk_rows_average_updates_and_sum_episodes",)),
    # ---------------------------------------------------------------- checkpoint and resume
    Mutant("resume-ignores-saved-chunk-size", "rljax/training/loop.py",
           'plan = resume_plan(config.total_timesteps, steps_per_update, int(meta["plan"]["updates_per_chunk"]))',
           "plan = resume_plan(config.total_timesteps, steps_per_update, probe.updates_per_chunk)",
           "resume re-plans the chunk size from the new total instead of keeping the saved one",
           (T_CKPT + "test_resume_with_a_longer_run_keeps_the_saved_auto_chunk_size",)),
    Mutant("resume-start-chunk-off-by-one", "rljax/training/loop.py",
           'return plan, state, int(meta["chunk_index"]) + 1, int(meta.get("rollbacks", 0)), meta',
           'return plan, state, int(meta["chunk_index"]), int(meta.get("rollbacks", 0)), meta',
           "resume repeats the chunk that was already saved",
           (T_CKPT + "test_interrupted_and_resumed_equals_uninterrupted[ppo]",)),
    Mutant("signal-handler-not-installed", "rljax/training/signals.py",
           "self._previous[sig] = signal.signal(sig, self._handler)",
           "self._previous[sig] = signal.getsignal(sig)",
           "PreemptionGuard never installs its handlers: SIGTERM kills the run without a checkpoint",
           (T_CKPT + "test_sigterm_mid_run_then_resume_matches_uninterrupted",), timeout_s=900, slow=True),
    Mutant("ckpt-last-leaf-dropped", "rljax/store/checkpoint.py",
           "for x in jax.tree.leaves(state)]\n    return [np.asarray(x) for x in fetch(leaves)]",
           "for x in jax.tree.leaves(state)][:-1]\n    return [np.asarray(x) for x in fetch(leaves)]",
           "to_host drops the state's last leaf, so no checkpoint restores",
           (T_CKPT + "test_interrupted_and_resumed_equals_uninterrupted[ppo]",)),
    Mutant("ckpt-pack-order-reversed", "rljax/store/checkpoint.py",
           "flat = np.concatenate(chunks)",
           "flat = np.concatenate(chunks[::-1])",
           "pack concatenates a dtype's leaves in reverse order while unpack reads them forward",
           (T_CKPT + "test_pack_round_trip_keeps_every_leaf_exact",
            T_CKPT + "test_interrupted_and_resumed_equals_uninterrupted[ppo]")),
    Mutant("ckpt-unpack-offset-ignored", "rljax/store/checkpoint.py",
           "x = flat[start:start + size].reshape(shape)",
           "x = flat[:size].reshape(shape)",
           "unpack reads every packed leaf from the start of its dtype's array",
           (T_CKPT + "test_pack_round_trip_keeps_every_leaf_exact",)),
    Mutant("ckpt-verify-skips-last-array", "rljax/store/checkpoint.py",
           "for name, want in expected.items():",
           "for name, want in list(expected.items())[:-1]:",
           "checksum verification skips the last array in sorted order (the packed uint32 PRNG key data)",
           (T_INTEGRITY + "test_damage_to_any_one_saved_array_is_named_and_the_older_step_restores",)),
    Mutant("ckpt-prng-key-not-restored", "rljax/store/checkpoint.py",
           "value = jax.random.wrap_key_data(h, impl=jax.random.key_impl(t))",
           "value = t",
           "restore keeps the fresh run's PRNG keys instead of the saved ones",
           (T_CKPT + "test_interrupted_and_resumed_equals_uninterrupted[ppo]",)),
    Mutant("metrics-superseded-off-by-one", "rljax/store/tracking.py",
           "        if steps <= keep_env_steps:",
           "        if steps < keep_env_steps:",
           "on resume, the row of the restored checkpoint itself is set aside as superseded",
           (T_CKPT + "test_interrupted_and_resumed_equals_uninterrupted[ppo]",
            T_CKPT + "test_corrupt_newest_checkpoint_falls_back_with_a_warning",
            "tests/integration/test_reliability.py::test_resume_sets_aside_exactly_the_rows_after_the_checkpoint")),
)


# ------------------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------------------

# A pytest plugin recording each test's outcome, for the baseline run (standard library only: it is
# written next to the copies and loaded with -p).
OUTCOME_PLUGIN = textwrap.dedent('''\
    import json, os

    _outcomes = {}

    def pytest_runtest_logreport(report):
        previous = _outcomes.get(report.nodeid, "passed")
        if report.failed:
            _outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
        elif report.skipped and previous == "passed":
            _outcomes[report.nodeid] = "skipped"
        else:
            _outcomes.setdefault(report.nodeid, "passed")

    def pytest_sessionfinish(session, exitstatus):
        with open(os.environ["MUTANTS_OUTCOMES"], "w") as f:
            json.dump(_outcomes, f)
    ''')


@dataclasses.dataclass
class Result:
    mutant: Mutant
    status: str
    seconds: float = 0.0
    detail: str = ""


def copy_repo(dst: pathlib.Path, src: pathlib.Path = ROOT) -> pathlib.Path:
    shutil.copytree(src, dst, ignore=COPY_IGNORE)
    return dst


def apply(mutant: Mutant, root: pathlib.Path) -> str | None:
    """Plants ``mutant`` in the copy at ``root``; returns why it is stale, or None."""
    path = root / mutant.file
    if not path.exists():
        return f"{mutant.file} does not exist"
    text = path.read_text()
    count = text.count(mutant.snippet)
    if count != 1:
        return f"snippet occurs {count} times in {mutant.file}"
    path.write_text(text.replace(mutant.snippet, mutant.replacement))
    return None


def stale_reason(mutant: Mutant, root: pathlib.Path = ROOT) -> str | None:
    path = root / mutant.file
    if not path.exists():
        return f"{mutant.file} does not exist"
    count = path.read_text().count(mutant.snippet)
    return None if count == 1 else f"snippet occurs {count} times in {mutant.file}"


def _env(root: pathlib.Path, xla_cache: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JAX_COMPILATION_CACHE_DIR")}
    env.update(PYTHONPATH=str(root), JAX_COMPILATION_CACHE_DIR=xla_cache, PYTHONDONTWRITEBYTECODE="1",
               JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    env.update(extra or {})
    return env


def run_pytest(args: list[str], root: pathlib.Path, timeout_s: float, xla_cache: str,
               extra_env: dict[str, str] | None = None, tail: int | None = 6000) -> tuple[int | None, str, float]:
    """Runs pytest in ``root``; returns ``(returncode or None on timeout, output tail, seconds)``.

    The run gets its own process group, so a timeout also ends the subprocesses its tests started.
    """
    # --slow: the tests a mutant names run whatever their tier (a skipped test would let the mutant survive).
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--slow", *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env=_env(root, xla_cache, extra_env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = None
    return rc, out if tail is None else out[-tail:], time.perf_counter() - t0


def _split_selector(sel: str) -> tuple[str, bool]:
    return (sel[1:], True) if sel.startswith("?") else (sel, False)


def _covers(selector: str, nodeid: str) -> bool:
    return nodeid == selector or nodeid.startswith(selector + "[") or nodeid.startswith(selector + "::")


def collect(selectors: set[str], root: pathlib.Path, xla_cache: str) -> tuple[list[str], str]:
    """Node ids pytest collects from the files the selectors name, and the collection errors
    (empty when collection succeeded)."""
    files = sorted({s.split("::")[0] for s in selectors if (root / s.split("::")[0]).exists()})
    if not files:
        return [], ""
    rc, out, _ = run_pytest(["--collect-only", *files], root, 900, xla_cache, tail=None)
    if rc is None:
        raise RuntimeError("test collection timed out")
    ids = [line.strip() for line in out.splitlines() if "::" in line and not line.startswith(("ERROR", "FAILED"))]
    return ids, "" if rc == 0 else out[-3000:]


def resolve(mutant: Mutant, collected: list[str]) -> tuple[list[str], list[str]]:
    """The collected node ids the mutant's selectors cover, and the selectors that cover none
    (optional ones marked ``(optional)``)."""
    ids: list[str] = []
    missing: list[str] = []
    for raw in mutant.tests:
        sel, optional = _split_selector(raw)
        hit = [n for n in collected if _covers(sel, n)]
        if not hit:
            missing.append(sel + (" (optional)" if optional else ""))
        ids.extend(n for n in hit if n not in ids)
    return ids, missing


def baseline(ids: list[str], root: pathlib.Path, xla_cache: str, jobs: int, workdir: pathlib.Path,
             timeout_s: float) -> dict[str, str]:
    """Runs every node id once on the unmutated copy; returns node id -> outcome."""
    (workdir / "mutants_outcomes.py").write_text(OUTCOME_PLUGIN)
    by_file: dict[str, list[str]] = {}
    for n in ids:
        by_file.setdefault(n.split("::")[0], []).append(n)
    outcomes: dict[str, str] = {}

    def run_file(item: tuple[int, tuple[str, list[str]]]) -> None:
        i, (file, nodes) = item
        out_path = workdir / f"baseline-{i}.json"
        rc, out, secs = run_pytest(["-p", "mutants_outcomes", *nodes], root, timeout_s, xla_cache,
                                   {"MUTANTS_OUTCOMES": str(out_path),
                                    "PYTHONPATH": f"{root}{os.pathsep}{workdir}"})
        got = json.loads(out_path.read_text()) if out_path.exists() else {}
        for n in nodes:
            outcomes[n] = got.get(n, "timeout" if rc is None else "not run")
        print(f"  baseline {file}: {len(nodes)} tests, {sum(got.get(n) == 'passed' for n in nodes)} passed, "
              f"{secs:.0f}s", flush=True)

    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        list(pool.map(run_file, enumerate(sorted(by_file.items()))))
    return outcomes


def run_mutant(mutant: Mutant, ids: list[str], workdir: pathlib.Path, xla_cache: str, keep: bool) -> Result:
    dst = workdir / f"mutant-{mutant.id}"
    copy_repo(dst, src=workdir / "baseline")  # the snapshot the baseline ran on, not today's tree
    try:
        why = apply(mutant, dst)
        if why is not None:
            return Result(mutant, "stale", detail=why)
        rc, out, secs = run_pytest(["-x", *ids], dst, mutant.timeout_s, xla_cache)
        if rc is None:
            return Result(mutant, "timeout", secs, f"no result within {mutant.timeout_s}s")
        if rc == 0:
            return Result(mutant, "survived", secs)
        if rc in (1, 2):  # tests failed / errored in collection (e.g. the mutant breaks an import)
            failed = [line.split(" ")[1] for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))
                      and len(line.split(" ")) > 1]
            return Result(mutant, "killed", secs, failed[0] if failed else f"pytest exit {rc}")
        return Result(mutant, "error", secs, f"pytest exit {rc}: {out.strip().splitlines()[-1:]}")
    finally:
        if keep:
            print(f"  kept {dst}", flush=True)
        else:
            shutil.rmtree(dst, ignore_errors=True)


def print_table(results: list[Result]) -> None:
    width = max(len(r.mutant.id) for r in results)
    print(f"\n{'mutant':<{width}}  {'status':<9} {'seconds':>7}  detail")
    for r in results:
        detail = r.detail
        if r.status == "survived" and r.mutant.needs:
            detail = f"needs: {r.mutant.needs}"
        print(f"{r.mutant.id:<{width}}  {r.status:<9} {r.seconds:7.0f}  {detail}")
    counts = {s: sum(r.status == s for r in results) for s in
              ("killed", "survived", "timeout", "error", "stale", "broken", "skipped")}
    applicable = sum(counts[s] for s in ("killed", "survived", "timeout", "error"))
    rate = f"{counts['killed'] / applicable:.0%}" if applicable else "n/a"
    print("\n" + ", ".join(f"{v} {k}" for k, v in counts.items() if v))
    print(f"kill rate: {counts['killed']}/{applicable} applicable mutants = {rate}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated mutant ids")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--jobs", type=int, default=1, help="mutants (and baseline files) run at once")
    parser.add_argument("--keep", action="store_true", help="keep each mutated copy for debugging")
    parser.add_argument("--skip-slow", action="store_true", help="skip mutants whose tests are slow")
    parser.add_argument("--xla-cache", default=None, help="persistent XLA cache shared by all runs")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)

    ids_known = {m.id for m in MUTANTS}
    if len(ids_known) != len(MUTANTS):
        raise SystemExit("duplicate mutant ids")
    chosen = list(MUTANTS)
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [w for w in wanted if w not in ids_known]
        if unknown:
            raise SystemExit(f"unknown mutant ids {unknown}; known: {sorted(ids_known)}")
        chosen = [m for m in MUTANTS if m.id in wanted]

    if args.list:
        for m in chosen:
            stale = stale_reason(m)
            print(f"{m.id}  [{m.file}]{'  STALE: ' + stale if stale else ''}{'  (slow)' if m.slow else ''}\n"
                  f"    {m.description}\n    tests: {' '.join(m.tests)}"
                  + (f"\n    needs: {m.needs}" if m.needs else ""))
        print(f"\n{len(chosen)} mutants")
        return 0

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="rljax-mutants-"))
    xla_cache = args.xla_cache or str(workdir / "xla-cache")
    results: dict[str, Result] = {}
    try:
        base = copy_repo(workdir / "baseline")
        check = subprocess.run([sys.executable, "-c", "import rljax, envs; print(rljax.__file__, envs.__file__)"],
                               cwd=base, env=_env(base, xla_cache), capture_output=True, text=True, timeout=300)
        if check.returncode != 0 or any(not p.startswith(str(base)) for p in check.stdout.split()):
            print(f"the copy does not import its own packages: {check.stdout} {check.stderr[-2000:]}", file=sys.stderr)
            return 2

        runnable = []
        for m in chosen:
            if args.skip_slow and m.slow:
                results[m.id] = Result(m, "skipped", detail="slow (--skip-slow)")
            elif (why := stale_reason(m, base)) is not None:
                results[m.id] = Result(m, "stale", detail=why)
            else:
                runnable.append(m)

        selectors = {_split_selector(s)[0] for m in runnable for s in m.tests}
        print(f"collecting the tests of {len(runnable)} mutants ...", flush=True)
        collected, collect_out = collect(selectors, base, xla_cache)
        resolved = {m.id: resolve(m, collected) for m in runnable}
        union = sorted({n for ids, _ in resolved.values() for n in ids})
        print(f"baseline: {len(union)} tests on the unmutated copy ...", flush=True)
        t0 = time.perf_counter()
        outcomes = baseline(union, base, xla_cache, args.jobs, workdir,
                            timeout_s=max([m.timeout_s for m in runnable], default=DEFAULT_TIMEOUT_S) * 2)
        print(f"baseline done in {time.perf_counter() - t0:.0f}s", flush=True)

        todo = []
        for m in runnable:
            ids, missing = resolved[m.id]
            bad = [f"{n}: {outcomes.get(n)}" for n in ids if outcomes.get(n) != "passed"]
            required_missing = [s for s in missing if not s.endswith("(optional)")]
            if required_missing or not ids:
                results[m.id] = Result(m, "broken", detail="no such test: " + ", ".join(missing)
                                       + (f"; needs {m.needs}" if m.needs else ""))
            elif bad:
                results[m.id] = Result(m, "broken", detail="fails unmutated: " + "; ".join(bad[:3]))
            else:
                todo.append((m, ids))
        if collect_out:
            print("test collection reported errors:\n" + collect_out, flush=True)

        lock = threading.Lock()

        def one(item: tuple[Mutant, list[str]]) -> None:
            m, ids = item
            r = run_mutant(m, ids, workdir, xla_cache, args.keep)
            with lock:
                results[m.id] = r
                print(f"  {m.id}: {r.status} ({r.seconds:.0f}s) {r.detail}", flush=True)

        print(f"running {len(todo)} mutants with {args.jobs} job(s) ...", flush=True)
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            list(pool.map(one, todo))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    ordered = [results[m.id] for m in chosen]
    print_table(ordered)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            [{"id": r.mutant.id, "file": r.mutant.file, "status": r.status, "seconds": round(r.seconds, 1),
              "detail": r.detail, "needs": r.mutant.needs} for r in ordered], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
