"""Layer 4, a trained policy: loading it, acting with it, evaluating, recording and exporting it.

:func:`~rljax.policy.trained.load` turns a run directory into a :class:`~rljax.policy.trained.Policy`;
:mod:`~rljax.policy.evaluate` runs vectorised greedy episodes on the device (also used during
training); :mod:`~rljax.policy.report` and :mod:`~rljax.policy.video` write what an evaluation saw;
:mod:`~rljax.policy.export` writes StableHLO and ONNX artefacts.

May import: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.host` (to step a host-env run's
envs), :mod:`rljax.runtime`, :mod:`rljax.agents`, :mod:`rljax.store`.
"""
