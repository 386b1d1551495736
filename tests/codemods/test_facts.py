"""The facts are read-only to the rules, and the type checker says so: a rule that changes them
after the analysis (``facts.models.add(...)``) is a mypy error, not a surprise at run time. The
analysis draws them in a :class:`FactsDraft` (the same fields, mutable) and
:meth:`FactsDraft.finish` hands the rules the :class:`ScriptFacts` it becomes."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.facts import FactsDraft, LoopFacts, RunContext, ScriptFacts
from accel_convert.codemods.engine.findings import FILE_START

ROOT = Path(__file__).resolve().parents[2]

#: Every line of ``rule`` that ends in ``# refused`` changes the facts; the draft may change.
PROBE = """
from accel_convert.codemods.engine.facts import FactsDraft, ScriptFacts


def rule(facts: ScriptFacts) -> None:
    facts.models.add("model")  # refused
    facts.models |= {"model"}  # refused
    facts.call_graph["main"].add("train")  # refused
    facts.call_sites["train"] = []  # refused
    facts.train_loops.append(facts.train_loops[0])  # refused
    facts.main_function = "main"  # refused
    facts.context.changed_lines.add(3)  # what the rules' run writes: allowed


def provider(draft: FactsDraft) -> ScriptFacts:
    draft.models.add("model")
    draft.models |= {"model"}
    draft.call_graph.setdefault("main", set()).add("train")
    draft.call_sites["train"] = []
    draft.train_loops.append(draft.train_loops[0])
    draft.main_function = "main"
    return draft.finish()


hand_built = ScriptFacts(models={"model"}, call_graph={"main": {"train"}}, train_loops=[])
"""


def test_a_rule_changing_the_facts_is_a_type_error(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "--follow-imports=silent", str(probe)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    reported = {int(line) for line in re.findall(r"probe\.py:(\d+): error", checked.stdout)}
    refused = {number for number, line in enumerate(PROBE.splitlines(), 1) if line.endswith("# refused")}
    assert len(refused) == 6
    assert reported == refused, checked.stdout


def test_the_draft_has_the_fields_of_the_facts() -> None:
    assert [each.name for each in fields(FactsDraft)] == [each.name for each in fields(ScriptFacts)]


FACTS_MODULE = ROOT / "accel_convert" / "codemods" / "engine" / "facts.py"
#: The lines that open and close the draft's generated fields in ``facts.py``.
GENERATED_START = "    # writes it here (tests/codemods/test_facts.py checks these lines are up to date).\n"
GENERATED_END = "    # End of the generated fields.\n"
#: A read-only type of a fact → the type the draft fills; a default → the draft's.
_MUTABLE_TYPES = (("AbstractSet[", "set["), ("Sequence[", "list["), ("Mapping[", "dict["))
_MUTABLE_DEFAULTS = {"frozenset()": "field(default_factory=set)", "()": "field(default_factory=list)"}


def draft_fields(source: str) -> str:
    """The draft's field lines, from the fields ``ScriptFacts`` declares in ``source`` (the text of
    ``facts.py``): the same names in the same order, each read-only type made the mutable one the
    providers fill, and its default with it."""
    tree = ast.parse(source)
    facts = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ScriptFacts")
    lines = []
    for node in facts.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        annotation = ast.get_source_segment(source, node.annotation) or ""
        for read_only, mutable in _MUTABLE_TYPES:
            annotation = annotation.replace(read_only, mutable)
        line = f"    {node.target.id}: {annotation}"
        if node.value is not None:
            default = ast.get_source_segment(source, node.value) or ""
            line += f" = {_MUTABLE_DEFAULTS.get(default, default)}"
        lines.append(line + "\n")
    return "".join(lines)


def _generated_part(source: str) -> tuple[int, int]:
    start = source.index(GENERATED_START) + len(GENERATED_START)
    return start, source.index(GENERATED_END, start)


def write_draft_fields() -> None:
    """Write the draft's fields from ScriptFacts' (``python -m tests.codemods.test_facts``)."""
    source = FACTS_MODULE.read_text(encoding="utf-8")
    start, end = _generated_part(source)
    FACTS_MODULE.write_text(source[:start] + draft_fields(source) + source[end:], encoding="utf-8")


def test_the_draft_fields_are_generated_from_the_facts() -> None:
    """The fact list is declared once, in ScriptFacts: the draft's fields are generated from it."""
    source = FACTS_MODULE.read_text(encoding="utf-8")
    start, end = _generated_part(source)
    assert source[start:end] == draft_fields(source), "run python -m tests.codemods.test_facts"


def test_a_new_fact_declared_in_the_facts_is_generated_in_the_draft() -> None:
    source = FACTS_MODULE.read_text(encoding="utf-8")
    declared = "    rule_results: Mapping[str, object] = field(default_factory=dict)\n"
    added = "    #: A new fact.\n    new_names: AbstractSet[str] = frozenset()\n    new_sites: Sequence[Site] = ()\n"
    generated = draft_fields(source.replace(declared, declared + added, 1))
    assert generated.endswith(
        "    rule_results: dict[str, object] = field(default_factory=dict)\n"
        "    new_names: set[str] = field(default_factory=set)\n"
        "    new_sites: list[Site] = field(default_factory=list)\n"
    )


def test_finishing_carries_every_field_read_only() -> None:
    draft = FactsDraft()
    for each in fields(FactsDraft):
        value = getattr(draft, each.name)
        if isinstance(value, set):
            value.add(each.name)
        elif isinstance(value, list):
            value.append(LoopFacts("main", each.name, ("batch",), "train", FILE_START))
        elif isinstance(value, dict):
            value[each.name] = {each.name}
        elif each.name != "context":
            setattr(draft, each.name, each.name if value is None or isinstance(value, str) else value)
    facts = draft.finish()
    for each in fields(ScriptFacts):
        drawn, finished = getattr(draft, each.name), getattr(facts, each.name)
        if isinstance(drawn, set):
            assert isinstance(finished, frozenset) and finished == {each.name}, each.name
        elif isinstance(drawn, list):
            assert isinstance(finished, tuple) and finished == tuple(drawn), each.name
        elif isinstance(drawn, dict):
            assert isinstance(finished, MappingProxyType), each.name
            assert finished == {each.name: frozenset({each.name})}, each.name
        else:
            assert finished is drawn, each.name
    assert isinstance(facts.context, RunContext) and facts.context is draft.context  # written while rules run


def test_the_analysis_hands_on_read_only_containers_only() -> None:
    source = textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader

        def main():
            loader = DataLoader(range(8), batch_size=2)
            model = torch.nn.Linear(1, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for batch in loader:
                optimizer.zero_grad()
                model(batch).sum().backward()
                optimizer.step()

        main()
        """
    )
    facts = analyse(cst.parse_module(source), source)
    assert facts.models == {"model"} and facts.train_loops and facts.call_graph["<module>"] == {"main"}
    for each in fields(ScriptFacts):
        value = getattr(facts, each.name)
        assert not isinstance(value, (set, list, dict)), each.name
        if isinstance(value, MappingProxyType):
            assert not any(isinstance(item, (set, list, dict)) for item in value.values()), each.name


if __name__ == "__main__":
    write_draft_fields()
