"""codemods.names (the cheap import-alias resolver) gives libcst's QualifiedNameProvider's answer.

The converter must not run libcst's scope analysis (it costs several parses), so the resolver is
checked against it here: on every fixture and on snippets built to trip it, every Name and
Attribute that libcst resolves to exactly one imported name resolves to that name, and every
other one resolves to nothing (shadowed, local or builtin names are never taken for imports).
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, QualifiedNameProvider, QualifiedNameSource

from accel_convert.codemods.engine.names import NameTable, ScopeKey, collect_names
from accel_convert.codemods.engine.syntax import dotted
from tests.launching import REPO_ROOT

FIXTURES = sorted(p for p in (REPO_ROOT / "fixtures" / "cases").glob("*.py") if b"torch" in p.read_bytes())

SNIPPETS = {
    "aliases": "import torch.nn as nn\nfrom torch.nn.utils import clip_grad_norm_ as clip\nclip(nn.utils.x)\n",
    "optimizer named optim": "import torch.optim as optim\noptim = optim.SGD([], lr=1)\noptim.step()\n",
    "local shadows in function": (
        "import torch\ndef f(torch):\n    return torch.zeros(1)\ndef g():\n    return torch.ones(1)\n"
    ),
    "class body not visible in methods": (
        "import numpy as np\nclass A:\n    np = 3\n    x = np\n    def m(self):\n        return np.zeros(1)\n"
    ),
    "function-local import": "def main():\n    import torch.distributed as dist\n    dist.init_process_group()\n",
    "global declaration": (
        "import torch\ndef f():\n    global torch\n    torch = None\ndef g():\n    torch.zeros(1)\n"
    ),
    "two different imports": "import torch as t\nimport numpy as t\nt.zeros(1)\n",
    "for target and with": (
        "import torch\nfrom tqdm import tqdm\nfor tqdm in []:\n    pass\nwith open('f') as torch:\n    torch.read()\n"
    ),
}


class _Walker(cst.CSTVisitor):
    """Every Name/Attribute outside import statements, with the scope key it is used in."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.scope: ScopeKey = ()
        self.inner: cst.CSTNode | None = None
        self.found: list[tuple[cst.BaseExpression, ScopeKey, str | None]] = []

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scope = (*self.scope, node.name.value)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scope = self.scope[:-1]

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scope = (*self.scope, node.name.value)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scope = self.scope[:-1]

    def visit_Name(self, node: cst.Name) -> None:
        if node is not self.inner:
            self._record(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        # Whole dotted chains only (``nn.utils.clip_grad_norm_``, not its ``nn.utils``): that is
        # what the codemods ask about. libcst also names attributes of call results
        # (``torch.Generator().manual_seed``), which are not imports: not compared.
        if dotted(node) is None:
            return True
        self._record(node)
        return False

    def _record(self, node: cst.BaseExpression) -> None:
        names = self.get_metadata(QualifiedNameProvider, node, set())
        answer = None
        if len(names) == 1:
            (only,) = names
            if only.source is QualifiedNameSource.IMPORT:
                answer = only.name
        self.found.append((node, self.scope, answer))


def disagreements(source: str) -> tuple[list[str], int]:
    """Where the two answers differ, and how many imported names both found."""
    module = cst.parse_module(source)
    table: NameTable = collect_names(module)
    walker = _Walker()
    MetadataWrapper(module, unsafe_skip_copy=True).visit(walker)
    assert walker.found, "nothing was compared"
    wrong = []
    for node, scope, expected in walker.found:
        ours = table.qualified_name(node, scope)
        if ours != expected:
            wrong.append(f"{module.code_for_node(node)} in {scope or 'module'}: ours {ours}, libcst {expected}")
    return wrong, sum(1 for _, _, expected in walker.found if expected is not None)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_resolver_agrees_with_libcst_on_fixtures(fixture: Path) -> None:
    wrong, resolved = disagreements(fixture.read_text(encoding="utf-8"))
    assert wrong == []
    assert resolved > 0, "no imported name was compared"


@pytest.mark.parametrize("source", SNIPPETS.values(), ids=SNIPPETS.keys())
def test_resolver_agrees_with_libcst_on_tricky_snippets(source: str) -> None:
    assert disagreements(source)[0] == []


@pytest.mark.parametrize(
    ("source", "scope", "expression", "expected"),
    [
        ("from torch.nn.utils import clip_grad_norm_ as clip\n", (), "clip", "torch.nn.utils.clip_grad_norm_"),
        ("import torch.nn as nn\n", (), "nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm_"),
        ("import torch\n", (), "torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm_"),
        ("import torch.optim as optim\noptim = optim.SGD()\n", (), "optim.step", None),
        ("def f():\n    from torch import optim\n", ("f",), "optim.Adam", "torch.optim.Adam"),
        ("def f():\n    from torch import optim\n", (), "optim.Adam", None),
    ],
)
def test_resolver_answers(source: str, scope: ScopeKey, expression: str, expected: str | None) -> None:
    table = collect_names(cst.parse_module(source))
    assert table.qualified_name(cst.parse_expression(expression), scope) == expected


def test_lenient_lookup_still_sees_the_import_behind_an_assignment() -> None:
    """``optim = optim.SGD(...)``: the analysis must still recognise the optimizer constructor."""
    table = collect_names(cst.parse_module("import torch.optim as optim\noptim = optim.SGD([], lr=1)\n"))
    node = cst.parse_expression("optim.SGD")
    assert table.qualified_name(node, ()) is None
    assert table.qualified_name(node, (), strict=False) == "torch.optim.SGD"


ALIASES = "import torch.optim as optim\noptim_name = optim.SGD\n"


@pytest.mark.parametrize(
    ("source", "scope", "expected"),
    [
        # A re-identification baseline's ``optim_name = optim.SGD``, then ``optim_name([...])``.
        (ALIASES, (), "torch.optim.SGD"),
        (ALIASES + "def train():\n    pass\n", ("train",), "torch.optim.SGD"),
        # The fused class under a flag is never imported: a name error there, not another class.
        (ALIASES + "if flag:\n    optim_name = FusedSGD\n", (), "torch.optim.SGD"),
        (ALIASES + "if flag:\n    optim_name = optim.Adam\n", (), None),
        (ALIASES + "if flag:\n    optim_name = make_optimizer()\n", (), None),
        ("optim_name = print\n", (), None),
        ("a = b\nb = a\n", (), None),
        ("class Net:\n    pass\noptim_name = Net\n", (), None),
    ],
)
def test_lenient_lookup_follows_a_name_bound_to_an_import(source: str, scope: ScopeKey, expected: str | None) -> None:
    """``optim_name = optim.SGD``: the analysis sees the optimizer class behind the name, where
    every binding of it that names something names that one import; rewrites (strict) do not."""
    table = collect_names(cst.parse_module(source))
    name = "b" if source.startswith("a = b") else "optim_name"
    assert table.qualified_name(cst.parse_expression(name), scope, strict=False) == expected
    assert table.qualified_name(cst.parse_expression(name), scope) is None
