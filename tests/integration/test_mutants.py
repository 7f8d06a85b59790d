"""The mutation harness stays runnable: every planted bug still applies to today's code (its snippet
occurs exactly once in its file) and names tests that exist, so ``python -m tests.verification.mutants``
measures the suite instead of reporting stale mutants."""

from __future__ import annotations

import ast
import pathlib

import pytest

from tests.verification.mutants import MUTANTS, ROOT


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_the_mutant_still_applies_and_names_existing_tests(mutant):
    text = (ROOT / mutant.file).read_text()
    assert text.count(mutant.snippet) == 1, f"{mutant.id}: snippet occurs {text.count(mutant.snippet)} times in {mutant.file}"
    for node in mutant.tests:
        if node.startswith("?"):
            continue
        path, _, name = node.partition("::")
        assert (ROOT / path).is_file(), f"{mutant.id}: {path} does not exist"
        if name:
            tree = ast.parse((ROOT / path).read_text())
            defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            assert name.split("[")[0] in defined, f"{mutant.id}: {path} has no test {name}"


def test_mutant_ids_are_unique():
    ids = [m.id for m in MUTANTS]
    assert len(ids) == len(set(ids))
