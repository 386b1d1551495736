"""Every rule's documented examples, run through the real pipeline.

``--list-codes`` shows these examples, so they must be what the converter does: an automatic
rewrite's ``after`` is exactly the converted ``before``; a report's ``message`` is exactly what
the converter reports, and the report writes nothing (switched off with ``--ignore``, the
converted script is the same). Converting the result again changes nothing (the pipeline's own
stability check, made here on the documented text).
"""

from __future__ import annotations

import pytest

from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.registry import CodeDoc, all_rules, code_docs, example_code
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.converter.pipeline import Conversion, convert_source

EXAMPLES = [
    pytest.param(rule, example, id=f"{example_code(rule, example)}-{rule.name}-{index}")
    for rule in all_rules()
    for index, example in enumerate(rule.examples)
]


def convert(script: str, example: Example, ignore: tuple[str, ...] = ()) -> Conversion:
    options = Options(oom_retry=example.oom_retry, target=example.target, ignore=ignore)
    return convert_source(script.encode(), options, path="example.py")


@pytest.mark.parametrize(("rule", "example"), EXAMPLES)
def test_example_is_what_the_converter_does(rule: type[Rule], example: Example) -> None:
    code = example_code(rule, example)
    conversion = convert(example.before, example)
    output = conversion.output.decode()
    if example.leaves_alone:
        assert not [change for change in conversion.changes if change.code == code], f"{code} reported"
        # A rewrite's example without ``after`` is a script no rule changes; a report's ``after``,
        # where it gives one, is what the rewrites make of it.
        assert not example.message
        if example.after or not code.startswith("ACC9"):
            assert output == (example.after or example.before)
        return
    if code.startswith("ACC9"):
        assert example.message and not example.after, "a report's example gives its message, not a script"
        spots = [change for change in conversion.warnings if change.code == code and change.message == example.message]
        reported = sorted({change.message for change in conversion.warnings if change.code == code})
        assert spots, f"{code} {example.message!r} not reported; reported: {reported}"
        assert convert(output, example).output == conversion.output, "the converted script changes again"
        # The report writes nothing: switched off (--ignore), the converted script is the same.
        ignored = convert(example.before, example, ignore=(code,))
        assert ignored.output == conversion.output
        assert not [change for change in ignored.changes if change.code == code]
    else:
        assert not example.message, "an automatic rewrite's example gives the converted script"
        assert output == example.after
        assert any(change.code == code and change.fixed for change in conversion.changes), f"{code} not reported"
        again = convert(example.after, example)
        assert again.output == conversion.output and not again.rewrites, "the converted script changes again"


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.name)
def test_every_rule_shows_its_own_code_and_each_extra_code(rule: type[Rule]) -> None:
    shown = {example_code(rule, example) for example in rule.examples}
    assert shown == {rule.code, *rule.extra_codes}


@pytest.mark.parametrize("doc", code_docs(), ids=lambda doc: doc.code)
def test_every_code_shows_what_it_leaves_alone(doc: CodeDoc) -> None:
    """Each code's page shows a near miss its rule leaves alone (the nearest script on which the
    code is not reported), run by ``test_example_is_what_the_converter_does`` like the other
    examples: a rule's own code and each of its extra codes, a rewrite's findings too."""
    assert any(example.leaves_alone for example in doc.examples), (
        f"{doc.code}: no Example(code={doc.code!r}, leaves_alone=True) in its rule's examples"
    )


OWN_EXAMPLES = [
    pytest.param(rule, example, id=f"{rule.code}-{rule.name}-{index}")
    for rule in all_rules()
    if not rule.reports_only() and any(code.startswith("ACC9") for code in rule.extra_codes)
    for index, example in enumerate(rule.examples)
    if example_code(rule, example) == rule.code and not example.leaves_alone
]


@pytest.mark.parametrize(("rule", "example"), OWN_EXAMPLES)
def test_a_rewrites_own_examples_report_none_of_its_findings(rule: type[Rule], example: Example) -> None:
    """A rewrite's own examples report none of its findings (``ACC9xx``): what it converts is
    left alone by each of them."""
    conversion = convert(example.before, example)
    reported = sorted({change.code for change in conversion.changes if change.code in rule.extra_codes})
    assert not reported, reported
