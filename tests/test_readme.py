"""The README's table of codes is the one the codemod docstrings generate, and its commands exist."""

from __future__ import annotations

import re

from accel_convert.codemods.engine.registry import code_docs
from accel_convert.converter.docs import README, codes_table, with_table


def test_readme_codes_table_is_generated_from_the_docstrings() -> None:
    current = README.read_text(encoding="utf-8")
    assert with_table(current, codes_table(code_docs())) == current, "run `python -m accel_convert.converter.docs`"


def test_every_code_appears_once_in_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    for doc in code_docs():
        assert len(re.findall(rf"\| `{doc.code}` \|", text)) == 1, doc.code


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    test_command = ci.strip().splitlines()[-1].strip()
    assert test_command in README.read_text(encoding="utf-8")
