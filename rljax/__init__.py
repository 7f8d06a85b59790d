"""rljax: JAX-native, on-accelerator reinforcement-learning training.

The public entry points:

* :func:`train` -- train any algorithm config on a registered or user-written env.
* :mod:`rljax.env` -- the environment contract (``Environment``, ``Box``, ``Discrete``).
* :mod:`rljax.wrappers` -- vectorisation, episode statistics, normalisation, action rescaling.
* :mod:`rljax.agents.ppo` -- ``PPOConfig``.
"""

from rljax.loop import TrainResult, train

__all__ = ["train", "TrainResult"]
__version__ = "0.1.0"
