"""Checkpoints that prove themselves: every ``global_step_<N>`` folder carries a manifest (size and
SHA-256 of each file) that a resume checks before any worker starts; a missing, truncated or
altered file is refused naming it, and ``recover_mode`` falls back to the previous checkpoint that
checks out; a checkpoint without a manifest or with a file it does not list (its bookkeeping
aside) is refused naming the file and ``runner.resume_unverified``, which loads it; a full disk
during a save (in the driver or in a worker's DCP write) removes the partial folder, leaves the
earlier checkpoints whole and ends the run with one line.

The whole-run tests share one ``cluster.backend: local`` run of the toy embodied config (three
steps, a checkpoint after each, the third save hitting ENOSPC in the worker's DCP writer)."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from contextlib import contextmanager, redirect_stderr
from pathlib import Path

import pytest

from rlinf.runners import checkpoint as ckpt
from rlinf.runners import manifest
from rlinf.runners.recovery import Recovery, run_with_recovery
from rlinf.utils.typed_config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_local_backend_runs import ONE_PROCESS, _compose  # noqa: E402


def _workers(files: dict[str, bytes]):
    """A ``write_parts`` standing for the worker groups: writes ``files`` into the folder."""
    def write(folder: str) -> None:
        for name, data in files.items():
            os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
            Path(folder, name).write_bytes(data)
    return write


def _two_checkpoints(root: Path) -> tuple[str, str]:
    first = ckpt.save_step(str(root), 1, _workers({"actor/__0_0.distcp": b"a" * 4096, "actor/.metadata": b"m1"}),
                           {"step": 1})
    second = ckpt.save_step(str(root), 2, _workers({"actor/__0_0.distcp": b"b" * 4096, "actor/.metadata": b"m2"}),
                            {"step": 2})
    return first, second


def test_a_save_writes_a_manifest_of_every_file_then_the_trainer_state(tmp_path):
    first, second = _two_checkpoints(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["global_step_1", "global_step_2"]  # no partial folder left
    listed = json.loads(Path(second, "manifest.json").read_text())
    assert listed["format"] == manifest.FORMAT and listed["algorithm"] == "sha256"
    assert listed["files"] == {
        "actor/.metadata": {"size": 2, "sha256": hashlib.sha256(b"m2").hexdigest()},
        "actor/__0_0.distcp": {"size": 4096, "sha256": hashlib.sha256(b"b" * 4096).hexdigest()}}
    assert Path(second, "trainer_state.json").stat().st_mtime_ns >= Path(second, "manifest.json").stat().st_mtime_ns
    assert ckpt.resume_point(str(tmp_path)) == (second, 2)
    # the same step saved again (a run resumed from an earlier checkpoint) replaces the folder whole
    again = ckpt.save_step(str(tmp_path), 2, _workers({"actor/__0_0.distcp": b"c"}), {"step": 2})
    assert again == second and manifest.verify_manifest(again) == 1
    assert sorted(os.listdir(tmp_path)) == ["global_step_1", "global_step_2"]


@pytest.mark.parametrize("damage, problem", [
    (lambda p: p.write_bytes(p.read_bytes()[:100]), "has 100 bytes, manifest.json lists 4096 (truncated)"),
    (lambda p: p.write_bytes(b"B" + p.read_bytes()[1:]), "does not match its SHA-256 in manifest.json (altered)"),
    (lambda p: p.unlink(), "is missing (listed in manifest.json)"),
])
def test_a_damaged_file_is_refused_naming_it(tmp_path, damage, problem):
    _, second = _two_checkpoints(tmp_path)
    damaged = Path(second, "actor", "__0_0.distcp")
    damage(damaged)
    with pytest.raises(ConfigError) as err:
        ckpt.resume_point(second)
    assert str(err.value) == (f"runner.resume_dir: {damaged} {problem}; the checkpoint is damaged: resume from an "
                              "earlier one")


def _pre_manifest(root: Path, step: int = 4) -> Path:
    """A checkpoint as saved before manifests existed: actor files and trainer_state.json only."""
    step_dir = root / f"global_step_{step}"
    (step_dir / "actor").mkdir(parents=True)
    (step_dir / "actor" / "__0_0.distcp").write_bytes(b"w" * 64)
    (step_dir / "trainer_state.json").write_text(json.dumps({"step": step}))
    return step_dir


def test_a_checkpoint_without_a_manifest_is_refused_naming_it_and_the_key_that_loads_it(tmp_path):
    step_dir = _pre_manifest(tmp_path)
    with pytest.raises(ConfigError) as err:
        ckpt.resume_point(str(tmp_path))
    assert str(err.value) == (f"runner.resume_dir: {step_dir / 'manifest.json'} is missing: the checkpoint's files "
                              "cannot be verified (saved before checkpoints carried a manifest, or not by rlinf); "
                              "set runner.resume_unverified: true to load it anyway")
    lines = []  # runner.resume_unverified: true loads it, said in one start-up note (once per folder)
    assert ckpt.resume_point(str(tmp_path), resume_unverified=True, warn=lines.append) == (str(step_dir), 4)
    assert ckpt.resume_point(str(step_dir), resume_unverified=True, warn=lines.append) == (str(step_dir), 4)
    assert lines == [f"[rlinf] note: runner.resume_unverified: true: loading {step_dir} unverified "
                     f"({step_dir / 'manifest.json'} is missing: the checkpoint's files cannot be verified (saved "
                     "before checkpoints carried a manifest, or not by rlinf))"]


def test_a_file_the_manifest_does_not_list_is_refused_naming_it(tmp_path):
    _, second = _two_checkpoints(tmp_path)
    planted = Path(second, "actor", "extra_rank0.pt")
    planted.write_bytes(b"not saved by the run")
    with pytest.raises(ConfigError) as err:
        ckpt.resume_point(second)
    assert str(err.value) == (f"runner.resume_dir: {planted} is not listed in manifest.json; set "
                              "runner.resume_unverified: true to load it anyway")
    Path(second, "notes.txt").write_text("x")  # a second one: the first named, the rest counted
    with pytest.raises(ConfigError, match=r"extra_rank0.pt is not listed in manifest.json \(and 1 more unlisted\)"):
        ckpt.resume_point(second)
    lines = []
    assert ckpt.resume_point(second, resume_unverified=True, warn=lines.append) == (second, 2)
    assert len(lines) == 1 and f"loading {second} unverified ({planted} is not listed" in lines[0]
    # the key vouches for the unlisted files only: a listed file that changed is still refused
    Path(second, "actor", ".metadata").write_bytes(b"mX")
    with pytest.raises(ConfigError, match=r"\.metadata does not match its SHA-256 in manifest.json \(altered\)"):
        ckpt.resume_point(second, resume_unverified=True)


def test_the_manifests_own_bookkeeping_is_exempt_at_the_top_only(tmp_path):
    """manifest.json and trainer_state.json (written after it) are not listed and not refused; the
    same names deeper in the folder, or a link to a folder, are files like any other."""
    _, second = _two_checkpoints(tmp_path)
    assert sorted(os.listdir(second)) == ["actor", "manifest.json", "trainer_state.json"]
    assert sorted(json.loads(Path(second, "manifest.json").read_text())["files"]) == [
        "actor/.metadata", "actor/__0_0.distcp"]
    assert ckpt.resume_point(second) == (second, 2)
    nested = Path(second, "actor", "trainer_state.json")
    nested.write_text('{"step": 2}')
    with pytest.raises(ConfigError, match=f"{nested} is not listed in manifest.json"):
        ckpt.resume_point(second)
    nested.unlink()
    link = Path(second, "actor", "shards")
    link.symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(ConfigError, match=f"{link} is not listed in manifest.json"):
        ckpt.resume_point(second)


class _Recipe:
    def __init__(self, folder: str, mode: str, resume_unverified: bool = False):
        self.folder, self.mode, self.unverified = folder, mode, resume_unverified

    def recovery(self, raw):
        return Recovery(self.mode, 0, self.folder, resume_unverified=self.unverified)

    def with_resume(self, raw, checkpoint):
        return {**raw, "resume": checkpoint}


def test_recover_mode_falls_back_to_the_previous_checkpoint_that_checks_out(tmp_path):
    first, second = _two_checkpoints(tmp_path)
    Path(second, "actor", ".metadata").write_bytes(b"mX")  # same size, other bytes
    lines, runs = [], []
    run_with_recovery(_Recipe(str(tmp_path), "resume"), {}, lambda raw: runs.append(raw) or {}, lines.append)
    assert runs == [{"resume": first}]
    assert [line for line in lines if "is damaged" in line] == [
        f"[rlinf] recover_mode resume: global_step_2 is damaged ({second}/actor/.metadata does not match its SHA-256 "
        f"in manifest.json (altered)); resuming from {first} instead"]
    # every checkpoint damaged: resume has nothing to start from
    Path(first, "actor", ".metadata").unlink()
    with pytest.raises(ConfigError, match="runner.recover_mode: resume: no complete checkpoint"):
        run_with_recovery(_Recipe(str(tmp_path), "resume"), {}, lambda raw: {}, lines.append)


def test_recover_mode_refuses_an_unverified_latest_checkpoint_instead_of_skipping_it(tmp_path):
    """Skipping it would pass over every checkpoint of a folder saved before manifests and start
    the run afresh in it; the refusal names the file and the key, which loads it."""
    first, _ = _two_checkpoints(tmp_path)
    step_dir = _pre_manifest(tmp_path, 3)
    runs, lines = [], []
    with pytest.raises(ConfigError) as err:
        run_with_recovery(_Recipe(str(tmp_path), "auto"), {}, lambda raw: runs.append(raw) or {}, lines.append)
    assert str(err.value).startswith(f"runner.recover_mode: {step_dir / 'manifest.json'} is missing: ")
    assert str(err.value).endswith("; set runner.resume_unverified: true to load it anyway") and runs == []
    run_with_recovery(_Recipe(str(tmp_path), "auto", True), {}, lambda raw: runs.append(raw) or {}, lines.append)
    assert runs == [{"resume": str(step_dir)}]
    assert [line for line in lines if "note" in line] == [
        f"[rlinf] note: runner.resume_unverified: true: loading {step_dir} unverified ({step_dir / 'manifest.json'} "
        "is missing: the checkpoint's files cannot be verified (saved before checkpoints carried a manifest, or not by "
        "rlinf))"]
    shutil.rmtree(step_dir)  # the saved ones check out: no note, no refusal
    runs.clear()
    run_with_recovery(_Recipe(str(tmp_path), "resume"), {}, lambda raw: runs.append(raw) or {}, lines.append)
    assert runs == [{"resume": str(Path(first).parent / "global_step_2")}]


def test_the_web_runs_resume_checks_the_same_way(tmp_path):
    """``runner.resume: auto`` of a web run (its latest checkpoint under save_path/checkpoints)."""
    from types import SimpleNamespace

    from rlinf.runners.web_agent.preflight import _resume_iteration

    step_dir = _pre_manifest(tmp_path / "checkpoints", 2)

    def cfg(unverified: bool):
        runner = SimpleNamespace(continues=True, resume_unverified=unverified)
        return SimpleNamespace(save_path=str(tmp_path), trains=True, runner=runner)

    with pytest.raises(ConfigError) as err:
        _resume_iteration(cfg(False))
    assert str(err.value).startswith(f"runner.resume: {step_dir / 'manifest.json'} is missing: ")
    assert "runner.resume_unverified: true" in str(err.value)
    assert _resume_iteration(cfg(True)) == 2


def test_the_pre_ray_check_of_every_runner_config_reads_the_key(tmp_path, capsys):
    """check_run_folders: what the math, tool-agent, embodied and off-policy preflights run."""
    from rlinf.config.runner import LoggerConfig, RunnerConfig
    from rlinf.runners.preflight import check_run_folders

    step_dir = _pre_manifest(tmp_path / "old")
    runner = RunnerConfig(resume_dir=str(step_dir), output_dir=str(tmp_path / "out"),
                          logger=LoggerConfig(log_path=str(tmp_path / "logs")))
    with pytest.raises(ConfigError, match="manifest.json is missing: .*runner.resume_unverified: true"):
        check_run_folders(runner)
    capsys.readouterr()
    assert check_run_folders(RunnerConfig(**{**runner.__dict__, "resume_unverified": True})) == 4
    assert capsys.readouterr().out.startswith(f"[rlinf] note: runner.resume_unverified: true: loading {step_dir} ")


def test_a_full_disk_in_the_driver_removes_the_partial_save_and_says_where(tmp_path, monkeypatch):
    first, second = _two_checkpoints(tmp_path)
    real = ckpt.write_file

    def full(path, data):
        if os.path.basename(path) == "manifest.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        real(path, data)

    monkeypatch.setattr(ckpt, "write_file", full)
    with pytest.raises(ckpt.CheckpointDiskFull) as err:
        ckpt.save_step(str(tmp_path), 3, _workers({"actor/__0_0.distcp": b"c" * 4096}), {"step": 3})
    target = tmp_path / "global_step_3"
    mount = ckpt.mount_of(str(tmp_path))
    assert str(err.value).startswith(f"disk full while saving checkpoint global_step_3 to {target} (")
    assert f" free on {mount}); the partial checkpoint was removed" in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["global_step_1", "global_step_2"]
    assert manifest.verify_manifest(first) == 2 and manifest.verify_manifest(second) == 2


def test_a_full_disk_met_while_shutting_down_after_a_failed_save_still_names_the_checkpoint():
    try:
        try:
            raise ckpt.CheckpointDiskFull("disk full while saving checkpoint global_step_3 to /x (0 B free on /)")
        except ckpt.CheckpointDiskFull:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/metrics.jsonl") from None
    except OSError as exc:
        assert ckpt.disk_full_line(exc) == "disk full while saving checkpoint global_step_3 to /x (0 B free on /)"
    full = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/x/metrics.jsonl")
    assert ckpt.disk_full_line(full) == "disk full: [Errno 122] Disk quota exceeded: '/x/metrics.jsonl'"
    assert ckpt.disk_full_line(OSError(errno.EACCES, "Permission denied")) is None


UNSHARE = shutil.which("unshare")
SMALL_FS = textwrap.dedent("""
    import os, sys
    from rlinf.runners import checkpoint as ckpt
    root = sys.argv[1]
    def write(folder, data):
        os.makedirs(os.path.join(folder, "actor"))
        open(os.path.join(folder, "actor", "w.bin"), "wb").write(data)
    ckpt.save_step(root, 1, lambda d: write(d, b"x" * 200_000), {"step": 1})
    try:
        ckpt.save_step(root, 2, lambda d: write(d, b"y" * 600_000), {"step": 2})
    except ckpt.CheckpointDiskFull as exc:
        print(exc)
    print(sorted(os.listdir(root)), ckpt.resume_point(root))
