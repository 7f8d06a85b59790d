"""docs/serving.md's numpy-only client, run against a server: it speaks the protocol as written there."""

from __future__ import annotations

import pathlib

import numpy as np

import rljax
from rljax.serve import PolicyServer, load_model

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "serving.md"


def _client_code() -> str:
    text = DOC.read_text()
    section = text[text.index("### A client in plain numpy"):]
    return section[section.index("```python") + len("```python"):section.index("```", section.index("```python") + 9)]


def test_the_documented_numpy_client_gets_the_policys_actions(tiny_run):
    run_dir = tiny_run("ppo-cartpole")[0]
    policy = rljax.load(run_dir)
    namespace: dict = {}
    exec(compile(_client_code(), str(DOC), "exec"), namespace)  # noqa: S102 - the repository's own docs
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    with PolicyServer(load_model(run_dir), max_batch=8) as server:
        sock, spec = namespace["connect"](*server.address)
        got = [namespace["act"](sock, spec, o, request_id=i) for i, o in enumerate(obs)]
        sock.close()
    assert spec["inputs"] == [{"name": "obs", "shape": [4], "dtype": "float32"}]
    assert {v for _, v in got} == {policy.step}
    np.testing.assert_array_equal([a for a, _ in got], np.asarray(policy.act(obs)))
