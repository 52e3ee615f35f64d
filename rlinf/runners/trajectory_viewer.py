"""A static HTML report of saved trajectories: per episode, the task, the verdict and, step by
step, what the model saw and did. A web agent's step shows the page (title, URL, screenshot), the
model's reply and the action taken; a tool agent's step (one model turn) shows the model's text
and the tool results that came back.

    python -m rlinf.runners.trajectory_viewer outputs/web/test_trajectories --iteration 4
    # -> outputs/web/test_trajectories/iteration4_report.html (open it in any browser)
    python -m rlinf.runners.trajectory_viewer results/tool-calc-tiny-cpu/train_trajectories --iteration 3

The report lies next to the trajectory files, so screenshots (saved beside them) are linked by
relative paths; it needs no server and no script.

Example:
    >>> html = render_report([{"task": {"task_id": "t1", "instruction": "Find <b>", "difficulty": "easy",
    ...     "reference_answer": "1"}, "status": "answered", "answer": "1", "reward": 1.0, "steps": [
    ...     {"index": 0, "observation": {"url": "/shop/", "title": "Shop"}, "response": "answer \\"1\\"",
    ...      "action": {"type": "answer", "text": "1"}, "screenshot": None}]}], title="demo")
    >>> "Find &lt;b&gt;" in html and "class='episode ok'" in html
    True
    >>> html = render_report([{"task": {"task_id": "7", "instruction": "What is 12*34?", "reference_answer": "408"},
    ...     "status": "answer", "answer": "408", "reward": 1.0, "steps": [
    ...     {"index": 0, "response": "<tool_call>...</tool_call>", "tool_results": [{"status": "ok", "text": "408"}]},
    ...     {"index": 1, "response": "\\boxed{408}", "tool_results": []}]}])
    >>> "ok: 408" in html and html.count("<b>Turn") == 2
    True
"""

from __future__ import annotations

import argparse
import html
import json
import os

from rlinf.runners.trajectory_store import load_iteration

_STYLE = """
body{font-family:sans-serif;margin:1.5em;max-width:1100px}
.episode{border:1px solid #bbb;border-radius:6px;margin:1em 0;padding:.6em 1em}
.ok{border-left:8px solid #2a2} .fail{border-left:8px solid #c33}
.step{display:flex;gap:1em;border-top:1px dashed #ccc;padding:.5em 0}
.step img{max-width:420px;border:1px solid #999}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.3em;margin:.2em 0}
pre.tool{background:#eef4ff} pre.error,pre.timeout{background:#fde8e8}
.summary td,.summary th{padding:.2em .8em;text-align:left}
"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def render_report(trajectories: list[dict], title: str = "trajectories") -> str:
    """The report's HTML for ``trajectories`` (the dicts of docs/web_agent.md)."""
    ok = sum(1 for t in trajectories if (t.get("reward") or 0) > 0)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>{_e(title)}</h1>",
             f"<table class='summary'><tr><th>episodes</th><td>{len(trajectories)}</td></tr>"
             f"<tr><th>rewarded</th><td>{ok}</td></tr></table>"]
    for n, traj in enumerate(trajectories):
        task = traj.get("task") or {}
        good = (traj.get("reward") or 0) > 0
        parts.append(f"<div class='episode {'ok' if good else 'fail'}' id='ep{n}'>"
                     f"<h2>{_e(task.get('task_id'))} (repeat {_e(traj.get('repeat', 0))}, "
                     f"{_e(task.get('difficulty'))})</h2>"
                     f"<p><b>Task:</b> {_e(task.get('instruction'))}<br><b>Reference:</b> "
                     f"{_e(task.get('reference_answer'))} &nbsp; <b>Answer:</b> {_e(traj.get('answer'))} &nbsp; "
                     f"<b>Status:</b> {_e(traj.get('status'))} &nbsp; <b>Reward:</b> {_e(traj.get('reward'))}"
                     + (f" &nbsp; <b>Error:</b> {_e(traj.get('error'))}" if traj.get("error") else "") + "</p>")
        for step in traj.get("steps") or ():
            parts.append(_tool_step(step) if "tool_results" in step else _web_step(step))
        parts.append("</div>")
    parts.append("</body></html>")
    return "".join(parts)


def _web_step(step: dict) -> str:
    obs = step.get("observation") or {}
    shot = step.get("screenshot")
    img = f"<img src='{_e(shot)}' alt='step {_e(step.get('index'))}'>" if shot else ""
    action = step.get("action")
    return (f"<div class='step'><div>{img}</div><div><b>Step {_e(step.get('index'))}</b> "
            f"{_e(obs.get('title'))} <code>{_e(obs.get('url'))}</code>"
            f"<pre class='reply'>{_e(step.get('response'))}</pre>"
            f"<div class='action'>action: <code>"
            f"{_e(json.dumps(action) if action else 'none (environment failure)')}</code>"
            + (f"<br>error: {_e(step.get('exec_error'))}" if step.get("exec_error") else "")
            + "</div></div></div>")


def _tool_step(step: dict) -> str:
    results = "".join(f"<pre class='tool {_e(r.get('status'))}'>{_e(r.get('status'))}: {_e(r.get('text'))}</pre>"
                      for r in step.get("tool_results") or ())
    versions = step.get("policy_versions") or ()
    tag = f" <span class='version'>policy v{'/v'.join(str(v) for v in versions)}</span>" if versions else ""
    return (f"<div class='step'><div><b>Turn {_e(step.get('index'))}</b>{tag}"
            f"<pre class='reply'>{_e(step.get('response'))}</pre>"
            + (f"<div class='results'>tool results:{results}</div>" if results else "") + "</div></div>")


def write_report(folder: str, iteration: int, out: str | None = None) -> str:
    """Render every rank's trajectories of ``iteration`` in ``folder``; returns the HTML path."""
    trajectories = load_iteration(folder, iteration)
    if not trajectories:
        raise FileNotFoundError(f"{folder}: no trajectories of iteration {iteration} (iteration{iteration}_rank_*.pt)")
    path = out or os.path.join(folder, f"iteration{iteration}_report.html")
    with open(path, "w") as f:
        f.write(render_report(trajectories, title=f"{os.path.basename(os.path.abspath(folder))} iteration {iteration}"))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a train_trajectories / test_trajectories folder")
    parser.add_argument("--iteration", type=int, required=True)
    parser.add_argument("--out", default=None, help="HTML file (default: next to the trajectories)")
    args = parser.parse_args(argv)
    try:
        print(write_report(args.folder, args.iteration, args.out))
    except FileNotFoundError as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
