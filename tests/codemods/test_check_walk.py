"""The checks share one walk (codemods.engine.check_walk): each must find in it exactly what it finds
walking the tree alone, see only the statements of its own lines, and get ``leave_`` hooks as on a
libcst visitor (also for a node whose ``visit_`` hook said not to look below it)."""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst
import pytest

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.check_walk import WalkingCheck, run_checks
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.registry import check_rules

CASES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "cases").glob("*.py"))
WALKING = [rule for rule in check_rules() if issubclass(rule, WalkingCheck)]


def test_several_checks_walk_the_tree() -> None:
    """Otherwise there is nothing to share."""
    assert len(WALKING) >= 3


@pytest.mark.parametrize("case", CASES[::6], ids=lambda path: path.stem)
def test_each_check_finds_in_the_shared_walk_what_it_finds_alone(case: Path) -> None:
    source = case.read_text()
    module = cst.parse_module(source)
    facts = analyse(module, source)
    options = Options()
    checks = [rule() for rule in WALKING if rule().applies(facts, options)]
    shared = run_checks(module, facts, checks, options)
    for check, found in shared:
        assert found == type(check)().transform(module, facts, options)[1], check.code


SCRIPT = """\
import torch

def first():
    a = torch.zeros(1)
    if a:
        b = torch.ones(1)
    return a

def second():
    c = torch.zeros(2)
"""


class _Recorder(WalkingCheck):
    """Logs the calls it is shown and its hooks; does not look below ``if`` statements."""

    code = "ACC998"
    name = "recorder"
    wanted: set[int] | None = None

    def lines(self, facts: ScriptFacts) -> set[int] | None:
        return self.wanted

    def start(self, module: cst.Module, facts: ScriptFacts) -> None:
        self.log: list[str] = []

    def visit_If(self, node: cst.If) -> bool:
        self.log.append("visit if")
        return False

    def leave_If(self, node: cst.If) -> None:
        self.log.append("leave if")

    def visit_Call(self, node: cst.Call) -> None:
        self.log.append(f"call in {self.walk.function}")


class _SecondFunctionOnly(_Recorder):
    code = "ACC997"
    wanted = {10}


def _walk(*checks: _Recorder) -> None:
    module = cst.parse_module(SCRIPT)
    run_checks(module, analyse(module, SCRIPT), list(checks), Options())


def test_a_check_is_shown_only_the_statements_of_its_lines_and_not_below_a_refused_node() -> None:
    everywhere, second_only = _Recorder(), _SecondFunctionOnly()
    _walk(everywhere, second_only)
    assert everywhere.log == ["call in first", "visit if", "leave if", "call in second"]
    assert second_only.log == ["call in second"]


def test_a_walking_check_dropped_into_checks_runs_in_the_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding a check that looks at nodes is one file too: found, walked with the others, reported."""
    from accel_convert import codemods
    from accel_convert.codemods import checks
    from accel_convert.codemods.engine import registry

    (tmp_path / "prints_left.py").write_text(
        '''"""ACC999 module-len: a len() at module level.

Shown so the conversion's reviewer sees it.
"""

import libcst as cst

from accel_convert.codemods.engine.check_walk import WalkingCheck


class PrintsLeft(WalkingCheck):
    code = "ACC999"
    name = "module-len"

    def visit_Call(self, node):
        if isinstance(node.func, cst.Name) and node.func.value == "len" and self.walk.function == "<module>":
            self.walk.report(node, self.code, "a len", False)
'''
    )
    monkeypatch.setattr(checks, "__path__", [*checks.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "accel_convert.codemods.checks.prints_left", raising=False)
    caches = (registry.all_rules, registry.check_rules, registry.rewrite_rules)
    for cached in caches:
        cached.cache_clear()
    try:
        script = CASES[0].read_text() + "\nlen('done')\n"
        outcome = codemods.convert_module(cst.parse_module(script), Options(), script)
    finally:
        sys.modules.pop("accel_convert.codemods.checks.prints_left", None)
        monkeypatch.undo()
        for cached in caches:
            cached.cache_clear()
    last_line = script.count("\n")
    assert [change.line for change in outcome.changes if change.code == "ACC999"][-1:] == [last_line]
