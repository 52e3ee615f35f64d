"""The GPU check kit on the CPU: ``scripts/gpu_check.sh --cpu-dry-run`` in a bare Python that holds
only PyTorch's own dependencies and the kit's wheel list (no Ray, Hydra, OmegaConf, vLLM, SGLang,
accelerate, ...: what the GPU machine has), the JSON it writes, failures that stay inside their
check, the wheel installer, and the Megatron / offload checks' code on CPU stand-ins."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from toolkits.gpu_check import CHECKS, CheckSpec
from toolkits.gpu_check import wheels as kit_wheels
from toolkits.gpu_check.report import STATUSES
from toolkits.gpu_check.runner import Context, run_all

ROOT = Path(__file__).resolve().parents[2]
#: the module fixture's dry run of every check takes its first test past the suite's 300 s under CI load
pytestmark = pytest.mark.timeout(600)
PROBE = '''
import os, time
from toolkits.gpu_check.report import outcome

def explode(ctx):
    raise ValueError("boom from a probe check")

def crash(ctx):
    os._exit(3)

def hang(ctx):
    time.sleep(120)

def fine(ctx):
    return outcome({"x": 1.0}, [("x", ">", 0)])
'''


def _installed(dist: str) -> bool:
    try:
        return bool(metadata.version(dist))
    except metadata.PackageNotFoundError:
        return False


# ---- a bare Python: PyTorch and its dependencies, plus the kit's wheels, nothing else ------------
def _closure(names: list[str], follow: bool) -> list[metadata.Distribution]:
    """The installed distributions of ``names`` (and, with ``follow``, everything they require)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = kit_wheels.normalize(todo.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        if follow:
            todo += [re.split(r"[<>=!~;\[ (]", r, maxsplit=1)[0] for r in dist.requires or []
                     if "extra ==" not in r]
    return list(seen.values())


def bare_python(folder: Path) -> Path:
    """A venv whose site-packages links only the allowed distributions of this interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next(folder.glob("lib/python*/site-packages"))
    # PyTorch comes with what it needs on the GPU machine; the kit's wheels must suffice for the rest
    dists = _closure(["torch", "triton"], follow=True) + _closure([d for d, *_ in kit_wheels.WHEELS], follow=False)
    for dist in dists:
        tops = {str(f).split("/")[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source = Path(dist.locate_file(top))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
    return folder / "bin" / "python"


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory, cpu_standins):
    """One dry run of the script with three extra checks that raise, crash and hang (while the
    CPU stand-in runs of the last tests go on in the background: ``cpu_standins``)."""
    tmp = tmp_path_factory.mktemp("gpu_check")
    python = bare_python(tmp / "venv")
    (tmp / "probe").mkdir()
    (tmp / "probe" / "gpu_check_probe.py").write_text(PROBE)
    # one torch thread per check process: the suite's two workers share the 2 cores, and the dry
    # run's tiny ops gain nothing from a second thread (a check 12-15 s -> 8-12 s here under load)
    env = {**os.environ, "GPU_CHECK_PYTHON": str(python), "PYTHONPATH": str(tmp / "probe"), "OMP_NUM_THREADS": "1"}
    env.pop("OUT", None)
    cmd = ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--cpu-dry-run", "--no-wheels",
           "--out", str(tmp / "out"), "--check", "boom=gpu_check_probe:explode",
           "--check", "crash=gpu_check_probe:crash", "--check", "hang=gpu_check_probe:hang@3"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=420)
    document = json.loads((tmp / "out" / "gpu_check.json").read_text())
    return proc, document, tmp / "out"


@pytest.mark.slow
def test_the_json_has_every_check_with_a_status_and_finite_figures(dry_run):
    proc, doc, out = dry_run
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the probe checks failed
    assert doc["schema"] == "rlinf-gpu-check/1" and doc["dry_run"] is True and doc["device"] == "cpu"
    assert list(doc["checks"]) == [s.name for s in CHECKS] + ["boom", "crash", "hang"]
    for name, check in doc["checks"].items():
        assert check["status"] in STATUSES, name
        assert check["seconds"] >= 0
        for key, value in check["figures"].items():
            if isinstance(value, float):
                assert math.isfinite(value), (name, key)
        if check["status"] == "skip":
            assert check["reason"], name
    c = doc["checks"]
    assert c["fsdp_bf16"]["status"] == "pass", c["fsdp_bf16"]
    assert c["fsdp_bf16"]["figures"]["candidate"] == "cpu bf16 (dry run)"
    assert 0 < c["fsdp_bf16"]["figures"]["logprob_max_abs_diff"] <= 0.05  # bf16 really differs
    for name in ("offload", "liger", "megatron_step"):
        assert c[name]["status"] == "skip" and "no CUDA" in c[name]["reason"]
    if _installed("megatron-core"):
        assert c["megatron_logits"]["status"] == "skip"
        assert c["megatron_logits"]["figures"]["round_trip_tensors"] > 0
    env = doc["environment"]
    assert env["packages"]["torch"] and env["cuda_available"] is False and env["wheels_site"] is None
    assert env["frameworks_present"] == []  # no Ray, Hydra, OmegaConf, vLLM, SGLang: as on the GPU
    s = doc["summary"]
    assert s["failed"] == ["boom", "crash", "hang"]
    assert s["passed"] == ["fsdp_bf16", "mfu", "memory_estimate", "pi0_ppo"]
    pi0 = c["pi0_ppo"]["figures"]  # the real-size π0 check at tiny sizes: one PPO update in bf16
    assert pi0["dtype"] == "bf16" and pi0["update_seconds_steady"] > 0 and pi0["grad_norm"] > 0
    assert pi0["logprob_max_abs_diff"] <= 1.0 and pi0["params_trained"] < pi0["params"]
    assert s["ok"] is False
    log = (out / "gpu_check.log").read_text()
    assert "===== fsdp_bf16 =====" in log and "===== hang =====" in log


@pytest.mark.slow  # the module's dry run of every check (~40 s): not in the quick tier
def test_mfu_is_the_formula_of_its_own_figures(dry_run):
    f = dry_run[1]["checks"]["mfu"]["figures"]
    assert f["dry_run"] is True and f["peak_tflops"] == 1.0 and "nominal" in f["peak_source"]
    assert f["step_seconds"] == pytest.approx(statistics.median(f["step_seconds_all"]))
    assert f["tokens_per_step"] == f["samples_per_micro_batch"] * f["micro_batches"] * f["seq_len"]
    by_hand = 6 * f["params"] * f["tokens_per_step"] / f["step_seconds"] / (f["peak_tflops"] * 1e12)
    assert f["mfu"] == pytest.approx(by_hand, rel=1e-9)
    assert f["tokens_per_s"] == pytest.approx(f["tokens_per_step"] / f["step_seconds"])
    assert all(math.isfinite(x) for x in f["losses"])


@pytest.mark.slow  # the module's dry run of every check (~40 s): not in the quick tier
def test_a_check_that_raises_crashes_or_hangs_is_a_failure_with_the_reason(dry_run):
    c = dry_run[1]["checks"]
    assert c["boom"]["error"] == "ValueError: boom from a probe check"
    assert "raise ValueError" in c["boom"]["traceback"]
    assert "exited with code 3 and left no result" in c["crash"]["error"]
    assert c["hang"]["error"] == "timed out after 3 s (killed)" and c["hang"]["seconds"] < 20


def test_the_next_check_runs_after_a_failed_one(tmp_path, monkeypatch):
    (tmp_path / "gpu_check_probe.py").write_text(PROBE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    ctx = Context(device="cpu", dry_run=True, workdir=str(tmp_path / "w"), out_dir=str(tmp_path / "o"))
    specs = [CheckSpec("boom", "gpu_check_probe:explode", 30), CheckSpec("fine", "gpu_check_probe:fine", 30),
             CheckSpec("gpu", "gpu_check_probe:fine", 30, needs_cuda=True, cpu_note="x"),
             CheckSpec("nolib", "gpu_check_probe:fine", 30, needs_modules=("surely_not_a_module_xyz",))]
    results = run_all(specs, ctx, budget_s=60, echo=lambda _: None)
    assert [r["status"] for r in results.values()] == ["fail", "pass", "skip", "skip"]
    assert "surely_not_a_module_xyz is not importable" in results["nolib"]["reason"]


# ---- the wheels ------------------------------------------------------------------------------------
def _wheel(folder: Path, name: str, files: dict[str, str]) -> Path:
    path = folder / name
    with zipfile.ZipFile(path, "w") as archive:
        for inner, text in files.items():
            archive.writestr(inner, text)
    return path


def test_wheel_tags_and_the_newest_compatible_wheel(tmp_path):
    ok = kit_wheels.compatible
    assert ok("a-1-py3-none-any.whl", (3, 12)) and ok("a-1-cp310-abi3-manylinux_2_17_x86_64.whl", (3, 12))
    assert not ok("a-1-cp313-abi3-manylinux_2_17_x86_64.whl", (3, 12))
    assert not ok("a-1-cp312-cp312-macosx_11_0_arm64.whl", (3, 12))
    assert not ok("a-1-cp312-cp312-manylinux_2_17_aarch64.whl", (3, 12))
    for name in ("pkg-1.2-py3-none-any.whl", "pkg-1.10-py3-none-any.whl", "pkg-2.0-cp399-cp399-linux_x86_64.whl"):
        _wheel(tmp_path, name, {})
    assert kit_wheels.choose(tmp_path, (3, 12))["pkg"].name == "pkg-1.10-py3-none-any.whl"
    with pytest.raises(ValueError, match="not a wheel file name"):
        kit_wheels.parse_name("pkg.tar.gz")


def test_install_lays_out_wheels_skips_what_is_importable_and_names_what_is_missing(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "probe_pure-1.0-py3-none-any.whl", {"probe_pure/__init__.py": "X = 1\n",
                                                        "probe_pure-1.0.dist-info/METADATA": "Name: probe-pure\n"})
    _wheel(wheels, "probe_data-2.0-py3-none-any.whl", {"probe_data-2.0.data/purelib/probe_data.py": "Y = 2\n",
                                                        "probe_data-2.0.data/scripts/tool": "#!/bin/sh\n"})
    _wheel(wheels, "json_like-1.0-py3-none-any.whl", {"json/__init__.py": ""})
    monkeypatch.setattr(kit_wheels, "WHEELS", (("probe-pure", "probe_pure", "pinned", "1.0"),
                                               ("probe_data", "probe_data", "pinned", "2.0"),
                                               ("json-like", "json", "if-missing", "1.0")))
    site = tmp_path / "site"
    assert kit_wheels.install(wheels, site) == ["probe_pure-1.0-py3-none-any.whl",
                                                "probe_data-2.0-py3-none-any.whl"]
    assert (site / "probe_pure" / "__init__.py").is_file() and (site / "probe_data.py").is_file()
    assert not (site / "json").exists() and not (site / "tool").exists()
    assert json.loads((site / "gpu_check_wheels.json").read_text())[0] == "probe_pure-1.0-py3-none-any.whl"
    (wheels / "probe_data-2.0-py3-none-any.whl").unlink()
    with pytest.raises(LookupError, match=r"no wheel of probe_data for Python .*fetch_gpu_wheels\.sh --python"):
        kit_wheels.install(wheels, site)


def test_the_wheel_list_is_pinned_and_small_enough_to_carry():
    reqs = kit_wheels.requirements()
    assert all("==" in r for r in reqs) and not any(r.startswith("numpy") for r in reqs)
    assert any(r.startswith("numpy==") for r in kit_wheels.requirements(include_optional=True))
    folder = ROOT / "gpu_wheels"
    if folder.is_dir():  # fetched here: what the device call would carry
        assert kit_wheels.listing(folder)[1] < 60 * 2**20


def _script(name: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / name), *args], capture_output=True, text=True,
                          env={**os.environ, "GPU_CHECK_PYTHON": sys.executable, **env}, timeout=60)


def test_bad_input_gets_one_error_line(tmp_path):
    proc = _script("gpu_check.sh", "--wheels", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "nowhere" in proc.stderr and "fetch_gpu_wheels.sh" in proc.stderr
    proc = _script("gpu_check.sh", "--cpu-dry-run", "--no-wheels", "--only", "fsdp_bf17")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: --only: unknown check 'fsdp_bf17'; known: " + ", ".join(s.name for s in CHECKS))
    proc = _script("fetch_gpu_wheels.sh", "--pyhton", "3.12")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: unknown argument --pyhton")
    proc = _script("gpu_check.sh", GPU_CHECK_PYTHON="no-such-python-xyz")
    assert proc.returncode == 2 and "GPU_CHECK_PYTHON" in proc.stderr


# ---- the GPU checks' code on CPU stand-ins ----------------------------------------------------------
def _start_python(code: str, tmp_path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    return subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _finish_python(proc: subprocess.Popen) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cpu_standins(request, tmp_path_factory):
    """``name -> started process`` of the stand-in runs below that this session selected: each runs
    in its own interpreter for some seconds, so they start with the module and overlap the dry run;
    a test collects its own (:func:`_finish_python`)."""
    selected = {item.originalname for item in request.session.items
                if getattr(item, "module", None) is not None and item.module.__name__ == __name__}
    wanted = {"megatron": "test_the_megatron_step_check_runs_through_on_the_cpu_shim",
              "offload": "test_the_offload_check_compares_the_steps_after_onload"}
    started: dict[str, subprocess.Popen] = {}
    if wanted["megatron"] in selected and importlib.util.find_spec("megatron") is not None:
        started["megatron"] = _start_python(MEGATRON_ON_CPU, tmp_path_factory.mktemp("megatron_on_cpu"))
    if wanted["offload"] in selected:
        started["offload"] = _start_python(OFFLOAD_ON_CPU, tmp_path_factory.mktemp("offload_on_cpu"))
    yield started
    for proc in started.values():  # a test that did not collect its run (failed before): stop it
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _standin_result(cpu_standins: dict, name: str, code: str, tmp_path: Path) -> dict:
    proc = cpu_standins.get(name) or _start_python(code, tmp_path)  # not started with the module
    return _finish_python(proc)


MEGATRON_ON_CPU = '''
import json, sys
from megatron_cpu_shim import install
install()
import toolkits.gpu_check.checks_megatron as m
from toolkits.gpu_check.runner import Context
base = m.actor_config
def cpu_config(backend="fsdp", **sections):  # the shim has no CPU path for bf16 / distributed Adam
    if backend == "megatron":
        sections["optim"] = {**sections["optim"], "bf16": False, "use_distributed_optimizer": False}
        sections["model"] = {**sections["model"], "precision": "fp32"}
    return base(backend, **sections)
m.actor_config = cpu_config
print(json.dumps(m.run_step(Context("cpu", True, sys.argv[1], sys.argv[1]))))
'''


@pytest.mark.slow  # a Megatron step through the CPU shim (~15 s): not in the quick tier
def test_the_megatron_step_check_runs_through_on_the_cpu_shim(cpu_standins, tmp_path):
    pytest.importorskip("megatron.core")
    result = _standin_result(cpu_standins, "megatron", MEGATRON_ON_CPU, tmp_path)
    f = result["figures"]
    assert result["status"] == "pass", result["failed"]
    assert f["loss_decreased"] and f["storage_bytes_left_offloaded"] == 0 and f["offload_state_bytes"] > 0
    assert f["logprob_max_abs_diff_vs_fsdp"] < 1e-5  # fp32 on both sides here
    assert "freed_fraction" not in f  # CUDA only


OFFLOAD_ON_CPU = '''
import json, sys, torch
torch.cuda.memory_allocated = lambda *a: 0  # nothing to measure on the CPU
torch.cuda.synchronize = lambda *a: None
import toolkits.gpu_check.checks_offload as m
from toolkits.gpu_check.common import TINY
from toolkits.gpu_check.runner import Context
m.SHAPE = TINY
print(json.dumps(m.run(Context("cpu", True, sys.argv[1], sys.argv[1]))))
'''


def test_the_offload_check_compares_the_steps_after_onload(cpu_standins, tmp_path):
    result = _standin_result(cpu_standins, "offload", OFFLOAD_ON_CPU, tmp_path)
    f = result["figures"]
    assert f["logprobs_equal_after_onload"] and f["first_steps_equal"] and f["second_step_within_bound"]
    assert f["first_step_noise_max_abs"] == 0.0 and f["loss_second_offloaded"] == f["loss_second_resident"]
    assert result["failed"] == ["freed_fraction = 0, not >= 0.9"]  # a no-op offload frees nothing
