"""Shared helpers of the rule tests (not a test module itself: no test functions)."""

from __future__ import annotations

import textwrap

import libcst as cst

from codemods.engine.facts import ScriptFacts
from codemods.engine.model import Change, Options
from codemods.engine.rule import Rule

#: The imports the snippets use, as the analysis would resolve them.
IMPORTS = {
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "copy": "copy",
    "os": "os",
    "json": "json",
    "shutil": "shutil",
    "plt": "matplotlib.pyplot",
    "save_image": "torchvision.utils.save_image",
    "DataLoader": "torch.utils.data.DataLoader",
    "Accelerator": "runtime.Accelerator",
    "DDP": "torch.nn.parallel.DistributedDataParallel",
    "mp": "torch.multiprocessing",
    "GradScaler": "torch.cuda.amp.GradScaler",
    "autocast": "torch.cuda.amp.autocast",
}


def make_facts(**fields: object) -> ScriptFacts:
    """ScriptFacts as the analysis fills them for the snippets: one model, one optimizer..."""
    values: dict[str, object] = {
        "imports": dict(IMPORTS),
        "uses_torch": True,
        "models": {"model"},
        "optimizers": {"optimizer"},
        "schedulers": {"scheduler"},
        "train_loaders": {"train_loader"},
        "eval_loaders": {"test_loader"},
        "device_names": {"device"},
    }
    values.update(fields)
    return ScriptFacts(**values)  # type: ignore[arg-type]


def code(text: str) -> str:
    """A snippet written indented in the test table, as file text."""
    return textwrap.dedent(text).lstrip("\n")


def apply(
    codemod: Rule, source: str, facts: ScriptFacts, options: Options | None = None
) -> tuple[str, list[Change]]:
    """Run one codemod on source text; the output must parse again."""
    module, changes = codemod.transform(cst.parse_module(source), facts, options or Options())
    cst.parse_module(module.code)
    return module.code, changes


def assert_rewrites(
    codemod: Rule, before: str, after: str, facts: ScriptFacts, options: Options | None = None
) -> list[Change]:
    """The codemod turns ``before`` into exactly ``after``, and leaves ``after`` as it is."""
    output, changes = apply(codemod, code(before), facts, options)
    assert output == code(after)
    again, changes_again = apply(codemod, output, facts, options)
    assert again == output, "not idempotent"
    assert not [c for c in changes_again if c.fixed], changes_again
    return changes
