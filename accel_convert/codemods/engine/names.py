"""A cheap import-alias resolver: which qualified name does ``nn.utils.clip_grad_norm_`` denote?

libcst's QualifiedNameProvider answers this through a full scope analysis that costs several times
a parse; the codemods only need one thing from it — "is this dotted expression something imported,
and what?" — so this module answers that with one visitor pass:

* every ``import a.b as c`` / ``from a import b as c`` records a binding in its scope;
* every other binding of a name in a scope (assignment, parameter, ``for`` target, ``def``,
  ``class``, ``with ... as``, ``except ... as``) *shadows* it there, so ``optim = optim.SGD(...)``
  at module level makes ``optim`` ambiguous, and we answer "not an import" (libcst would answer
  both names; the codemods must not guess);
* lookups follow Python's rules: the enclosing function scopes, then the module; class bodies are
  not visible from the methods inside them; ``global``/``nonlocal`` send a name to the outer scope.

Scopes are identified by the path of enclosing ``def``/``class`` names (``("Net", "forward")``), which
stays the same from one codemod pass to the next, so the table built by the analysis serves every
pass. Comprehensions and lambdas are folded into the enclosing scope: they practically never rebind an
imported module name.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import field
from typing import Literal

import libcst as cst

from accel_convert.codemods.engine.walk import walk
from accel_convert.records import record

#: Enclosing ``def``/``class`` names, outermost first; ``()`` is the module.
ScopeKey = tuple[str, ...]
#: Python's builtin names (``print``, ``len``, ``open``, ``KeyboardInterrupt``), with those the
#: ``site`` module adds (absent under ``python -S``).
BUILTIN_NAMES = frozenset(dir(builtins)) | {"exit", "quit", "help", "copyright", "credits", "license"}
ScopeKind = Literal["module", "class", "function"]


@record()
class Scope:
    """The names one scope binds: imports (name → qualified name) and names bound otherwise."""

    kind: ScopeKind
    imports: dict[str, str] = field(default_factory=dict)
    #: Names also bound by something other than that one import (or by two different imports).
    shadowed: set[str] = field(default_factory=set)
    #: Names declared ``global`` / ``nonlocal`` here: they live in an outer scope.
    outer_names: set[str] = field(default_factory=set)
    #: The ``global`` ones among them.
    global_names: set[str] = field(default_factory=set)
    #: Names bound to another name or attribute chain (``optim_name = optim.SGD``) → those
    #: chains, as written.
    aliases: dict[str, set[str]] = field(default_factory=dict)
    #: Names also bound by something that is neither an import nor such an alias.
    others: set[str] = field(default_factory=set)

    def bind_import(self, name: str, qualified: str) -> None:
        if name in self.outer_names:
            return
        previous = self.imports.setdefault(name, qualified)
        if previous != qualified:
            self.shadowed.add(name)

    def bind_other(self, name: str) -> None:
        if name not in self.outer_names:
            self.shadowed.add(name)
            self.others.add(name)

    def bind_alias(self, name: str, value: str) -> None:
        if name not in self.outer_names:
            self.shadowed.add(name)
            self.aliases.setdefault(name, set()).add(value)

    def binds(self, name: str) -> bool:
        return name not in self.outer_names and (name in self.imports or name in self.shadowed)


@record()
class NameTable:
    """Every scope of a module and what it binds; answers qualified-name questions."""

    scopes: dict[ScopeKey, Scope] = field(default_factory=lambda: {(): Scope("module")})

    def resolve(
        self, name: str, scope: ScopeKey, *, strict: bool = True, seen: frozenset[str] = frozenset()
    ) -> str | None:
        """The qualified name ``name`` denotes when used in ``scope``, if it is an import.

        ``strict``: a name the scope also binds otherwise is not an import (the safe answer for
        rewriting calls). Not strict: the import is returned anyway — what the analysis wants for
        ``optim = optim.SGD(...)``, where ``optim.SGD`` on the right still is the import — and a
        name bound only to imports (``optim_name = optim.SGD``) denotes what they name (see
        :meth:`_aliased`).
        """
        key = scope
        while True:
            found = self.scopes.get(key)
            # A class body's names are visible inside the class body only, not in its methods.
            if found is not None and (key == scope or found.kind != "class") and found.binds(name):
                if strict and name in found.shadowed:
                    return None
                if name not in found.imports and name not in found.others and name in found.aliases:
                    return self._aliased(found.aliases[name], key, seen)
                return found.imports.get(name)
            if not key:
                return None
            key = key[:-1]

    def _aliased(self, values: AbstractSet[str], scope: ScopeKey, seen: frozenset[str]) -> str | None:
        """What a name bound only to the chains ``values`` in ``scope`` denotes: the one import
        they all resolve to (``optim_name = optim.SGD``, and ``optim_name = FusedSGD`` in a branch
        where ``FusedSGD`` is bound nowhere, a name error rather than another class); None when
        two differ or one is bound to something other than an import."""
        resolved: set[str] = set()
        for value in values:
            head, _, rest = value.partition(".")
            if head in seen:
                return None
            if not self.is_bound(head, scope):
                if head in BUILTIN_NAMES:
                    return None
                continue
            root = self.resolve(head, scope, strict=False, seen=seen | {head})
            if root is None:
                return None
            resolved.add(f"{root}.{rest}" if rest else root)
        return resolved.pop() if len(resolved) == 1 else None

    def is_bound(self, name: str, scope: ScopeKey) -> bool:
        """Whether any scope visible from ``scope`` binds ``name`` (else it is a builtin)."""
        return self.binding_scope(name, scope) is not None

    def binding_scope(self, name: str, scope: ScopeKey) -> ScopeKey | None:
        """The scope whose binding ``name`` denotes when used in ``scope`` (the function a nested
        ``def`` is written in, for a call of it there or in another function nested beside it);
        None for a builtin or an unbound name."""
        key = scope
        while True:
            found = self.scopes.get(key)
            if found is not None and (key == scope or found.kind != "class") and found.binds(name):
                return key
            if not key:
                return None
            key = key[:-1]

    def builtin(self, node: cst.BaseExpression, scope: ScopeKey = ()) -> str | None:
        """The builtin ``node`` denotes in ``scope`` (see :func:`builtin_named`)."""
        return builtin_named(node, self, scope)

    def qualified_name(self, node: cst.BaseExpression, scope: ScopeKey = (), *, strict: bool = True) -> str | None:
        """``nn.utils.clip_grad_norm_`` → ``torch.nn.utils.clip_grad_norm_`` when ``nn`` is
        ``torch.nn`` in ``scope``; None for anything not rooted in an import."""
        chain = _chain(node)
        if chain is None:
            return None
        head, _, rest = chain.partition(".")
        root = self.resolve(head, scope, strict=strict)
        if root is None:
            return None
        return f"{root}.{rest}" if rest else root

    def imported_names(self) -> dict[str, str]:
        """Module-level name → qualified name for every unshadowed import."""
        module = self.scopes[()]
        return {name: qualified for name, qualified in module.imports.items() if name not in module.shadowed}

    def any_import_of(self, qualified: str) -> bool:
        """Whether some scope imports ``qualified`` (or something inside it)."""
        return any(
            value == qualified or value.startswith(qualified + ".")
            for scope in self.scopes.values()
            for value in scope.imports.values()
        )


def builtin_named(node: cst.BaseExpression, names: NameTable | None, scope: ScopeKey = ()) -> str | None:
    """The builtin ``node`` refers to where it is used, by what it is rather than how it is written:
    ``"print"`` for ``print`` in a scope that sees no binding of its own of that name (no ``def
    print``, ``print = ...``, ``from rich import print``, parameter named ``print``), and for
    ``builtins.print``; None for anything else, a shadowed builtin included. ``names`` None (facts
    built by hand, a syntax-only question): a builtin's plain name is taken as the builtin."""
    if type(node) is cst.Name:
        name = node.value
        if name not in BUILTIN_NAMES or (names is not None and names.is_bound(name, scope)):
            return None
        return name
    qualified = names.qualified_name(node, scope) if names is not None else None
    head, _, tail = (qualified or "").partition(".")
    return tail if head == "builtins" and tail in BUILTIN_NAMES else None


