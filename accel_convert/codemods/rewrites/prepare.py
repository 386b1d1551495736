"""ACC103 prepare: pass models, optimizers, loaders and schedulers through ``accelerator.prepare``.

One ``x, y, ... = accelerator.prepare(x, y, ...)`` goes right after the last of them is built and
before the training starts: models are wrapped in DistributedDataParallel, loaders are sharded so
each process sees its own part of the data, optimizers and schedulers learn about accumulation.
Schedulers need care (Accelerate issues 2926 and 1398, transformers PR 24088):

* one stepped every batch is built before ``prepare`` and prepared, so a length taken from
  ``len(train_loader)`` and the steps it counts agree over the whole run;
* one stepped once per epoch (``StepLR`` after each epoch) is *not* prepared: the prepared
  scheduler would step ``num_processes`` times per call.

Several models and optimizers (a GAN's generator and discriminator) go into the same call. A
DataLoader wrapped in another class (``train_dl = DeviceDataLoader(train_dl, device)``) is
prepared right before the wrap: ``prepare`` passes objects it does not know through unchanged. So
is a loader an iterator is taken from before the ``prepare`` (``it = iter(train_loader)``, the
re-ID baseline's ``DGloader_iter = enumerate(dataloaders['DG'])`` of an entry added to a dict of
loaders under a flag, prepared in that branch): the iterator reads the loader it was given.
A model and optimizer a helper returns together (``return model, SGD(model.parameters())``) are
prepared where the caller unpacks them (``model, opt = build()``), where training runs. Loaders
are sharded for a model to train or evaluate on: a script with no model that only reads a loader
(dataset statistics summed batch by batch) leaves it unprepared, so each process reads it whole
and prints what the original prints.

A second model built once the first one's training is over and trained in its own loop (a
teacher then a student, two models compared one after the other) gets its own ``prepare``, with
its optimizer and scheduler, right after the last of them is built; the loader, prepared once
already, stays as it is. A model built again under the same name after training (reloaded for
inference) is moved to the device of the prepared batches instead, and so is a model first built
after training that is only evaluated over a prepared loader (``best = Net()``, loaded from a
checkpoint, with or without ``best.eval()``; in a training class's method, to
``self.accelerator.device``). A helper that builds its own loader (``def test(path): loader =
DataLoader(test_set)``), called where the accelerator exists (once training is over, or during it:
``validate(model)`` each epoch), has it prepared where it is built, so its evaluation is sharded
and gathered as the home block's is, not read whole by every process.

A model handed to a function that trains it, but built where this rule does not prepare it (bound
more than once, or not by a model constructor), is reported (ACC926): its gradients would not be
averaged across processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import prepare_statement, prepare_statements
from accel_convert.codemods.engine.facts import MODULE, ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.iteration import ITERABLE_WRAPPERS
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import (
    assigned_in,
    branch_blocks,
    instance_parameter,
    statement,
    with_blocks_edited,
)
from accel_convert.codemods.engine.transformers import HomeBlockTransformer
from accel_convert.codemods.model.plan import creation_index, plan_of


def objects_to_prepare(facts: ScriptFacts) -> list[str]:
    """The plan's objects to prepare, in Accelerate's customary order: models, optimizers, train
    loaders, eval loaders, schedulers (each group sorted by name here; the pass orders each group
    by creation)."""
    return list(plan_of(facts).to_prepare)


def _block_of(anchor: cst.CSTNode) -> str:
    """The plan's name of the home block ``anchor`` owns: its function, or ``"<module>"``."""
    return anchor.name.value if isinstance(anchor, cst.FunctionDef) else MODULE


def _group(facts: ScriptFacts, name: str) -> int:
    groups = facts.preparation_groups()
    return next((index for index, group in enumerate(groups) if name in group), len(groups))


