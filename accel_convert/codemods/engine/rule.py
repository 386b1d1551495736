"""What a rule is: a code, a name, a cheap test, a transform, and its documented examples.

A rule is one module holding one :class:`Rule` subclass: a rewrite in ``codemods/rewrites/`` (run
in the registry's order) or a check in ``codemods/checks/`` (reports only, found by scanning the
folder). It imports the engine only, never another rule. Its module docstring is its documentation::

    ACC105 backward: route every ``X.backward(...)`` through the accelerator.

    Why it matters, in a paragraph or two.

and its :attr:`Rule.examples` are executable: each is a small script converted by the real
pipeline in ``tests/codemods/test_rule_examples.py``, and ``--list-codes``, ``--explain`` and
the pages of ``docs/codes/`` show them (the README's table of codes comes from the headlines), so
documentation and behaviour cannot drift apart.

Rules never print: ``transform`` returns the new tree and a list of :class:`Change`; only the CLI
talks to the terminal. Facts shared between rules are names (see
:mod:`codemods.engine.facts`), never node identities, because each rule works on a new tree.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any, ClassVar

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.records import record

if TYPE_CHECKING:
    from accel_convert.codemods.model.provider import RuleProvider

#: Reported by every rule that meets a call needing the accelerator where none is reachable.
NO_ACCELERATOR_ACCESS = "ACC904"
NO_ACCELERATOR_ACCESS_DOC = (
    "no-accelerator-access: a call that needs the accelerator where none is reachable "
    "(a static method, a class the file never constructs, code run before it exists, a module of "
    "training functions converted without the script that calls them)"
)


class _Script:
    """An example's script, written indented as it sits in the rule's class body, read as file
    text: the common indentation and the first newline removed on the first read, not when the
    rule's module is imported (every conversion imports every rule; only the docs and the tests
    read the examples, and dedenting them all at import cost about 3% of a one-file run)."""

    def __init__(self, *default: str) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.written, self.read = f"_{name}_written", f"_{name}_text"

    def __get__(self, example: object, owner: type | None = None) -> str:
        if example is None:
            if not self.default:
                raise AttributeError(self.written)  # a required field
            return self.default[0]
        text = example.__dict__.get(self.read)
        if text is None:
            text = example.__dict__[self.read] = textwrap.dedent(example.__dict__[self.written]).lstrip("\n")
        return text

    def __set__(self, example: object, written: str) -> None:
        example.__dict__[self.written] = written
        example.__dict__.pop(self.read, None)


@record(frozen=True)
class Example:
    """A complete script before conversion and what converting it gives: the whole converted
    script (for an automatic rewrite), or the exact message reported while the reported spot is
    left as it was (for a report), or with ``leaves_alone`` a script the rule does not touch.
    ``code`` is the code shown, when it is not the rule's own (one
    of its ``extra_codes``); ``oom_retry`` converts with ``--oom-retry``, ``target`` with
    ``--target``.

    Scripts may be written indented, as they sit in the rule's class body: the common indentation
    and the first newline are removed, so ``before`` and ``after`` are exactly the files' text.
    """

    before: str = _Script()  # type: ignore[assignment]
    after: str = _Script("")  # type: ignore[assignment]
    message: str = ""
    oom_retry: bool = False
    code: str = ""
    target: str = "runtime"
    #: What the rule leaves alone: its code is not reported on ``before``, and (for a rewrite)
    #: ``after`` is what the other rules make of it (none: the script stays as it is).
    leaves_alone: bool = False


class Rule:
    """Base class of the rules. Subclasses set the class attributes and implement ``transform``."""

    #: The code of the automatic rewrite (``ACC1xx``) or of the report (``ACC9xx``).
    code: ClassVar[str]
    #: A short kebab-case name, e.g. ``"backward"``.
    name: ClassVar[str]
    #: Further codes this module may report (usually ``ACC9xx`` warnings), code → one-line summary.
    extra_codes: ClassVar[dict[str, str]] = {}
    #: Those of ``extra_codes`` whose findings describe the script as written, a hazard whether or
    #: not the rule rewrites anything (a break on a per-process value): they are reported also on a
    #: script that is only reported on (one that distributes itself), where the rule's rewrite is
    #: switched off. The rule's other findings are about its rewrite and are not.
    reports_as_written: ClassVar[frozenset[str]] = frozenset()
    #: Former codes of this rule, each now several (one per reason): old code → the codes it
    #: stands for in ``--select``/``--ignore`` and the config, so an old setting keeps working.
    aliases: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: How a person fixes each finding the rule reports (``ACC9xx``): code → what to add or change
    #: in the script, shown on the code's page under "How to fix".
    fixes: ClassVar[dict[str, str]] = {}
    #: Small scripts showing the rule at work (see :class:`Example`).
    examples: ClassVar[tuple[Example, ...]] = ()
    #: The providers of the facts this rule alone reads (see :mod:`codemods.model.provider`): the
    #: analysis runs them in its one walk's providers; the rule reads ``facts.of(provider)``.
    providers: ClassVar[tuple[RuleProvider[Any], ...]] = ()

    @classmethod
    def reports_only(cls) -> bool:
        """A rule whose codes are all reports (``ACC9xx``): it never changes the script
        (``codemods.convert_module`` keeps the tree it received, whatever it returns)."""
        return not any(code.startswith("ACC1") for code in (cls.code, *cls.extra_codes))

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        """Cheap test run before ``transform``: False skips the pass (no tree walk at all)."""
        return True

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        raise NotImplementedError
