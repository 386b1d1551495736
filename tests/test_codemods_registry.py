"""The registry: run order, tolerance of passes not written yet, docs generated from docstrings."""

from __future__ import annotations

import re

import pytest

from codemods import registry
from codemods.registry import CODEMOD_MODULES, all_codemods, code_docs, parse_docstring

DESIGN_ORDER = ["accelerator", "device", "prepare", "backward", "clip_grad", "amp", "accumulate",
                "metrics", "checkpoint", "oom_retry"]


def test_run_order_follows_design() -> None:
    modules = [cls.__module__.rsplit(".", 1)[1] for cls in all_codemods()]
    present = [name for name in DESIGN_ORDER if name in modules]
    assert {"accelerator", "device", "prepare", "backward", "clip_grad"} <= set(present)
    assert [modules.index(name) for name in present] == sorted(modules.index(name) for name in present)
    assert modules.index("helpers") > max(modules.index(name) for name in present), (
        "helpers must see every accelerator use the other passes wrote"
    )


def test_modules_not_written_yet_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "CODEMOD_MODULES", ("backward", "not_written_yet", "clip_grad"))
    found = registry.all_codemods.__wrapped__()
    assert [cls.code for cls in found] == ["ACC105", "ACC106"]


def test_every_code_is_documented_once() -> None:
    docs = code_docs()
    codes = [doc.code for doc in docs]
    assert codes == sorted(set(codes))
    expected = {cls.code for cls in all_codemods()} | {code for cls in all_codemods() for code in cls.extra_codes}
    assert set(codes) == expected
    for doc in docs:
        assert re.fullmatch(r"ACC[19]\d\d", doc.code)
        assert doc.fixed == doc.code.startswith("ACC1")
        assert doc.name and doc.summary
        if doc.fixed:
            assert doc.before and doc.after and doc.before != doc.after, doc.code


def test_docstring_format_is_parsed() -> None:
    doc = '''ACC199 example-rule (only sometimes): the summary
    that wraps onto a second line.

    Some prose.

    Before::

        loss.backward()

    After::

        accelerator.backward(loss)

    Trailing prose.
    '''
    code, name, summary, before, after = parse_docstring(doc)
    assert (code, name) == ("ACC199", "example-rule")
    assert summary == "the summary that wraps onto a second line."
    assert (before, after) == ("loss.backward()", "accelerator.backward(loss)")


def test_a_docstring_without_headline_is_an_error() -> None:
    with pytest.raises(ValueError, match="ACCnnn"):
        parse_docstring("Just prose.")


def test_registry_lists_the_issue5_passes_by_name() -> None:
    for name in ("dataparallel", "amp", "accumulate", "metrics", "checkpoint", "side_effects", "oom_retry"):
        assert name in CODEMOD_MODULES
