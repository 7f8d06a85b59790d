"""Reading a run directory back: what a resume continues from, without compiling anything.

A run directory's ``config.json`` and ``manifest.json`` are for people; the checkpoints are the
record of what the run actually trained with. Each checkpoint's meta holds the resolved config,
the algorithm, the run options (checkpoint cadence, tensorboard, ...) and the chunk's metrics row,
so a resume takes them from the newest committed checkpoint, and ``config.json`` only when there
is no checkpoint yet (a run stopped before its first save starts over from scratch). A
``config.json`` that disagrees with the checkpoint (edited by hand) is refused, naming the fields.

A run that fails while setting up (an unknown env, a config the algorithm refuses, a compile error)
leaves no directory behind when it made that directory itself (:func:`removed_if_start_fails`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any, NamedTuple

__all__ = ["RunRecord", "RunDirError", "read_json", "checkpoint_steps", "newest_checkpoint_meta", "run_record",
           "RESUMABLE_FIELDS", "ConfigMismatchError", "check_resume_config", "resume_from_scratch",
           "saved_env", "removed_if_start_fails", "holds_results"]


class RunDirError(ValueError):
    """A run directory cannot be resumed as it is; the message names the file and what to do."""


class RunRecord(NamedTuple):
    """What a resume of a run directory continues with.

    Attributes:
        config: the resolved config (a dict, as in ``config.json``).
        algorithm: the config class name (``"PPOConfig"``, ...).
        run_options: the saved run options (``checkpoint_every``, ...); empty when unknown.
        source: where ``config`` came from: ``"checkpoint <step>"`` or ``"config.json"``.
        sweep: whether the directory holds a sweep (``sweep.json``).
    """

    config: dict[str, Any]
    algorithm: str | None
    run_options: dict[str, Any]
    source: str
    sweep: bool


def read_json(path: str | os.PathLike, what: str = "") -> Any:
    """Parses a JSON file; raises :class:`RunDirError` naming the file when it is unreadable."""
    path = pathlib.Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(f"{path} is missing{' (' + what + ')' if what else ''}") from None
    except (OSError, ValueError) as err:
        raise RunDirError(f"{path} cannot be read as JSON ({type(err).__name__}: {err})") from None


def checkpoint_steps(run_dir: str | os.PathLike) -> list[int]:
    """The committed checkpoint steps in ``RUN_DIR/checkpoints`` (temporaries excluded), ascending."""
    directory = pathlib.Path(run_dir) / "checkpoints"
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit() and p.is_dir())


def newest_checkpoint_meta(run_dir: str | os.PathLike) -> tuple[int, dict[str, Any]] | None:
    """``(step, meta)`` of the newest committed checkpoint whose meta reads, or None.

    Only the small JSON meta is read (not the arrays); whether the arrays restore is decided when
    the run restores them (and an unreadable step is then skipped).
    """
    for step in reversed(checkpoint_steps(run_dir)):
        path = pathlib.Path(run_dir) / "checkpoints" / str(step) / "meta" / "metadata"
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and isinstance(meta.get("config"), dict):
            return step, meta
    return None


def _config_diffs(a: dict[str, Any], b: dict[str, Any], ignore: tuple[str, ...],
                  names: tuple[str, str] = ("checkpoint", "config.json")) -> list[str]:
    """``"field: <names[0]> a, <names[1]> b"`` for every field whose value differs, except ``ignore``."""
    return [f"{k}: {names[0]} {a.get(k)!r}, {names[1]} {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k) and k not in ignore]


def run_record(run_dir: str | os.PathLike) -> RunRecord:
    """What ``rljax resume RUN_DIR`` continues with.

    Raises:
        RunDirError: the directory is not a run directory, or its ``config.json`` is unreadable
            while no checkpoint holds the config, or ``config.json`` was edited so that it no
            longer matches the checkpoint (only :data:`RESUMABLE_FIELDS` may differ: what a resume
            that stopped before its first save may have changed, an extension or a device count).
    """
    run_dir = pathlib.Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a directory; nothing to resume")
    sweep = (run_dir / "sweep.json").exists()
    newest = newest_checkpoint_meta(run_dir)
    config_path = run_dir / "config.json"
    if newest is None:
        if not config_path.exists():
            raise RunDirError(f"{run_dir} is not a run directory (no config.json and no checkpoint); nothing to "
                              f"resume")
        config = read_json(config_path)
        if not isinstance(config, dict):
            raise RunDirError(f"{config_path} holds {type(config).__name__}, not a config object")
        algorithm = None
        manifest_path = run_dir / "manifest.json"
        if manifest_path.exists():
            try:
                algorithm = read_json(manifest_path).get("algorithm")
            except (RunDirError, AttributeError):
                algorithm = None
        return RunRecord(config, algorithm, {}, "config.json", sweep)
    step, meta = newest
    config = meta["config"]
    if config_path.exists():
        try:
            on_disk = read_json(config_path)
        except RunDirError:
            on_disk = None  # damaged: the checkpoint's config is used and config.json rewritten on resume
        if isinstance(on_disk, dict):
            # Fields the checkpoint lacks (it predates them) are not compared: a resume of such a run
            # rewrites config.json with them before its next checkpoint. Nor are the fields a resume may
            # change (RESUMABLE_FIELDS): a resume that changed them (an extension, another device count)
            # and stopped before its first save has left them in config.json.
            diffs = _config_diffs(config, on_disk, (*RESUMABLE_FIELDS, *(set(on_disk) - set(config))))
            if diffs:
                raise RunDirError(
                    f"{config_path} differs from the config of checkpoint {step}, which is what the run trained "
                    f"with: {'; '.join(diffs)}. Editing config.json does not change a run: restore the file "
                    f"(or delete it; resume rewrites it from the checkpoint), and pass --total-timesteps to extend "
                    f"the run; other changes need a new run")
            # What an earlier resume that stopped before its first save changed (an extension, a layout).
            config = {**config, **{k: on_disk[k] for k in RESUMABLE_FIELDS if k in on_disk}}
    return RunRecord(config, meta.get("algorithm"), dict(meta.get("run_options") or {}), f"checkpoint {step}",
                     sweep)


RESUMABLE_FIELDS = ("total_timesteps", "on_nonfinite", "max_rollbacks", "rollback_lr_factor", "eval_interval",
                    "eval_episodes", "num_devices")
"""Config fields that may differ when resuming (extending a run, changing how divergence is met, another
device count: :mod:`rljax.training.elastic`); every other difference is an error."""


class ConfigMismatchError(ValueError):
    """A resumed run's config differs from the saved one in fields that change the run."""


