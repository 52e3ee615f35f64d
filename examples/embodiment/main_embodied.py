"""Embodied RL (PPO / GRPO on simulators): the Hydra entry point.

    python examples/embodiment/main_embodied.py --config-name maniskill_ppo_mlp_cpu
    python examples/embodiment/main_embodied.py --config-name toy_ppo_mlp runner.max_steps=5

Run from the repository root. Shared env groups come from ``config/env/`` through
``hydra.searchpath`` (``REPO_PATH`` is set to this checkout when unset). Everything happens in
:func:`rlinf.runners.embodied_main.run_embodied`; config errors name the key and stop before any
worker starts.
"""

import os
import sys

import hydra

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)
os.environ.setdefault("REPO_PATH", ROOT)
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from rlinf.config.resolvers import register_resolvers  # noqa: E402
from rlinf.utils.typed_config import ConfigError  # noqa: E402

register_resolvers()


@hydra.main(version_base="1.3", config_path="config", config_name="toy_ppo_mlp")
def main(cfg) -> None:
    from rlinf.runners.embodied_main import run_embodied

    try:
        summary = run_embodied(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        sys.exit(2)
    first, last = summary.get("val/first_success_rate"), summary.get("val/last_success_rate")
    if first is not None:
        print(f"[rlinf] eval success rate: first {100 * first:.1f}% -> last {100 * last:.1f}%")
    print(f"[rlinf] done: {int(summary['steps'])} steps")


if __name__ == "__main__":
    main()
