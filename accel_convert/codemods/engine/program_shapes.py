"""What each module of a program looks like, read once from its syntax (:mod:`codemods.engine.program`):
its module-level functions and classes with their parameters, what its functions return, which
program modules it imports and re-exports; and which functions a conversion gave the accelerator
parameter."""

from __future__ import annotations

import ast
from dataclasses import field

import libcst as cst

from accel_convert.codemods.engine.iteration import iterated
from accel_convert.codemods.engine.local_imports import absolute_module
from accel_convert.codemods.engine.positions import python_ast
from accel_convert.codemods.engine.syntax import dotted, nodes_in, parameter_names
from accel_convert.records import record


@record()
class ModuleShape:
    """What one module looks like, read once (syntax only)."""

    #: Module-level function → its parameter names, and which of them are positional.
    params: dict[str, tuple[str, ...]]
    positional: dict[str, tuple[str, ...]]
    #: Module-level function → first and last line.
    extents: dict[str, tuple[int, int]]
    #: Module-level function → returned expressions' top-level elements (names or calls).
    returns: dict[str, list[cst.BaseExpression]]
    #: Binding → absolute qualified name, for relative imports (``from .utils import x``).
    relative: dict[str, str]
    #: Program modules this module imports.
    imports: set[str]
    #: Module-level classes with an ``__init__`` (listed in ``params`` by their constructor's
    #: parameters, ``self`` left out).
    classes: set[str] = field(default_factory=set)
    #: Module-level ``from <program module> import name [as bound]``: bound → qualified name of
    #: what it names there (a package's ``__init__`` re-exporting ``from .engine import train``).
    reexports: dict[str, str] = field(default_factory=dict)
    #: Program modules this module star-imports (``from .engine import *``).
    star_imports: list[str] = field(default_factory=list)
    #: Module-level imports of what lies outside the program: bound → qualified name (``sys`` →
    #: ``sys``, ``np`` → ``numpy``, ``save_image`` → ``torchvision.utils.save_image``), which a
    #: ``from <this module> import *`` binds too, unless the module lists ``__all__``.
    library_imports: dict[str, str] = field(default_factory=dict)
    #: Whether the module binds ``__all__`` at the top level (what ``*`` takes is then its list).
    lists_all: bool = False
    #: Module-level class → its methods → their parameters after the instance, and how many of
    #: them are positional (``early_stopping(val_loss, model)`` fills ``__call__``'s).
    methods: dict[str, dict[str, tuple[tuple[str, ...], int]]] = field(default_factory=dict)


