"""The worked example of docs/scheduler.md runs as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
import ray.cloudpickle

pytestmark = pytest.mark.ray
DOC = Path(__file__).resolve().parents[2] / "docs" / "scheduler.md"


def test_worked_example_runs(ray_cluster):
    code = re.search(r"## A worked example.*?```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    module = types.ModuleType("scheduler_doc_example")
    sys.modules[module.__name__] = module
    ray.cloudpickle.register_pickle_by_value(module)
    exec(compile(code, str(DOC), "exec"), module.__dict__)  # the doc's own asserts check results
