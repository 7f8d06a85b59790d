"""Layer 5 beside training: serving a trained policy over the network (``rljax serve RUN_DIR|EXPORT_DIR``)
and its client.

:class:`~rljax.serve.server.PolicyServer` batches the requests of many clients into one compiled
call (:class:`~rljax.serve.model.ServedModel`), keeps a recurrent policy's state per client, and
follows a training run's checkpoints; :class:`~rljax.serve.client.Client` asks it for actions::

    from rljax.serve import Client
    with Client("127.0.0.1", 5600) as client:
        action, version = client.act(obs)

The protocol is :mod:`rljax.serve.protocol`; ``docs/serving.md`` is the guide.

May import: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.runtime`, :mod:`rljax.agents`,
:mod:`rljax.store`, :mod:`rljax.policy` (the policy served), :mod:`rljax.host` (the protocol's framing).
"""

from rljax.serve.client import Client, Refused, ServeError
from rljax.serve.model import ServedModel, load_model
from rljax.serve.server import PolicyServer

__all__ = ["Client", "PolicyServer", "Refused", "ServeError", "ServedModel", "load_model"]
