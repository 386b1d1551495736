"""The registry: run order, a missing rule module is an error, docs generated from docstrings and examples."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from accel_convert.codemods.engine import registry
from accel_convert.codemods.engine.registry import REWRITE_MODULES, all_rules, code_docs, parse_headline

DESIGN_ORDER = [
    "accelerator",
    "device",
    "prepare",
    "backward",
    "clip_grad",
    "amp",
    "accumulate",
    "metrics",
    "checkpoint",
    "oom_retry",
]


def test_run_order_follows_design() -> None:
    modules = [cls.__module__.rsplit(".", 1)[1] for cls in all_rules()]
    present = [name for name in DESIGN_ORDER if name in modules]
    assert {"accelerator", "device", "prepare", "backward", "clip_grad"} <= set(present)
    assert [modules.index(name) for name in present] == sorted(modules.index(name) for name in present)
    assert modules.index("pass_accelerator") > max(modules.index(name) for name in present), (
        "helpers must see every accelerator use the other passes wrote"
    )


def test_a_listed_module_that_does_not_exist_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "REWRITE_MODULES", ("backward", "bakward", "clip_grad"))
    with pytest.raises(ModuleNotFoundError, match="bakward"):
        registry.all_rules.__wrapped__()


def test_every_code_is_documented_once() -> None:
    docs = code_docs()
    codes = [doc.code for doc in docs]
    assert codes == sorted(set(codes))
    expected = {cls.code for cls in all_rules()} | {code for cls in all_rules() for code in cls.extra_codes}
    assert set(codes) == expected
    for doc in docs:
        assert re.fullmatch(r"ACC[19]\d\d", doc.code)
        assert doc.fixed == doc.code.startswith("ACC1")
        assert doc.name and doc.summary
        assert doc.examples, f"{doc.code} has no example"
        if doc.fixed:
            assert doc.before and doc.after and doc.before != doc.after, doc.code
        else:
            assert doc.before and doc.message and not doc.after, doc.code


def test_headline_is_parsed() -> None:
    doc = """ACC199 example-rule (only sometimes): the summary
    that wraps onto a second line.

    Some prose.
    """
    assert parse_headline(doc) == ("ACC199", "example-rule", "the summary that wraps onto a second line.")


def test_a_docstring_without_headline_is_an_error() -> None:
    with pytest.raises(ValueError, match="ACCnnn"):
        parse_headline("Just prose.")


def test_registry_lists_the_rewrite_rules_by_name() -> None:
    for name in ("dataparallel", "amp", "accumulate", "metrics", "checkpoint", "side_effects", "oom_retry"):
        assert name in REWRITE_MODULES


def test_rewrites_and_checks_live_apart() -> None:
    """A rewrite changes the script (ACC1xx); a check only reports and sits in checks/, found
    without being listed anywhere, and runs after every rewrite."""
    rules = all_rules()
    folders = [rule.__module__.split(".")[-2] for rule in rules]
    assert set(folders) == {"rewrites", "checks"}
    assert folders == sorted(folders, key=lambda folder: folder == "checks"), "a check runs before a rewrite"
    for rule, folder in zip(rules, folders):
        assert rule.reports_only() == (folder == "checks"), rule.__module__
    assert set(registry.check_modules()) == {rule.__module__.split(".")[-1] for rule in rules if rule.reports_only()}


def test_a_module_dropped_into_checks_is_a_check_with_no_other_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding a check is one file: the registry finds it, its code is documented, it runs."""
    from accel_convert.codemods import checks

    (tmp_path / "todo_comment.py").write_text(
        '''"""ACC999 todo-left: a TODO the author left in a training script.

Shown so the conversion's reviewer sees it.
"""

import libcst as cst

from accel_convert.codemods.engine.rule import Example, Rule


class TodoLeft(Rule):
    code = "ACC999"
    name = "todo-left"
    examples = (Example(before="x = 1  # TODO\\n", message="a TODO"),)

    def transform(self, module, facts, options):
        return module, []
'''
    )
    monkeypatch.setattr(checks, "__path__", [*checks.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "accel_convert.codemods.checks.todo_comment", raising=False)
    found = registry.all_rules.__wrapped__()
    sys.modules.pop("accel_convert.codemods.checks.todo_comment", None)
    assert [rule.code for rule in found if rule.code == "ACC999"] == ["ACC999"]
    assert found.index(next(rule for rule in found if rule.code == "ACC999")) > max(
        found.index(rule) for rule in found if not rule.reports_only()
    )


def test_every_code_is_distinct() -> None:
    """A rule's code and every extra code, over all rules: one meaning per code."""
    codes = [code for rule in all_rules() for code in (rule.code, *rule.extra_codes)]
    assert len(codes) == len(set(codes)), sorted(code for code in set(codes) if codes.count(code) > 1)
    assert all(re.fullmatch(r"ACC[19]\d\d", code) for code in codes), codes


def test_only_a_rules_own_code_can_be_a_rewrite() -> None:
    """``convert_module(..., tree_only=True)`` skips the rules that cannot change the tree: those
    whose codes are all reports, and those whose own rewrite is switched off. The second holds
    only because every extra code is a report."""
    for rule in all_rules():
        assert all(code.startswith("ACC9") for code in rule.extra_codes), rule
        assert rule.reports_only() == rule.code.startswith("ACC9"), rule
    assert any(rule.reports_only() for rule in all_rules())