class ShapeReader(cst.CSTVisitor):
    """Reads one module's :class:`ModuleShape` (``shape``) in one walk: ``name`` is the module's
    dotted name, ``program`` the names of the program's modules."""

    def __init__(self, name: str, is_package: bool, program: set[str]) -> None:
        super().__init__()
        self.name, self.is_package, self.program = name, is_package, program
        self.depth = 0
        self.current: str | None = None
        self.shape = ModuleShape({}, {}, {}, {}, {}, set())

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.depth += 1
        if self.depth == 1:
            params = node.params
            self.current = node.name.value
            self.shape.params[node.name.value] = parameter_names(node)
            self.shape.positional[node.name.value] = tuple(
                p.name.value for p in [*params.posonly_params, *params.params]
            )
            self.shape.returns.setdefault(node.name.value, [])

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.current = None

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.depth == 0:
            # Constructing a class calls its ``__init__``: arguments fill its parameters (after
            # ``self``) as a function call's do, and a training class gains the accelerator there.
            init = next(
                (
                    line
                    for line in (node.body.body if isinstance(node.body, cst.IndentedBlock) else ())
                    if isinstance(line, cst.FunctionDef) and line.name.value == "__init__"
                ),
                None,
            )
            methods = self.shape.methods.setdefault(node.name.value, {})
            for line in node.body.body if isinstance(node.body, cst.IndentedBlock) else ():
                if isinstance(line, cst.FunctionDef):
                    positional = [*line.params.posonly_params, *line.params.params][1:]
                    every = [*positional, *line.params.kwonly_params]
                    methods[line.name.value] = (tuple(p.name.value for p in every), len(positional))
            if init is not None:
                params = init.params
                every = [*params.posonly_params, *params.params, *params.kwonly_params][1:]
                positional = [*params.posonly_params, *params.params][1:]
                self.shape.params[node.name.value] = tuple(p.name.value for p in every)
                self.shape.positional[node.name.value] = tuple(p.name.value for p in positional)
                self.shape.classes.add(node.name.value)
        self.depth += 1

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.depth -= 1

    def visit_Return(self, node: cst.Return) -> None:
        if self.current is not None and self.depth == 1 and node.value is not None:
            value = node.value
            elements = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else [value]
            self.shape.returns[self.current].extend(elements)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name) or ""
            parts = full.split(".")
            self.shape.imports.update(
                p for p in (".".join(parts[: i + 1]) for i in range(len(parts))) if p in self.program
            )
            if self.depth == 0 and parts[0] not in self.program:
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    self.shape.library_imports[alias.asname.name.value] = full
                else:
                    self.shape.library_imports[parts[0]] = parts[0]  # ``import a.b`` binds ``a``

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if self.depth == 0 and isinstance(node.target, cst.Name) and node.target.value == "__all__":
            self.shape.lists_all = True

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted(node.module) if node.module is not None else None
        base = absolute_module(module, len(node.relative), self.name, self.is_package)
        if base is None:
            return
        if base in self.program:
            self.shape.imports.add(base)
        if isinstance(node.names, cst.ImportStar):
            if base in self.program and self.depth == 0:
                self.shape.star_imports.append(base)
            return
        for alias in node.names:
            imported = dotted(alias.name) or ""
            full = f"{base}.{imported}" if base else imported
            if full in self.program:
                self.shape.imports.add(full)
            bound = alias.asname.name if alias.asname is not None else alias.name
            if not isinstance(bound, cst.Name):
                continue
            if node.relative:
                self.shape.relative[bound.value] = full
            if base in self.program and self.depth == 0:
                self.shape.reexports[bound.value] = full
            elif self.depth == 0 and not node.relative and base.split(".")[0] not in self.program:
                self.shape.library_imports[bound.value] = full


def function_extents(source: str | bytes | None, module: cst.Module) -> dict[str, tuple[int, int]]:
    tree = python_ast(source if source is not None else module.code)
    if tree is None:
        return {}
    return {
        node.name: (min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def iterates_parameters(module: cst.Module, function: str) -> bool:
    """Whether the module-level ``function`` loops over one of its parameters (``for x, y in
    train_loader``, through ``enumerate``/``tqdm``/``zip``): data its caller hands it."""
    definition = next(
        (node for node in module.body if isinstance(node, cst.FunctionDef) and node.name.value == function), None
    )
    if definition is None:
        return False
    params = set(parameter_names(definition))
    for node in nodes_in(definition.body):
        if isinstance(node, (cst.For, cst.CompFor)):
            if dotted(iterated(node.iter, through_any_call=True)) in params:
                return True
    return False


def _within(extent: tuple[int, int] | None, line: int) -> bool:
    return extent is not None and extent[0] <= line <= extent[1]


def function_at(shape: ModuleShape, line: int) -> str:
    return next((name for name, extent in shape.extents.items() if _within(extent, line)), "<module>")


def accelerator_parameters(
    name: str, before: ModuleShape, after: cst.Module, accelerator: str = "accelerator"
) -> dict[str, int | None]:
    """Module-level functions that gained the accelerator parameter in the conversion →
    its positional index (None: keyword-only), keyed by qualified name."""
    visitor = ShapeReader(name, False, set())
    after.visit(visitor)
    found: dict[str, int | None] = {}
    for function, params in visitor.shape.params.items():
        if accelerator in params and accelerator not in before.params.get(function, ()):
            positional = visitor.shape.positional[function]
            found[f"{name}.{function}"] = positional.index(accelerator) if accelerator in positional else None
    return found


def bindable_accelerator_parameters(
    name: str, after: cst.Module, taking: dict[str, int | None], accelerator: str = "accelerator"
) -> set[str]:
    """Of ``taking`` (from :func:`accelerator_parameters`), the functions of module ``name`` whose
    accelerator parameter is keyword-only or the last positional one: a value of one can carry it
    (``functools.partial(f, accelerator=accelerator)``)."""
    visitor = ShapeReader(name, False, set())
    after.visit(visitor)
    return {
        qualified
        for qualified, index in taking.items()
        if qualified.rpartition(".")[0] == name
        and (index is None or visitor.shape.positional[qualified.rpartition(".")[2]][-1:] == (accelerator,))
    }
