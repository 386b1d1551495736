"""The layers of ``accel_convert``: a module imports only from its own layer or a lower one, and no
modules import each other in a cycle.

:data:`LAYERS` is the one table of the order (docs/contributing.md, "Layers", says the same in
words). Every import counts, wherever it is written: at module level (``top``), inside a function
(``lazy``: it runs later, but the module still depends on what it imports) or under
``if TYPE_CHECKING:`` (``typing``: the types tie the two modules together just the same).

Run as a script for the report (every edge against the order, by kind, and every cycle)::

    python -m tests.test_layers
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "accel_convert"

#: Each layer, lowest first: its name and the modules (``.py``) and folders (``/``) it holds, as
#: paths inside ``accel_convert/``. A module belongs to the longest entry naming it or a folder
#: above it; every module must belong to one (the test says which do not).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The import name itself: the version, and nothing imported; and ``@record`` (records.py),
    # the converter's dataclasses made without compiling their methods (standard library only).
    ("package", ("__init__.py", "records.py")),
    # The distributed core converted scripts import: torch and the standard library only
    # (tests/test_import_rules.py); nothing of the converter side.
    ("runtime", ("runtime/",)),
    # Core: the syntax tree and names, with no idea of a training script's roles. Site, Change and
    # Options (model.py), the one walk's traversal, qualified names, original positions, the
    # tables of library names, what a loop iterates over, imports of local modules.
    (
        "core",
        (
            "codemods/engine/model.py",
            "codemods/engine/walk.py",
            "codemods/engine/syntax.py",
            "codemods/engine/names.py",
            "codemods/engine/name_flow.py",
            "codemods/engine/chosen_names.py",
            "codemods/engine/positions.py",
            "codemods/engine/torch_names.py",
            "codemods/engine/iteration.py",
            "codemods/engine/local_imports.py",
        ),
    ),
    # The facts and the questions asked of them: ScriptFacts, the seeds a program hands one of
    # its modules (names only) and the calls of imported functions read through them, the findings (the analysis reports at recorded sites too), and the owners of
    # the questions both the providers and the rules ask (what is a device, the accelerator's
    # code, a random draw).
    (
        "facts",
        (
            "codemods/engine/facts.py",
            "codemods/engine/program_seeds.py",
            "codemods/engine/imported_calls.py",
            "codemods/engine/findings.py",
            "codemods/engine/accelerator_code.py",
            "codemods/engine/devices.py",
            "codemods/engine/random_draws.py",
            "codemods/engine/loader_values.py",
        ),
    ),
    # The program model: the one walk and the providers that fill the facts (model/; the runner
    # runs the rules' own providers it is handed, never looking them up), and the cross-module
    # providers that read each module of a program for the seeds.
    (
        "program model",
        (
            "codemods/model/",
            "codemods/engine/program_shapes.py",
            "codemods/engine/program_calls.py",
            "codemods/engine/program_inheritance.py",
            "codemods/engine/program_roles.py",
        ),
    ),
    # The rule framework: the Rule base, the rule transformer and what rules share to change the
    # tree (parameters, arguments, imports, the accelerator's creation), the checks' one walk.
    (
        "rule framework",
        (
            "codemods/engine/rule.py",
            "codemods/engine/transformers.py",
            "codemods/engine/signatures.py",
            "codemods/engine/imports.py",
            "codemods/engine/accelerator_creation.py",
            "codemods/engine/check_walk.py",
        ),
    ),
    # The rules: one module (or package) per rewrite or check; none imports the registry.
    ("rules", ("codemods/rewrites/", "codemods/checks/")),
    # The registry: the rules in their run order (it imports them, so it sits above them).
    ("registry", ("codemods/engine/registry.py",)),
    # One module: analysed with every rule's providers, taken from the registry (analysis.py),
    # and converted by the rules in their order (convert_module).
    ("convert_module", ("codemods/engine/analysis.py", "codemods/__init__.py")),
    # The multi-module driver: the rounds over a program's modules, each converted by
    # convert_module.
    ("program driver", ("codemods/engine/program.py",)),
    # The command line, the pipeline, reporting, verification: the top.
    ("converter", ("converter/",)),
)

#: Imports still against the order, each (importer, imported) as paths inside ``accel_convert/``:
#: an import from a lower layer to a higher one, or the edge that closes a cycle among modules of
#: one layer (the graph without these has no cycle). The test fails on a violation not listed
#: here and on one listed here that is gone: remove it from the list when you fix it.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset(
    {
        # runtime: the OOM retry starts the ranks' agreement (imported only with several ranks),
        # which builds on the retry's own helpers (_reduced, _say, is_out_of_memory, ...): those
        # belong in a module below both.
        ("runtime/memory.py", "runtime/oom_agreement.py"),
        # converter: `verify` converts by running the CLI in this process, and the CLI hands the
        # `verify` subcommand to it; the conversion it runs belongs below both.
        ("converter/verify.py", "converter/cli.py"),
        # converter: the pipeline hands a notebook to notebook_dispatch.py, whose conversions
        # (notebooks.py, launcher_cells.py) convert the cells with the pipeline. Converting a
        # file's bytes (convert_source) belongs above the pipeline's script conversion.
        ("converter/pipeline.py", "converter/notebook_dispatch.py"),
    }
)


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``imported`` (paths inside accel_convert/) at ``line``, as ``kind``:
    ``top`` (module level), ``lazy`` (inside a function) or ``typing`` (under TYPE_CHECKING)."""

    importer: str
    imported: str
    line: int
    kind: str

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} -> {self.imported} ({self.kind})"