#: "Which builtin does this expression denote where it is used?" (``"len"``; None for anything
#: else, a name the script binds itself included), asked for one scope: what a helper reading an
#: expression without knowing where it stands is handed (:func:`builtins_at`,
#: ``RuleTransformer.builtin``, ``ScriptFacts.builtins_at``).
BuiltinOf = Callable[[cst.BaseExpression], "str | None"]


def builtins_at(names: NameTable | None, scope: ScopeKey = ()) -> BuiltinOf:
    """:func:`builtin_named` for expressions used in ``scope``."""
    return lambda node: builtin_named(node, names, scope)


def is_builtin(node: cst.BaseExpression, name: str, names: NameTable | None, scope: ScopeKey = ()) -> bool:
    """Whether ``node`` is the builtin ``name`` where it is used (see :func:`builtin_named`)."""
    return builtin_named(node, names, scope) == name


def dotted_module(node: cst.BaseExpression) -> str:
    """``a.b.c`` as written in an import statement."""
    if isinstance(node, cst.Name):
        return node.value
    assert isinstance(node, cst.Attribute)
    return f"{dotted_module(node.value)}.{node.attr.value}"


class NameCollector(cst.CSTVisitor):
    """Fills a :class:`NameTable`. Subclasses (the analysis) extend the visit methods and read
    :attr:`scope` to know where they are."""

    def __init__(self, star_imports: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.names = NameTable()
        self.scope: ScopeKey = ()
        #: What a ``from <module of the program> import *`` binds of that module's own imports
        #: (``sys`` → ``sys``, ``np`` → ``numpy``): the program's seeds know it, this module does not.
        self.star_imports = star_imports or {}
        #: The name the assignment being visited binds to a name or attribute chain, and that
        #: chain (``optim_name = optim.SGD``): an alias, not an unknown value.
        self._alias: tuple[str, str] | None = None

    # -- scopes -------------------------------------------------------------------------------

    def _current(self) -> Scope:
        return self.names.scopes[self.scope]

    def _shadow(self, name: str) -> None:
        """Bind ``name`` by something other than an import, where Python binds it: in the
        current scope, in the module for a ``global``, in the enclosing function for a ``nonlocal``."""
        scope = self._current()
        if name in scope.global_names:
            self.names.scopes[()].bind_other(name)
        elif name in scope.outer_names:
            key = self.scope[:-1]
            while key and not self.names.scopes[key].binds(name):
                key = key[:-1]
            self.names.scopes[key].bind_other(name)
        elif self._alias is not None and self._alias[0] == name:
            scope.bind_alias(name, self._alias[1])
        else:
            scope.bind_other(name)

    def _enter(self, name: str, kind: ScopeKind) -> None:
        self._shadow(name)
        self.scope = (*self.scope, name)
        self.names.scopes.setdefault(self.scope, Scope(kind))

    def _leave(self) -> None:
        self.scope = self.scope[:-1]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._enter(node.name.value, "function")

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._leave()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._enter(node.name.value, "class")

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._leave()

    def visit_Global(self, node: cst.Global) -> None:
        names = [item.name.value for item in node.names]
        self._current().outer_names.update(names)
        self._current().global_names.update(names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self._current().outer_names.update(item.name.value for item in node.names)

    # -- imports ------------------------------------------------------------------------------

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            module = dotted_module(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._current().bind_import(alias.asname.name.value, module)
            else:
                # ``import torch.nn`` binds ``torch`` (to the package ``torch``).
                top = module.split(".")[0]
                self._current().bind_import(top, top)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            for bound, qualified in self.star_imports.items():
                self._current().bind_import(bound, qualified)
        if node.relative or node.module is None:
            # Relative imports name the script's own package: not something we match.
            if not isinstance(node.names, cst.ImportStar):
                for alias in node.names:
                    self._shadow(_alias_local_name(alias))
            return
        if isinstance(node.names, cst.ImportStar):
            return
        module = dotted_module(node.module)
        for alias in node.names:
            self._current().bind_import(_alias_local_name(alias), f"{module}.{dotted_module(alias.name)}")

    # -- other bindings shadow -----------------------------------------------------------------

    def visit_Param(self, node: cst.Param) -> None:
        self._shadow(node.name.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.note_alias(node)

    def note_alias(self, node: cst.Assign) -> None:
        """Note ``name = a.b`` (one target, a name or attribute chain as the value) for the
        binding its target makes; subclasses overriding :meth:`visit_Assign` call this."""
        self._alias = None
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            value = _chain(node.value)
            if value is not None:
                self._alias = (node.targets[0].target.value, value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._bind_target(node.target)
        self._alias = None

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind_target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind_target(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind_target(node.asname.name)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self._bind_target(node.name.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind_target(node.target)

    def _bind_target(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self._shadow(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind_target(element.value)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value)


def _chain(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a name or attribute chain, else None."""
    parts: list[str] = []
    # ``type() is``: a failed isinstance against a libcst class (an ABC) costs a Python-level
    # ``__instancecheck__``, and this is asked of some 500 expressions per conversion.
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name:
        return None
    return ".".join([node.value, *reversed(parts)])


def _alias_local_name(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return dotted_module(alias.name).split(".")[0]


def collect_names(module: cst.Module) -> NameTable:
    """The name table of a module (one visitor pass, no metadata)."""
    collector = NameCollector()
    walk(module, collector)
    return collector.names