class _Prepare(HomeBlockTransformer):
    def __init__(self, facts: ScriptFacts, names: list[str]) -> None:
        super().__init__(facts)
        self.plan = plan_of(facts)
        # Walked down to the functions nested in others that prepare what they build
        # (``main.train``), by the lines of their definitions.
        self.lines = sorted(set(self.plan.nested_preparing_lines.values()))
        self.wanted = names
        #: The names the ``prepare`` statements of the block being edited received so far: each
        #: block prepares what the plan gives it, whichever block the walk edited before.
        self.prepared_in_block: set[str] = set()

    @property
    def home_names(self) -> set[str | None]:
        # Objects the creating function builds and passes down (loaders for every trial) are
        # prepared there, once.
        return set(self.plan.home_blocks)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        updated = super().leave_FunctionDef(original_node, updated_node)
        name = original_node.name.value
        if len(self.scope) > 1 and self.scope[0] not in self.facts.training_classes:
            name = ".".join(self.scope)  # a function nested in another (``main.train``)
        if (
            (len(self.scope) == 1 or "." in name)
            and name in self.plan.preparing_functions
            and isinstance(updated.body, cst.IndentedBlock)
        ):
            body = self._edit_training_function(name, list(updated.body.body))
            return updated.with_changes(body=updated.body.with_changes(body=body))
        if (
            len(self.scope) == 1
            and name in self.plan.evaluation_preparations
            and isinstance(updated.body, cst.IndentedBlock)
        ):
            body = self._edit_evaluation_function(name, list(updated.body.body))
            return updated.with_changes(body=updated.body.with_changes(body=body))
        if (
            len(self.scope) == 1
            and name in self.plan.rebuilt_models_to_move
            and name not in self.home_names
            and isinstance(updated.body, cst.IndentedBlock)
        ):
            # A helper handed a prepared loader that builds the model it evaluates over it.
            body = self._move_rebuilt_models(list(updated.body.body), name)
            return updated.with_changes(body=updated.body.with_changes(body=body))
        return updated

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        """A training class's method building a model it evaluates over a prepared loader (the
        plan's ``rebuilt_models_to_move`` under ``"Class.method"``): moved after it is built, to
        the device of its instance's accelerator. (The walk does not enter the class body.)"""
        owner = original_node.name.value
        moves = self.plan.rebuilt_models_to_move
        if len(self.scope) != 1 or not any(key.startswith(f"{owner}.") for key in moves):
            return updated_node
        body = [
            self._move_in_method(owner, node) if isinstance(node, cst.FunctionDef) else node
            for node in updated_node.body.body
        ]
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    def _move_in_method(self, owner: str, method: cst.FunctionDef) -> cst.FunctionDef:
        """``method`` with the plan's moves of ``"owner.method"``, on ``self.accelerator``."""
        instance = instance_parameter(method)
        key = f"{owner}.{method.name.value}"
        if (
            instance is None
            or key not in self.plan.rebuilt_models_to_move
            or not isinstance(method.body, cst.IndentedBlock)
        ):
            return method
        body = self._move_rebuilt_models(list(method.body.body), key, f"{instance}.{self.accelerator}")
        return method.with_changes(body=method.body.with_changes(body=body))

    def _edit_evaluation_function(self, function: str, body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """A function evaluating during or after training that builds its own loader
        (``test(path)`` after the training loop, ``validate(model)`` in the epoch loop): the
        loader is prepared where it is built, and a model it builds
        and evaluates is moved to the device of the prepared batches."""
        loaders = set(self.plan.evaluation_preparations[function])
        body = self._prepare_where_built(body, loaders, "    ", where="it is built, after training began")
        return self._move_rebuilt_models(body, function)

    def _edit_training_function(self, function: str, body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """A function given the model by the home block (which prepares it) that builds the
        optimizer itself, or a library function building its model too: what it builds is
        prepared there, after the last of it is built and before its first loop over the data
        (``optimizer = accelerator.prepare(optimizer)``)."""
        self.prepared_in_block = set()
        loop_index = self._first_loop_index(body, function)
        first_creation, last_creation = self._creations(body[:loop_index], function)
        # What the plan has it prepare, bound before its training starts.
        names = [name for name in self.plan.preparations.get(function, ()) if name in last_creation]
        if not names:
            return body
        return self._insert_prepare(body, self._in_order(names, first_creation), last_creation, "    ")

    def edit_home(self, body: list[cst.BaseStatement], anchor: cst.CSTNode) -> list[cst.BaseStatement]:
        # ``prepare`` goes before the first loop over the data (or the first call reaching one):
        # a name bound again after it (a model rebuilt and reloaded for inference) is another
        # object, which training never used.
        self.prepared_in_block = set()
        loop_index = self._first_loop_index(body)
        block = _block_of(anchor)
        first_creation, last_creation = self._creations(body[:loop_index], block)
        # Only what this block builds: a loader only known as another function's parameter stays.
        # But a model the home function receives and trains, which no other block builds (an
        # ensemble's ``for m in models: train(m, loader)``), is prepared with what it builds.
        for name in self._received_models(anchor):
            first_creation.setdefault(name, -1)
            last_creation.setdefault(name, -1)
        names = self._in_order([name for name in self.wanted if name in last_creation], first_creation)
        indent = "" if self.facts.home_kind == "module" else "    "
        # Models handed to a training function that the single prepare cannot take (a distilled
        # student built after the training began, a model built under a flag): each is prepared
        # right where it is built, before it is handed over. Inside a nested block, the insertion
        # leaves the indices of the top-level statements above as they were.
        where_built = {name for name in self.wanted if name in self.plan.prepared_where_built} - set(names)
        rebuilt = set(self.plan.rebuilt_loaders.get(block, ())) | where_built
        head = body[:loop_index]
        # A loader wrapped in an object of another class (a ``DeviceDataLoader`` moving every
        # batch): prepare passes such objects through, so the loader is prepared before the wrap.
        head, before_wrap = self._prepare_before_wrapping(head, block, indent)
        names = [name for name in names if name not in self.prepared_in_block]
        if where_built:
            head = self._prepare_where_built(head, where_built, indent + "    ")
        where_bound = set(self.plan.prepared_where_bound.get(block, ())) & set(self.wanted)
        if where_bound:
            head = self._prepare_where_built(head, where_bound, indent + "    ", where="it is bound")
        body = [*head, *self._edit_from_the_loop(body[loop_index:], rebuilt, block, indent)]
        names = self._with_built_above_guard(names, block, body[:loop_index], first_creation, last_creation)
        if names:
            body = self._insert_prepare(body, names, last_creation, indent)
        if before_wrap:
            body = [inserted for node in body for inserted in [*before_wrap.get(id(node), ()), node]]
        # A model the block only evaluates, built before its first loop (a test script's ``net =
        # Net()``), meets the prepared batches too: moved where it is built.
        return self._move_rebuilt_models(body, block, within={id(node) for node in head})

    def _in_order(self, names: list[str], first_creation: dict[str, int]) -> list[str]:
        """``names`` in ``prepare``'s order: by group (models, optimizers, loaders, schedulers),
        then as they are first built."""
        return sorted(names, key=lambda name: (_group(self.facts, name), first_creation[name]))

    def _edit_from_the_loop(
        self, statements: list[cst.BaseStatement], rebuilt: set[str], block: str, indent: str
    ) -> list[cst.BaseStatement]:
        """The home block from its first loop over the data on: what is built there prepared where
        it is built, models handed to training again prepared again, models rebuilt after
        training moved to the device of the prepared loaders' batches."""
        if rebuilt:
            statements = self._prepare_where_built(statements, rebuilt, indent + "    ")
        statements = self._prepare_handed_again(statements, block, indent)
        statements = self._prepare_after_binding(statements, block, indent)
        return self._move_rebuilt_models(statements, block)

    def _with_built_above_guard(
        self,
        names: list[str],
        block: str,
        head: list[cst.BaseStatement],
        first_creation: dict[str, int],
        last_creation: dict[str, int],
    ) -> list[str]:
        """``names`` with what the plan prepares where ``block`` creates the accelerator (among
        ``head``): what the module builds above the ``__main__`` block (``prepared_where_created``)."""
        above = list(self.plan.prepared_where_created(block))
        if not above:
            return names
        created = self._accelerator_index(head)
        if created is None:
            return names
        for name in above:
            first_creation[name] = last_creation[name] = created
        return self._in_order([*names, *above], first_creation)

    def _took(self, names: list[str]) -> None:
        """Record that a ``prepare`` statement of the block being edited takes ``names``."""
        self.prepared_in_block.update(names)

    def _prepare_statements(self, names: list[str], indent: str, line: int | None = None) -> list[cst.BaseStatement]:
        """The statements preparing ``names`` (taken already): a loader tuple written of loaders
        this block prepared is bound again to them, not prepared a second time. ``line``: the
        original line of the statement binding them, where a name holds a loader tuple only
        where some statements bind it (``loader_tuple_bindings``)."""
        facts = self.facts
        tuples = dict(facts.loader_tuples)
        if line is not None:
            tuples |= {name: lengths[line] for name, lengths in facts.loader_tuple_bindings.items() if line in lengths}
        return prepare_statements(
            self.accelerator,
            names,
            indent,
            tuples,
            facts.loader_tuple_parts,
            self.prepared_in_block,
            facts.loader_dict_names,
        )

    def _insert_prepare(
        self, body: list[cst.BaseStatement], names: list[str], last_creation: dict[str, int], indent: str
    ) -> list[cst.BaseStatement]:
        """``body`` with ``names = accelerator.prepare(names)`` right after the last of them is built."""
        self._took(names)
        after = max(last_creation[name] for name in names)
        self.report(body[after], Prepare.code, f"prepare {', '.join(names)} for distributed training", header_only=True)
        prepared = self._prepare_statements(names, indent)
        return [*body[: after + 1], *prepared, *body[after + 1 :]]

    def _prepare_before_wrapping(
        self, statements: list[cst.BaseStatement], block: str, indent: str
    ) -> tuple[list[cst.BaseStatement], dict[int, list[cst.BaseStatement]]]:
        """``loader = accelerator.prepare(loader)`` statements to put right before each statement
        of ``statements`` at a line of the plan's ``prepared_before_wrapping`` for ``block``
        (``train_dl = WrappedDataLoader(train_dl, preprocess)``, ``it = iter(train_loader)``), by
        that statement's identity; the loaders so prepared join ``prepared_in_block``. A wrap in a
        branch (``if opt.DG: ... DGloader_iter = enumerate(dataloaders["DG"])``) gets its prepare
        right there, in ``statements`` as returned; what the branch prepares stays in the block's
        one ``prepare`` too (the branch may not run; ``prepare`` passes a prepared loader through)."""
        wrapped = self.plan.prepared_before_wrapping.get(block, {})
        inserted: dict[int, list[cst.BaseStatement]] = {}
        result: list[cst.BaseStatement] = []
        for node in statements:
            site = self.origins.site(node)
            if (
                site is not None
                and site.line not in wrapped
                and any(site.line < line <= site.end_line for line in wrapped)
            ):
                node = self._prepared_in_branches(node, wrapped, indent + "    ")
            for loader, wrapper in wrapped.get(site.line, ()) if site is not None else ():
                self._took([loader])
                self._report_wrap(node, loader, wrapper)
                inserted.setdefault(id(node), []).append(prepare_statement(self.accelerator, [loader], indent))
            result.append(node)
        return result, inserted

    def _prepared_in_branches(
        self, node: cst.BaseStatement, wrapped: Mapping[int, tuple[tuple[str, str], ...]], indent: str
    ) -> cst.BaseStatement:
        """``node``'s branches (an ``if`` chain, a ``with`` or ``try`` block) with each loader of
        ``wrapped`` prepared right before the statement of its line."""
        if not branch_blocks(node):
            return node

        def edit(statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
            result: list[cst.BaseStatement] = []
            for inner in statements:
                site = self.origins.site(inner)
                if site is not None and any(site.line < line <= site.end_line for line in wrapped):
                    inner = self._prepared_in_branches(inner, wrapped, indent + "    ")
                for loader, wrapper in wrapped.get(site.line, ()) if site is not None else ():
                    self._report_wrap(inner, loader, wrapper)
                    result.append(prepare_statement(self.accelerator, [loader], indent))
                result.append(inner)
            return result

        edited = with_blocks_edited(node, edit)
        if self.origins is not None:
            self.origins.carry(node, edited)  # later rules find its loops by their original lines
        return edited

    def _report_wrap(self, node: cst.CSTNode, loader: str, wrapper: str) -> None:
        if wrapper in ITERABLE_WRAPPERS or not wrapper.rpartition(".")[2][:1].isupper():
            why = f"an iterator {wrapper} takes from it reads it from then on"
        else:
            why = "prepare would pass the wrapper through unchanged"
        self.report(node, Prepare.code, f"prepare {loader} before {wrapper} wraps it ({why})", header_only=True)

    def _received_models(self, anchor: cst.CSTNode) -> tuple[str, ...]:
        """The models the home function ``anchor`` is handed and trains, which no other block
        builds (the plan's ``received_models``)."""
        return self.plan.received_models.get(anchor.name.value, ()) if isinstance(anchor, cst.FunctionDef) else ()

    def _accelerator_index(self, statements: list[cst.BaseStatement]) -> int | None:
        """Index of the statement creating the accelerator among ``statements``, if one does."""
        return creation_index(statements, self.facts)

    def _move_rebuilt_models(
        self,
        statements: list[cst.BaseStatement],
        block: str,
        accelerator: str | None = None,
        within: AbstractSet[int] | None = None,
    ) -> list[cst.BaseStatement]:
        """A model built again after training (the CIFAR-10 tutorial's ``net = Net()`` then
        ``net.load_state_dict(...)``), or one a script without training only evaluates, that
        meets batches of the prepared loaders, which are on the accelerator's device (the plan's
        ``rebuilt_models_to_move``): ``net.to(accelerator.device)`` after it is built
        (``accelerator``: the expression to read it from, in a method; ``within``: the
        statements, by identity, to look at, all where None)."""
        moves = self.plan.rebuilt_models_to_move.get(block, {})
        result: list[cst.BaseStatement] = []
        for node in statements:
            result.append(node)
            if within is not None and id(node) not in within:
                continue
            site = self.origins.site(node) if isinstance(node, cst.SimpleStatementLine) else None
            model = moves.get(site.line) if site is not None else None
            if model is None:
                continue
            what = "built again after training" if within is None else "evaluated over the prepared loaders"
            self.report(node, Prepare.code, f"{model} {what}: moved to the device of the prepared batches")
            result.append(statement(f"{model}.to({accelerator or self.accelerator}.device)"))
        return result

    def _prepare_handed_again(
        self, statements: list[cst.BaseStatement], block: str, indent: str
    ) -> list[cst.BaseStatement]:
        """The transfer-learning tutorial's second run: after ``train_model(model_ft, ...)`` it
        builds ``model_conv`` and ``optimizer_conv`` and calls ``train_model`` with them. Left
        unprepared, that training would run on each process alone (no gradient averaging) over
        the prepared, sharded data: what the plan's ``prepared_before_handing`` names is prepared
        right before that call (``model_conv, optimizer_conv = accelerator.prepare(...)``)."""
        return self._prepare_at(statements, self.plan.prepared_before_handing.get(block, {}), indent, after=False)

    def _prepare_after_binding(
        self, statements: list[cst.BaseStatement], block: str, indent: str
    ) -> list[cst.BaseStatement]:
        """A second model built once the block's training is over and trained in its own loop
        (a student after its teacher): what the plan's ``prepared_after_binding`` names is
        prepared right after the last statement binding it before that loop
        (``student, opt_student = accelerator.prepare(student, opt_student)``)."""
        return self._prepare_at(statements, self.plan.prepared_after_binding.get(block, {}), indent, after=True)

    def _prepare_at(
        self, statements: list[cst.BaseStatement], lines: Mapping[int, tuple[str, ...]], indent: str, *, after: bool
    ) -> list[cst.BaseStatement]:
        """``statements`` with ``names = accelerator.prepare(names)`` before (or ``after``) the
        statement at each original line of ``lines``, for the names it maps to."""
        result: list[cst.BaseStatement] = []
        for node in statements:
            site = self.origins.site(node)
            names = list(lines.get(site.line, ())) if site is not None else []
            if not names and site is not None and any(site.line < line <= site.end_line for line in lines):
                # The plan reads a branch or ``with`` block binding and training a model as the
                # block's own statements: its prepare goes inside.
                node = self._prepared_inside(node, lines, indent, after=after)
            if after:
                result.append(node)
            if names:
                self.report(node, Prepare.code, f"prepare {', '.join(names)} before they are trained", header_only=True)
                self._took(names)
                result += self._prepare_statements(names, indent)
            if not after:
                result.append(node)
        return result

    def _prepared_inside(
        self, node: cst.BaseStatement, lines: Mapping[int, tuple[str, ...]], indent: str, *, after: bool
    ) -> cst.BaseStatement:
        """A branching statement (an ``if`` chain, a ``with`` or ``try`` block) with
        :meth:`_prepare_at` done in each of its blocks: each branch binding and training a model
        gets its own prepare."""
        if not branch_blocks(node):
            return node
        edited = with_blocks_edited(node, lambda inner: self._prepare_at(inner, lines, indent + "    ", after=after))
        if self.origins is not None:
            self.origins.carry(node, edited)  # later rules find its loops by their original lines
        return edited

    def _creations(self, head: list[cst.BaseStatement], block: str) -> tuple[dict[str, int], dict[str, int]]:
        """The plan's first and last statements of ``block`` binding each object before its
        training starts, as indices into ``head`` (those statements, as earlier rewrites left
        them): the statement at the plan's original line or, where a rewrite took it out (a
        ``model = model.to(device)``), the last one above it."""
        starts = [site.line if (site := self.origins.site(node)) is not None else None for node in head]

        def index_of(line: int) -> int:
            return max((i for i, start in enumerate(starts) if start is not None and start <= line), default=-1)

        first = {name: index_of(line) for name, line in self.plan.first_built(block).items()}
        return first, {name: index_of(line) for name, line in self.plan.prepare_after(block).items()}

    def _prepare_where_built(
        self, statements: list[cst.BaseStatement], names: set[str], indent: str, where: str | None = None
    ) -> list[cst.BaseStatement]:
        """``statements`` with ``loader = accelerator.prepare(loader)`` after each line binding
        one of ``names``, looking into loops, branches and ``with`` blocks (``where``: why there,
        for the report)."""
        result: list[cst.BaseStatement] = []
        for node in statements:
            if isinstance(node, cst.SimpleStatementLine):
                result.append(node)
                site = self.origins.site(node)
                for name in sorted(self._assigned_by(node) & names):
                    why = where or ("it is built" if name in self.plan.prepared_where_built else "the loop builds it")
                    self.report(node, Prepare.code, f"prepare {name} where {why}", header_only=True)
                    self._took([name])
                    result += self._prepare_statements([name], indent, site.line if site is not None else None)
                continue
            if isinstance(node, (cst.For, cst.While, cst.With, cst.If)) and isinstance(node.body, cst.IndentedBlock):
                original = node
                node = with_blocks_edited(
                    node, lambda inner: self._prepare_where_built(inner, names, indent + "    ", where)
                )
                if self.origins is not None:
                    # Later rules find a loop by its original line (the evaluation loop here).
                    self.origins.carry(original, node)
            result.append(node)
        return result

    def _first_loop_index(self, body: list[cst.BaseStatement], block: str | None = None) -> int:
        """Index of the first statement of ``body`` that loops over a loader, or calls a function
        that (directly or through its own calls) does; ``len(body)`` when none does. ``block``:
        the function ``body`` belongs to, when not the home block."""
        lines = self.plan.training_lines_of(block)
        for index, node in enumerate(body):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                continue  # the calls inside a definition run when it is called, not here
            site = self.origins.site(node)
            if site is not None and any(site.line <= line <= site.end_line for line in lines):
                return index
        return len(body)

    def _assigned_by(self, node: cst.BaseStatement) -> set[str]:
        """The wanted names ``node`` assigns, from the analysis' assignment lines when the
        statement is original (no walk), else by looking at it."""
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return set()  # names a def binds inside are its own locals, not this block's
        site = self.origins.site(node)
        if site is None:
            return assigned_in(node) & set(self.wanted)
        return {
            name
            for name in self.wanted
            if any(site.line <= where.line <= site.end_line for where in self.facts.assign_sites.get(name, ()))
        }


#: A model handed to a training function under a name the converter cannot prepare.
UNPREPARED_MODEL = "ACC926"


class Prepare(Rule):
    code = "ACC103"
    name = "prepare"
    fixes = {
        "ACC926": (
            "Prepare the model the finding names after it is built and before it is trained: on the line after its last assignment, before the call that trains it, add ``NAME = accelerator.prepare(NAME)`` with that name (``net = accelerator.prepare(net)`` for ``net``)."
        ),
    }
    extra_codes = {
        UNPREPARED_MODEL: "unprepared-model: a model handed to a function that trains it, built where "
        "the converter does not prepare it (bound more than once, or not by a model constructor): its "
        "training is not distributed (prepare it by hand)",
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.optim.lr_scheduler import StepLR
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    scheduler = StepLR(optimizer, step_size=1)
                    for epoch in range(3):
                        for data, target in train_loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        scheduler.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.optim.lr_scheduler import StepLR
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
                    scheduler = StepLR(optimizer, step_size=1)
                    for epoch in range(3):
                        for data, target in train_loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                        scheduler.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                teacher = nn.Linear(8, 1)
                opt_teacher = torch.optim.SGD(teacher.parameters(), lr=0.1)
                for data, target in loader:
                    opt_teacher.zero_grad()
                    nn.functional.mse_loss(teacher(data), target).backward()
                    opt_teacher.step()

                student = nn.Linear(8, 1)
                opt_student = torch.optim.SGD(student.parameters(), lr=0.1)
                for data, target in loader:
                    opt_student.zero_grad()
                    nn.functional.mse_loss(student(data), target).backward()
                    opt_student.step()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                accelerator = Accelerator()
                accelerator.agree_random_state()

                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                teacher = nn.Linear(8, 1)
                opt_teacher = torch.optim.SGD(teacher.parameters(), lr=0.1)
                teacher, opt_teacher, loader = accelerator.prepare(teacher, opt_teacher, loader)
                for data, target in loader:
                    opt_teacher.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(teacher(data), target))
                    opt_teacher.step()

                student = nn.Linear(8, 1)
                opt_student = torch.optim.SGD(student.parameters(), lr=0.1)
                student, opt_student = accelerator.prepare(student, opt_student)
                for data, target in loader:
                    opt_student.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(student(data), target))
                    opt_student.step()
            """,
        ),
        Example(
            before="""
                import sys

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main(net_name="small"):
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    if net_name == "small":
                        model = nn.Linear(8, 1)
                    elif net_name == "deep":
                        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
                    else:
                        sys.exit(f"unknown network {net_name}")
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(data), target).backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import sys

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main(net_name="small"):
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    if net_name == "small":
                        model = nn.Linear(8, 1)
                    elif net_name == "deep":
                        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
                    else:
                        sys.exit(f"unknown network {net_name}")
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(data), target))
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A scheduler chosen in a chain with no ``else`` and stepped only under a flag of its own may
        # be unbound on purpose (``--scheduler none``): a prepare reading it would fail, so it is left
        # out of the prepare call.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main(schedule="none"):
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    if schedule == "step":
                        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
                    elif schedule == "cosine":
                        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 3)
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            nn.functional.mse_loss(model(data), target).backward()
                            optimizer.step()
                            if schedule != "none":
                                scheduler.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main(schedule="none"):
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    if schedule == "step":
                        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
                    elif schedule == "cosine":
                        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 3)
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            accelerator.backward(nn.functional.mse_loss(model(data), target))
                            optimizer.step()
                            if schedule != "none":
                                scheduler.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # An optimizer built again after each training run (the torch.nn tutorial's fits): each new
        # one is prepared before it is trained, however many times it is rebuilt.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def fit(model, opt, loader):
                    for data, target in loader:
                        opt.zero_grad()
                        nn.functional.mse_loss(model(data), target).backward()
                        opt.step()


                torch.manual_seed(0)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                fit(model, opt, loader)
                opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
                fit(model, opt, loader)
                opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
                fit(model, opt, loader)
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def fit(model, opt, loader):
                    for data, target in loader:
                        opt.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(data), target))
                        opt.step()


                torch.manual_seed(0)
                accelerator = Accelerator()
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                model, opt, loader = accelerator.prepare(model, opt, loader)
                fit(model, opt, loader)
                opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
                opt = accelerator.prepare(opt)
                fit(model, opt, loader)
                opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
                opt = accelerator.prepare(opt)
                fit(model, opt, loader)
            """,
        ),
        # A learning-rate finder trains first (a training class: its method runs a backward), then
        # the optimizer is built again and handed to the training inside the epoch loop: prepared
        # above the finder, and the new optimizer above the loop.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class LRFinder:
                    def __init__(self, model, optimizer, device):
                        self.model = model
                        self.optimizer = optimizer
                        self.device = device

                    def range_test(self, loader, steps=4):
                        for step, (x, y) in enumerate(loader):
                            if step == steps:
                                break
                            self.optimizer.zero_grad()
                            nn.functional.mse_loss(self.model(x.to(self.device)), y.to(self.device)).backward()
                            self.optimizer.step()


                def train(model, loader, optimizer, device):
                    for x, y in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
                        optimizer.step()


                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                torch.manual_seed(0)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1)
                model = model.to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
                finder = LRFinder(model, optimizer, device)
                finder.range_test(loader)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for epoch in range(2):
                    train(model, loader, optimizer, device)
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class LRFinder:
                    def __init__(self, model, optimizer, device, accelerator):
                        self.accelerator = accelerator
                        self.model = model
                        self.optimizer = optimizer
                        self.device = device

                    def range_test(self, loader, steps=4):
                        for step, (x, y) in enumerate(loader):
                            if step == steps:
                                break
                            self.optimizer.zero_grad()
                            self.accelerator.backward(nn.functional.mse_loss(self.model(x), y))
                            self.optimizer.step()


                def train(model, loader, optimizer, device):
                    for x, y in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(x), y))
                        optimizer.step()


                accelerator = Accelerator()
                device = accelerator.device
                torch.manual_seed(0)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                finder = LRFinder(model, optimizer, device, accelerator)
                finder.range_test(loader)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                optimizer = accelerator.prepare(optimizer)
                for epoch in range(2):
                    train(model, loader, optimizer, device)
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader):
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(data), target).backward()
                        optimizer.step()


                torch.manual_seed(0)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                student = nn.Linear(8, 1)
                train(student, loader)
                student = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 1))
                train(student, loader)
            """,
            code=UNPREPARED_MODEL,
            message="student is trained by train() but is not prepared: its gradients are not averaged across "
            "processes (add student = accelerator.prepare(student) after it is built, before this call)",
        ),
        # A helper called once the training is over, building its own test loader and the model it
        # evaluates: the loader is prepared where it is built, the model moved to its batches'
        # device, and the counts gathered.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Net(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.fc = nn.Linear(8, 3)

                    def forward(self, x):
                        return self.fc(x)


                def test(test_set):
                    loader = DataLoader(test_set, batch_size=8)
                    best = Net()
                    best.load_state_dict(torch.load("model.pt"))
                    best.eval()
                    correct = 0
                    with torch.no_grad():
                        for x, y in loader:
                            correct += (best(x).argmax(1) == y).sum().item()
                    print(f"accuracy {correct}/{len(test_set)}")


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                    model = Net()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, y in loader:
                        optimizer.zero_grad()
                        nn.functional.cross_entropy(model(x), y).backward()
                        optimizer.step()
                    torch.save(model.state_dict(), "model.pt")
                    test(TensorDataset(torch.randn(16, 8), torch.randint(0, 3, (16,))))


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class Net(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.fc = nn.Linear(8, 3)

                    def forward(self, x):
                        return self.fc(x)


                def test(test_set, accelerator):
                    loader = DataLoader(test_set, batch_size=8)
                    loader = accelerator.prepare(loader)
                    best = Net()
                    best.to(accelerator.device)
                    accelerator.wait_for_everyone()
                    best.load_state_dict(torch.load("model.pt", map_location={"cuda:0": str(accelerator.device)}))
                    best.eval()
                    correct = 0
                    with torch.no_grad():
                        for x, y in loader:
                            output = best(x)
                            output, y = accelerator.gather_for_metrics((output, y))
                            correct += (output.argmax(1) == y).sum().item()
                    accelerator.print(f"accuracy {correct}/{len(test_set)}")


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                    model = Net()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for x, y in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.cross_entropy(model(x), y))
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pt")
                    test(TensorDataset(torch.randn(16, 8), torch.randint(0, 3, (16,))), accelerator)


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A training bundle used from outside its class: ``Experiment.__init__`` builds the model,
        # the optimizer and the loader, and ``main()`` hands them on (``train(exp.model, ...)``):
        # they are prepared where the bundle is built, the attributes bound again.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Experiment:
                    def __init__(self):
                        self.model = nn.Linear(8, 1)
                        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
                        self.loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)


                def train(model, loader, optimizer):
                    for data, target in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(data), target).backward()
                        optimizer.step()


                def main():
                    exp = Experiment()
                    train(exp.model, exp.loader, exp.optimizer)


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class Experiment:
                    def __init__(self):
                        self.model = nn.Linear(8, 1)
                        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
                        self.loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)


                def train(model, loader, optimizer, accelerator):
                    for data, target in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(model(data), target))
                        optimizer.step()


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    exp = Experiment()
                    exp.model, exp.optimizer, exp.loader = accelerator.prepare(exp.model, exp.optimizer, exp.loader)
                    train(exp.model, exp.loader, exp.optimizer, accelerator)


                if __name__ == "__main__":
                    main()
            """,
        ),
        # Already prepared (a converted script converted again), with a scheduler stepped once per
        # epoch built after the prepare: nothing is added, and that scheduler stays unprepared
        # (prepared, it would step once per process at each call).
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                        scheduler.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def train(model, loader):
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(data), target).backward()
                        optimizer.step()


                torch.manual_seed(0)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                student = nn.Linear(8, 1)
                train(student, loader)
                wider = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 1))
                train(wider, loader)
            """,
            code=UNPREPARED_MODEL,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return plan_of(facts).prepares

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        names = objects_to_prepare(facts)
        transformer = _Prepare(facts, names)
        reports = [
            report_at(
                site,
                UNPREPARED_MODEL,
                f"{name} is trained by {function}() but is not prepared: its gradients are not averaged "
                f"across processes (add {name} = accelerator.prepare({name}) after it is built, before this call)",
            )
            for name, function, site in facts.unprepared_received_models
        ]
        new_module = module.visit(transformer)
        # A model no prepare of the plan takes (built where none can follow it) trains
        # undistributed: each process keeps its own weights, so say so rather than leave it silently.
        for name in plan_of(facts).models_left_unprepared:
            reports.append(
                report_at(
                    facts.assign_sites[name][0],
                    UNPREPARED_MODEL,
                    f"{name} is trained but no prepare call can be placed for it here: its gradients are "
                    f"not averaged across processes (add {name} = accelerator.prepare({name}) after it is "
                    "built, once the accelerator exists)",
                )
            )
        return new_module, [*transformer.changes(module), *reports]