def module_paths() -> dict[str, str]:
    """Dotted module name → path inside accel_convert/, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent)
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = str(path.relative_to(PACKAGE))
    return found


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_with_kind(tree: ast.AST, kind: str = "top") -> Iterable[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement under ``tree`` with its kind (see :class:`Edge`)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, kind
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.body:
                yield from imports_with_kind(ast.Module(body=[child], type_ignores=[]), "typing")
            for child in node.orelse:
                yield from imports_with_kind(ast.Module(body=[child], type_ignores=[]), kind)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from imports_with_kind(node, "typing" if kind == "typing" else "lazy")
        else:
            yield from imports_with_kind(node, kind)


def imported_modules(
    node: ast.Import | ast.ImportFrom, name: str, is_package: bool, known: Mapping[str, str]
) -> list[str]:
    """The modules of the package ``node`` (in module ``name``) imports: ``from a.b import c`` is
    module ``a.b.c`` when there is one, else ``a.b``; the packages above an imported module are
    not counted (their ``__init__`` holds no layer's code that the import asks for)."""
    if isinstance(node, ast.Import):
        candidates = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = name.split(".") if is_package else name.split(".")[:-1]
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join([*parts, *([node.module] if node.module else [])])
        candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = []
    for candidate in candidates:
        while candidate and candidate not in known:
            candidate = candidate.rpartition(".")[0]
        if candidate and candidate != name and candidate not in found:
            found.append(candidate)
    return found


def import_graph() -> list[Edge]:
    """Every import of one module of accel_convert by another, with where and how."""
    known = module_paths()
    edges = []
    for name, path in known.items():
        tree = ast.parse((PACKAGE / path).read_text(encoding="utf-8"), filename=path)
        for node, kind in imports_with_kind(tree):
            for imported in imported_modules(node, name, path.endswith("__init__.py"), known):
                edges.append(Edge(path, known[imported], node.lineno, kind))
    return edges


def layer_of(path: str) -> int:
    """The index in :data:`LAYERS` of the longest entry naming ``path`` or a folder above it."""
    best: tuple[int, int] | None = None
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            if path == member or (member.endswith("/") and path.startswith(member)):
                if best is None or len(member) > best[0]:
                    best = (len(member), index)
    if best is None:
        raise LookupError(f"{path} is in no layer of LAYERS")
    return best[1]


def violations(edges: Iterable[Edge]) -> list[Edge]:
    """The edges from a lower layer to a higher one."""
    return [edge for edge in edges if layer_of(edge.importer) < layer_of(edge.imported)]


def cycles(edges: Iterable[Edge]) -> list[list[str]]:
    """The groups of modules that import each other in a cycle (strongly connected components of
    more than one module), each sorted, found with Tarjan's algorithm."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(groups)


def test_every_module_has_a_layer() -> None:
    unplaced = []
    for path in module_paths().values():
        try:
            layer_of(path)
        except LookupError:
            unplaced.append(path)
    assert len(module_paths()) > 100, "the package moved: this test would check nothing"
    assert unplaced == []


def test_the_graph_sees_every_kind_of_import() -> None:
    """The graph this test judges holds imports at module level, in functions and for types."""
    kinds = {edge.kind for edge in import_graph()}
    assert kinds == {"top", "lazy", "typing"}


def problems(edges: list[Edge], known: frozenset[tuple[str, str]]) -> list[str]:
    """What is wrong with ``edges`` given the ``known`` violations: an import against the layers
    not listed, a cycle among the edges not listed, a listed violation that is gone."""
    found = {(edge.importer, edge.imported) for edge in violations(edges)}
    in_cycles = {
        (edge.importer, edge.imported)
        for edge in edges
        if any({edge.importer, edge.imported} <= set(group) for group in cycles(edges))
    }
    wrong = [
        f"against the layers (see LAYERS): {edge}"
        for edge in violations(edges)
        if (edge.importer, edge.imported) not in known
    ]
    remaining = [edge for edge in edges if (edge.importer, edge.imported) not in known]
    wrong.extend(f"modules importing each other in a cycle: {', '.join(group)}" for group in cycles(remaining))
    wrong.extend(f"fixed, remove from KNOWN_VIOLATIONS: {pair}" for pair in sorted(known - found - in_cycles))
    return wrong


def test_a_violation_a_cycle_and_a_fixed_one_are_found() -> None:
    """The check below can fail: an upward import, a cycle, and a listed violation that is gone."""
    upward = Edge("codemods/engine/syntax.py", "codemods/model/state.py", 1, "lazy")
    downward = Edge("codemods/model/state.py", "codemods/engine/syntax.py", 1, "top")
    assert violations([upward, downward]) == [upward]
    assert cycles([upward, downward]) == [["codemods/engine/syntax.py", "codemods/model/state.py"]]
    assert problems([upward, downward], frozenset()) == [
        f"against the layers (see LAYERS): {upward}",
        "modules importing each other in a cycle: codemods/engine/syntax.py, codemods/model/state.py",
    ]
    assert problems([upward, downward], frozenset({("codemods/engine/syntax.py", "codemods/model/state.py")})) == []
    # One layer: a cycle is a violation, listed by the edge that closes it.
    there = Edge("converter/cli.py", "converter/verify.py", 1, "lazy")
    back = Edge("converter/verify.py", "converter/cli.py", 1, "lazy")
    assert problems([there, back], frozenset({("converter/verify.py", "converter/cli.py")})) == []
    assert problems([there], frozenset({("converter/verify.py", "converter/cli.py")})) == [
        "fixed, remove from KNOWN_VIOLATIONS: ('converter/verify.py', 'converter/cli.py')"
    ]
    assert problems([downward], frozenset()) == []


def test_imports_follow_the_layers() -> None:
    wrong = problems(import_graph(), KNOWN_VIOLATIONS)
    assert not wrong, "\n".join(wrong)


def documented_layers(page: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The table of the "Layers" section of ``page`` as :data:`LAYERS` holds it; a member named
    without a folder (`walk.py` after `codemods/engine/model.py`) is in the folder of the one before."""
    section = page.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    table = []
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if not row.startswith("|") or cells[0] in ("layer", "---"):
            continue
        members, folder = [], ""
        for name in re.findall(r"`([^`]+)`", cells[1]):
            full = name if "/" in name or not folder else folder + name
            folder = full.rpartition("/")[0] + "/" if "/" in full else ""
            members.append(full)
        table.append((cells[0], tuple(members)))
    return tuple(table)


def test_the_contributing_guide_lists_the_same_layers() -> None:
    page = (PACKAGE.parent / "docs" / "contributing.md").read_text(encoding="utf-8")
    assert documented_layers(page) == LAYERS


def report() -> str:
    """Every edge against the order, by kind, and every cycle."""
    edges = import_graph()
    lines = []
    for kind in ("top", "lazy", "typing"):
        against = [edge for edge in violations(edges) if edge.kind == kind]
        lines.append(f"{kind} imports against the layers: {len(against)}")
        lines.extend(f"  {edge}" for edge in against)
    found = cycles(edges)
    lines.append(f"cycles: {len(found)}")
    for group in found:
        members = set(group)
        lines.append("  " + ", ".join(group))
        lines.extend(f"    {edge}" for edge in edges if edge.importer in members and edge.imported in members)
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
