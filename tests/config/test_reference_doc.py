"""docs/config_reference.md is generated from the config dataclasses and kept in sync by this test."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from rlinf.config.reference_doc import DEFAULT_PATH, WEB_PATH, UndocumentedFieldError, render_reference
from rlinf.runners.reference_doc import document, document_web, main, page_roots

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_YAML = Path(__file__).parent / "data" / "reference_math.yaml"
REGENERATE = f"python -m rlinf.runners.reference_doc --out {DEFAULT_PATH}"


@pytest.fixture(scope="module")
def rendered() -> str:
    return document()


def rows(text: str) -> dict[str, tuple[str, str, str]]:
    """Full key path -> (type, default, meaning) cells of every table row in ``text``."""
    out, section = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip().split(": ")[0]  # "actor.model: LLM-backend keys": flat keys
            section = "" if heading == "Top level" else heading
        elif line.startswith("| `") and section is not None:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            key = cells[0].strip("`")
            out[f"{section}.{key}" if section else key] = tuple(cells[1:])
    return out


def leaf_paths(node, prefix: str = ""):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaf_paths(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix


def test_committed_reference_is_current(rendered):
    path = ROOT / DEFAULT_PATH
    assert path.is_file(), f"{DEFAULT_PATH} is missing; generate it with: {REGENERATE}"
    committed = path.read_text(encoding="utf-8")
    if committed != rendered:
        diff = "".join(list(difflib.unified_diff(
            committed.splitlines(keepends=True), rendered.splitlines(keepends=True),
            fromfile=f"{DEFAULT_PATH} (committed)", tofile="rendered"))[:60])
        pytest.fail(f"{DEFAULT_PATH} is out of date with the config dataclasses; regenerate it "
                    f"with: {REGENERATE}\n{diff}")


def test_every_key_of_the_reference_yaml_is_documented(rendered):
    documented = rows(rendered)
    raw = yaml.safe_load(REFERENCE_YAML.read_text())
    raw.pop("hydra")  # Hydra's own section, dropped before parsing (the intro says so)
    assert "`hydra:`" in rendered
    missing = []
    for path in leaf_paths(raw):
        if path in documented:
            continue
        # keys below a free-form mapping (cluster.component_placement, actor.megatron.ckpt)
        parts = path.split(".")
        prefixes = [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
        if not any(p in documented and documented[p][0].startswith("`dict[") for p in prefixes):
            missing.append(path)
    assert not missing, f"keys of {REFERENCE_YAML.name} missing from the reference: {missing}"


def test_hand_picked_types_and_defaults(rendered):
    r = rows(rendered)
    assert r["algorithm.adv_type"][:2] == ("one of `gae`, `grpo`, `reinpp`, `reinpp_baseline`, `rloo`", "`grpo`")
    assert r["data.train_data_paths"][:2] == ("`list[str]`", "*required*")
    assert r["cluster.component_placement"][:2] == ("`dict[str, any]`", "*required*")
    assert r["rollout.padding"][:2] == ("`int \\| null`", "`null`")
    assert r["rollout.mode"][0] == "one of `collocate`, `disaggregate`, `hybrid`, `null`"
    assert r["actor.optim.lr"][:2] == ("`float`", "`1.0e-06`")
    assert r["actor.fsdp_config.fsdp_size"][:2] == ("`int`", "`-1`")
    assert r["runner.logger.logger_backends"][1] == "`[tensorboard]`"
    assert r["actor.megatron.ckpt"][1] == "`{}`"
    assert r["data.apply_chat_template"][:2] == ("`bool`", "`true`")
    assert r["algorithm.sampling_params"][:2] == (
        "section", "[algorithm.sampling_params](#algorithmsampling_params)")
    # one docstring entry for several keys names them all
    assert r["algorithm.lam"][2].startswith("`gamma`, `lam`: ")
    assert "## actor.fsdp_config.mixed_precision" in rendered


def test_section_links_point_at_headings(rendered):
    anchors = {re.sub(r"[^a-z0-9_\- ]", "", line[3:].lower()).replace(" ", "-")
               for line in rendered.splitlines() if line.startswith("## ")}
    links = re.findall(r"\]\(#([^)]+)\)", rendered)
    assert links and set(links) <= anchors, set(links) - anchors


@dataclass(frozen=True)
class _Inner:
    """``outer.inner``.

    Attributes:
        alpha: documented.
    """

    alpha: int = 1
    beta_undocumented: float = 0.5


@dataclass(frozen=True)
class _Outer:
    """Root.

    Attributes:
        name: documented.
        inner: a sub-section.
    """

    name: str = "x"
    inner: _Inner = field(default_factory=_Inner)


@dataclass(frozen=True)
class _Stale:
    """Root.

    Attributes:
        name: documented.
        removed_key: no longer a field.
    """

    name: str = "x"


def test_undocumented_field_raises_naming_it():
    with pytest.raises(UndocumentedFieldError, match=r"_Inner\.beta_undocumented: no description"):
        render_reference(_Outer, title="t")


def test_stale_docstring_entry_raises():
    with pytest.raises(UndocumentedFieldError, match=r"_Stale\.removed_key: .* not a field"):
        render_reference(_Stale, title="t")


def test_cli_out_and_check(tmp_path, capsys):
    target = tmp_path / "ref.md"
    assert main(["--check", str(target)]) == 1
    assert "--out" in capsys.readouterr().err
    assert main(["--out", str(target)]) == 0
    assert main(["--check", str(target)]) == 0
    target.write_text(target.read_text() + "edited by hand\n")
    assert main(["--check", str(target)]) == 1
    assert f"{target} is out of date; regenerate it with" in capsys.readouterr().err


def test_each_recipe_puts_its_root_config_on_its_page():
    """The recipes say which root config a page shows (Recipe hooks), in their order; the off-policy
    recipe's own sections under a heading math already used are headed with its suffix."""
    assert page_roots("main") == [("MathConfig", ""), ("EmbodiedConfig", ""), ("ToolAgentConfig", ""),
                                  ("OffPolicyEmbodiedConfig", "(off-policy embodied)")]
    assert page_roots("web") == [("WebAgentConfig", "")]


def test_the_old_command_names_the_new_one():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "rlinf.config.reference_doc", "--out", "x.md"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "error: the reference is rendered from the recipes' root configs now: run python -m "
        "rlinf.runners.reference_doc --out docs/config_reference.md --web-out docs/config_reference_web.md"]


def test_web_reference_is_current():
    """docs/config_reference_web.md is rendered from the web-agent config dataclasses."""
    path = ROOT / WEB_PATH
    rendered = document_web()
    assert path.is_file() and path.read_text(encoding="utf-8") == rendered, (
        f"{WEB_PATH} is out of date; regenerate it with python -m rlinf.runners.reference_doc --web-out {WEB_PATH}")
    anchors = {re.sub(r"[^a-z0-9_\- ]", "", line[3:].lower()).replace(" ", "-")
               for line in rendered.splitlines() if line.startswith("## ")}
    assert set(re.findall(r"\]\(#([^)]+)\)", rendered)) <= anchors
    for key in ("env_config.http_pools", "algorithm_config", "openai_config", "policy_config"):
        assert f"## {key}" in rendered