""")


@pytest.mark.skipif(UNSHARE is None, reason="no unshare(1)")
def test_a_really_full_small_filesystem_keeps_the_earlier_checkpoint(tmp_path):
    """A 512 KiB tmpfs mounted in a user namespace (no root needed where user namespaces are
    allowed): the second checkpoint does not fit."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = f"mount -t tmpfs -o size=512k tmpfs {mnt} && exec {sys.executable} -c \"$0\" {mnt}"
    proc = subprocess.run([UNSHARE, "-rm", "sh", "-c", script, SMALL_FS], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0 and "mount" in proc.stderr and "Traceback" not in proc.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    first, listing = proc.stdout.strip().splitlines()
    assert first.startswith(f"disk full while saving checkpoint global_step_2 to {mnt}/global_step_2 (")
    assert f"free on {mnt}); the partial checkpoint was removed" in first
    assert listing == f"['global_step_1'] ('{mnt}/global_step_1', 1)"


# ---- whole runs (cluster.backend: local, the toy embodied config) ------------------------------------------
def _toy(out: Path, *overrides: str) -> dict:
    raw = _compose(ROOT / "examples/embodiment/config", "toy_ppo_mlp", [
        "runner.max_steps=3", "runner.val_check_interval=-1", "runner.save_interval=1", "++runner.export_hf=false",
        "++runner.plot_curves=false", f"runner.output_dir={out}", *overrides])
    raw["cluster"] = {**ONE_PROCESS, "backend": "local", "component_placement": {"env,rollout,actor": 0}}
    return raw


@contextmanager
def _full_disk_in_dcp(marker: str):
    """The worker's DCP writer cannot create files under a folder named ``marker`` (ENOSPC)."""
    from torch.distributed.checkpoint.filesystem import FileSystem

    real = FileSystem.create_stream

    def create_stream(self, path, mode):
        if marker in str(path) and "w" in mode:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(self, path, mode)

    FileSystem.create_stream = create_stream
    try:
        yield
    finally:
        FileSystem.create_stream = real


@pytest.fixture(scope="module")
def full_disk_run(tmp_path_factory):
    """Run the toy config for 3 steps; the third checkpoint's DCP write hits a full disk."""
    import torch.distributed as dist

    from rlinf.runners.embodied.recipe import EMBODIED_RECIPE
    from rlinf.runners.entry import run_entry

    out = tmp_path_factory.mktemp("full_disk")
    saved = dict(os.environ)
    os.environ["OMP_NUM_THREADS"] = "1"
    code, err = None, io.StringIO()
    try:
        with _full_disk_in_dcp("global_step_3"), redirect_stderr(err):
            try:
                run_entry(EMBODIED_RECIPE, _toy(out), print_fn=lambda *_: None)
            except SystemExit as exc:
                code = exc.code
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)
    return out / "toy-ppo-mlp", code, err.getvalue()


