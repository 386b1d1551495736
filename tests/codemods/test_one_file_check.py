"""Adding a check is one file (docs/contributing.md, "Adding a check is one file"): a module put in
``codemods/checks/`` with its rule, its own facts (a rule provider) and its examples is found by
the registry, its provider runs in the analysis, it reports, and its code is documented, without
any other file changed. Here the module is written to a temporary folder added to the checks
package's path, so the repository is never touched."""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst
import pytest

from accel_convert import codemods
from accel_convert.codemods import checks
from accel_convert.codemods.engine import registry
from accel_convert.codemods.engine.model import Options

MODULE = "sleeping_loop"
CHECK = '''"""ACC998 sleeping-loop: a ``time.sleep`` in a loop slows every process alike.

Shown so the conversion's reviewer sees it.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options, Site
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis


@rule_provider()
def sleeps_in_loops(a: Analysis) -> tuple[Site, ...]:
    """Calls of ``time.sleep`` inside a loop."""
    return tuple(a.site(call.node) for call in a.r.calls if call.loops and a.qualified(call) == "time.sleep")


class SleepingLoop(Rule):
    code = "ACC998"
    name = "sleeping-loop"
    providers = (sleeps_in_loops,)
    examples = (
        Example(before="import time\\nfor step in range(3):\\n    time.sleep(1)\\n", message="a sleep in a loop"),
        Example(before="import time\\ntime.sleep(1)\\n", leaves_alone=True),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool(facts.of(sleeps_in_loops))

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        return module, [
            Change(self.code, "a sleep in a loop", site.line, site.column, site.end_line, site.end_column, fixed=False)
            for site in facts.of(sleeps_in_loops)
        ]
'''

SCRIPT = """\
import time

import torch

model = torch.nn.Linear(2, 1)
time.sleep(0)
for step in range(3):
    time.sleep(0)
"""

_CACHES = (registry.all_rules, registry.check_rules, registry.rewrite_rules, registry.rule_providers)


@pytest.fixture
def added_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The check module, written where the registry looks for checks (and nowhere else)."""
    (tmp_path / f"{MODULE}.py").write_text(CHECK, encoding="utf-8")
    monkeypatch.setattr(checks, "__path__", [*checks.__path__, str(tmp_path)])
    name = f"accel_convert.codemods.checks.{MODULE}"
    for cached in _CACHES:
        cached.cache_clear()
    yield
    sys.modules.pop(name, None)
    monkeypatch.undo()
    for cached in _CACHES:
        cached.cache_clear()


@pytest.mark.usefixtures("added_check")
def test_a_check_in_one_file_registers_runs_its_provider_and_reports() -> None:
    assert "SleepingLoop" in {rule.__name__ for rule in registry.check_rules()}
    outcome = codemods.convert_module(cst.parse_module(SCRIPT), Options(), SCRIPT)
    assert [change.line for change in outcome.changes if change.code == "ACC998"] == [8]


@pytest.mark.usefixtures("added_check")
def test_a_check_in_one_file_is_documented_with_its_examples() -> None:
    (doc,) = [doc for doc in registry.code_docs() if doc.code == "ACC998"]
    assert doc.name == "sleeping-loop" and not doc.fixed
    assert [example.leaves_alone for example in doc.examples] == [False, True]


def test_without_the_file_there_is_no_such_check() -> None:
    assert "ACC998" not in {doc.code for doc in registry.code_docs()}