def check_resume_config(saved: dict[str, Any], config: Any) -> None:
    """Raises :class:`ConfigMismatchError` naming every field that differs from the saved config,
    except :data:`RESUMABLE_FIELDS`."""
    from rljax.store.tracking import config_to_dict

    # A field the saved config lacks (a run saved before it existed) has its default, as in
    # rljax.core.config.config_from_dict.
    defaults = config_to_dict({f.name: f.default for f in dataclasses.fields(config)
                               if f.name not in saved and f.default is not dataclasses.MISSING})
    diffs = _config_diffs({**defaults, **saved}, config_to_dict(config), RESUMABLE_FIELDS, ("saved", "now"))
    if diffs:
        raise ConfigMismatchError(
            "cannot resume with a different config; differing fields: " + "; ".join(diffs)
            + f". Fields that may change on resume: {', '.join(RESUMABLE_FIELDS)}")


def resume_from_scratch(run_dir: str | os.PathLike, config: Any) -> bool:
    """Checks that ``config`` may resume the run in ``run_dir``; True when the run has no committed
    checkpoint (it stopped before its first save) and so starts over from scratch.

    The config is compared with the newest checkpoint's (before anything is restored: a changed
    config must not make every step look unreadable), or with ``config.json`` when there is no
    checkpoint.

    Raises:
        FileNotFoundError: ``run_dir`` holds neither a checkpoint nor a ``config.json``.
        ConfigMismatchError: the config changes the run.
    """
    import warnings

    root = pathlib.Path(run_dir)
    newest = newest_checkpoint_meta(root)
    if newest is not None:
        check_resume_config(newest[1]["config"], config)
    if checkpoint_steps(root):
        return False
    config_path = root / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json and no checkpoint); nothing to resume")
    try:
        saved_config = read_json(config_path)
    except RunDirError:
        saved_config = None
    if isinstance(saved_config, dict):
        check_resume_config(saved_config, config)
    warnings.warn(f"{run_dir} has no committed checkpoint (the run stopped before its first save): starting it over "
                  f"from scratch; its earlier rows move to metrics.superseded.jsonl and chunks.superseded.jsonl",
                  stacklevel=4)
    return True


def saved_env(run_dir: str | os.PathLike) -> str | None:
    """The ``env`` a run directory's saved config names (its newest checkpoint's, else
    ``config.json``'s), or None when there is none to read."""
    newest = newest_checkpoint_meta(run_dir)
    saved = newest[1]["config"] if newest is not None else None
    if saved is None:
        try:
            saved = read_json(pathlib.Path(run_dir) / "config.json")
        except RunDirError:
            return None
    env = saved.get("env") if isinstance(saved, dict) else None
    return env if isinstance(env, str) else None


def holds_results(run_dir: str | os.PathLike) -> bool:
    """Whether ``run_dir`` (a run's or a sweep's) holds anything a run produced: a checkpoint or a
    metrics row, at any depth (a sweep keeps them under ``members/``)."""
    root = pathlib.Path(run_dir)
    return any(p.is_dir() and any(p.iterdir()) for p in root.rglob("checkpoints")) or any(
        p.is_file() and p.stat().st_size > 0 for p in root.rglob("metrics.jsonl"))


@contextlib.contextmanager
def removed_if_start_fails(run_dir: str | os.PathLike | None) -> Iterator[None]:
    """Removes ``run_dir`` when the block raises before the run produced anything.

    Only a directory this block finds missing is ever removed (with the parents it finds missing,
    while they are empty), and only when it then holds no checkpoint and no metrics row
    (:func:`holds_results`): a failed start (``--env CartPol-v1``) leaves nothing behind, while an
    existing directory, a resume, or a run that trained before failing is kept as it is. Only an
    ``Exception`` removes it: a preemption before the first chunk ends the block normally and keeps
    the directory for ``rljax resume``.
    """
    if run_dir is None:
        yield
        return
    path = pathlib.Path(run_dir).absolute()
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        yield
    except Exception:
        if missing and path.is_dir() and not holds_results(path):
            shutil.rmtree(path, ignore_errors=True)
            for parent in missing[1:]:
                with contextlib.suppress(OSError):
                    parent.rmdir()  # only while empty: another run may have started beside this one
        raise
