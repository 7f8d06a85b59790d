"""Layer 5 beside training: the actor-learner path for host envs (Sebulba).

Host simulators (:mod:`rljax.host`) cannot run inside a compiled program, so this path separates
acting from learning (:mod:`~rljax.actorlearner.engine`): actor threads step their batches of host
envs with the policy on an actor device and push whole rollouts into a bounded queue; the learner
pops them, updates on a learner device and publishes versioned params; the policy lag (the versions
between acting and learning) is bounded and measured. :mod:`~rljax.actorlearner.learner` runs PPO
(its clipped ratio against the behaviour policy corrects the lag) or IMPALA (V-trace) on it, and
:mod:`~rljax.actorlearner.run` gives such a run a run directory (rows, checkpoints, resume, signals).

May import: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.runtime`, :mod:`rljax.agents`,
:mod:`rljax.host`, :mod:`rljax.store`, and of :mod:`rljax.training` its run options and signals
(not its loop, program, population or sweep).
"""