def test_a_run_checkpoint_lists_every_file_with_its_hash(full_disk_run):
    run = full_disk_run[0]
    step_dir = run / "checkpoints" / "global_step_2"
    files = json.loads((step_dir / "manifest.json").read_text())["files"]
    on_disk = sorted(str(p.relative_to(step_dir)) for p in step_dir.rglob("*") if p.is_file())
    assert sorted(files) == sorted(set(on_disk) - {"manifest.json", "trainer_state.json"})
    assert {"actor/.metadata", "actor/__0_0.distcp", "actor/engine_state.json", "actor/rng_rank0.pt"} <= set(files)
    for name, entry in files.items():
        data = (step_dir / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name


def test_a_full_disk_in_a_worker_ends_the_run_with_one_line(full_disk_run):
    run, code, err = full_disk_run
    target = run / "checkpoints" / "global_step_3"
    assert code == 1
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and not line.startswith("embodied:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: disk full while saving checkpoint global_step_3 to {target} (")
    assert f" free on {ckpt.mount_of(str(run))}); the partial checkpoint was removed" in lines[0]
    assert sorted(os.listdir(run / "checkpoints")) == ["global_step_1", "global_step_2"]
    for step in (1, 2):
        assert ckpt.resume_point(str(run / "checkpoints" / f"global_step_{step}"))[1] == step


def test_damaged_checkpoints_of_a_run(full_disk_run, tmp_path, capsys):
    """Without recover_mode a damaged resume_dir ends the run with one config-error line before
    any worker starts; with recover_mode resume the run falls back to global_step_1 and saves
    global_step_2 again, whole."""
    import torch.distributed as dist

    from rlinf.runners.embodied.recipe import EMBODIED_RECIPE
    from rlinf.runners.entry import run_entry

    out = tmp_path / "copy"
    shutil.copytree(full_disk_run[0].parent, out)
    checkpoints = out / "toy-ppo-mlp" / "checkpoints"
    shard = checkpoints / "global_step_2" / "actor" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-10])
    metrics = (out / "toy-ppo-mlp" / "metrics.jsonl").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        run_entry(EMBODIED_RECIPE, _toy(out, f"++runner.resume_dir={checkpoints}"), print_fn=lambda *_: None)
    assert exit_.value.code == 2
    size = shard.stat().st_size
    assert capsys.readouterr().err.strip().splitlines() == [
        f"config error: runner.resume_dir: {shard} has {size} bytes, manifest.json lists {size + 10} (truncated); "
        "the checkpoint is damaged: resume from an earlier one"]
    assert (out / "toy-ppo-mlp" / "metrics.jsonl").read_text() == metrics  # nothing written

    saved = dict(os.environ)
    os.environ["OMP_NUM_THREADS"] = "1"
    lines = []
    try:
        summary = run_entry(EMBODIED_RECIPE, _toy(out, "++runner.recover_mode=resume"),
                            print_fn=lambda *a: lines.append(" ".join(map(str, a))))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)
    assert summary["steps"] == 3
    fallback = [line for line in lines if "is damaged" in line]
    assert fallback == [f"[rlinf] recover_mode resume: global_step_2 is damaged ({shard} has {size} bytes, "
                        f"manifest.json lists {size + 10} (truncated)); resuming from {checkpoints / 'global_step_1'} "
                        "instead"]
    assert any(f"resumed at step 1 from {checkpoints / 'global_step_1'}" in line for line in lines)
    assert sorted(os.listdir(checkpoints)) == ["global_step_1", "global_step_2", "global_step_3"]
    for step in (1, 2, 3):
        assert ckpt.resume_point(str(checkpoints / f"global_step_{step}"))[1] == step


def test_a_run_resuming_a_checkpoint_without_its_manifest_stops_with_one_line(full_disk_run, tmp_path, capsys):
    """The entry's refusal before any worker starts: exit 2, one line naming manifest.json and the key."""
    from rlinf.runners.embodied.recipe import EMBODIED_RECIPE
    from rlinf.runners.entry import run_entry

    out = tmp_path / "copy"
    shutil.copytree(full_disk_run[0].parent, out)
    step_dir = out / "toy-ppo-mlp" / "checkpoints" / "global_step_2"
    (step_dir / "manifest.json").unlink()
    metrics = (out / "toy-ppo-mlp" / "metrics.jsonl").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        run_entry(EMBODIED_RECIPE, _toy(out, f"++runner.resume_dir={step_dir}"), print_fn=lambda *_: None)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"config error: runner.resume_dir: {step_dir / 'manifest.json'} is missing: the checkpoint's files cannot be "
        "verified (saved before checkpoints carried a manifest, or not by rlinf); set runner.resume_unverified: true "
        "to load it anyway"]
    assert (out / "toy-ppo-mlp" / "metrics.jsonl").read_text() == metrics  # nothing written
