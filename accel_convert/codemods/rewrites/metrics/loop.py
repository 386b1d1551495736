"""The walk that gathers: for each evaluation loop over a prepared loader, find the forward, decide
what to gather (or why nothing can be), write ``gather_for_metrics`` after the forward, and report
what the gather changes around it. The questions it asks live in the package's other modules; this
one holds the order of the decisions and the reports that stop a gather."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.iteration import batch_target, enumerate_index, iterated, iterated_name
from accel_convert.codemods.engine.model import Site
from accel_convert.codemods.engine.syntax import bound_by, dotted, expression_code, is_backward, nodes_in, root_name
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import variables_read
from accel_convert.codemods.model.locality import grown_in
from accel_convert.codemods.model.plan import plan_of
from accel_convert.codemods.rewrites.metrics.batch_means import (
    GatheredLoop,
    report_means_over_batches,
    report_summed_batch_means,
)
from accel_convert.codemods.rewrites.metrics.batch_values import (
    Unpacked,
    batch_positions,
    indexed_by_outputs,
    sizes_summed_after,
    stored_by_batch_index,
    unpacked_from,
)
from accel_convert.codemods.rewrites.metrics.codes import (
    BATCH_ORDER,
    BATCH_SCALAR,
    FORWARD_IN_CALL,
    GATHERED,
    IN_BATCH_TARGETS,
    INDEXED_STORE,
    JOINED_ROWS,
    LOCAL_BATCH_SIZE,
    MEAN_OF_BATCHES,
    NESTED_FORWARD,
    OBJECT_LISTS,
    ONE_SAMPLE_BATCHES,
    PYTHON_VALUE,
    RAGGED_PADDING,
    SEQUENCE_FIRST,
    UNKNOWN_MODEL,
    UNREACHABLE,
    UNSIZED_STREAM,
)
from accel_convert.codemods.rewrites.metrics.counts import batches_counted, counted_names, summed_across_processes
from accel_convert.codemods.rewrites.metrics.ensembles import find_ensemble_forward
from accel_convert.codemods.rewrites.metrics.forward import (
    Forward,
    block_holding_forward,
    find_averaged_forwards,
    find_forward,
    hoist_forward,
    is_gather,
    is_model_call,
    loader_iterated,
    loop_over_loader,
    model_passed_to_call,
    statements_after,
)
from accel_convert.codemods.rewrites.metrics.layouts import (
    SequenceLayouts,
    hidden_states_read,
    python_values_bound,
    sequence_first_reason,
)
from accel_convert.codemods.rewrites.metrics.loaders import gathers_padded_sequences
from accel_convert.codemods.rewrites.metrics.nodes import LazyNames, contains
from accel_convert.codemods.rewrites.metrics.object_lists import (
    gather_object_statement,
    gather_objects_statement,
    lists_gathered_after,
    maybe_objects,
    per_sample_lists,
)
from accel_convert.codemods.rewrites.metrics.plan import (
    GatherPlan,
    fresh_name,
    gather_statements,
    insert_after,
    plan_gather,
)
from accel_convert.codemods.rewrites.metrics.torchmetrics import GatheredUpdates, TorchMetrics
from accel_convert.records import record

#: A Python value made from the batch, computed again after the gather: (its name, the value,
#: the batch tensors it reads).
Recomputed = tuple[str, cst.BaseExpression, set[str]]


@record(eq=False, repr=False)
class _LoopGather:
    """What one evaluation loop gathers, once every reason to leave it alone is ruled out."""

    #: The forward's line (``outputs = model(x)``), after which the gather goes.
    forward: cst.SimpleStatementLine
    #: The per-sample names: the loop's own and those unpacked from them before the forward.
    batch: tuple[str, ...]
    unpacked: Unpacked
    plan: GatherPlan
    recomputed: list[Recomputed]
    #: Names gathered as lists of objects, each on its own (empty: a tensor gather).
    object_lists: list[str]


@record(eq=False, repr=False)
class _KeptLists:
    """An evaluation loop whose outputs cannot be gathered after its forward, and whose results are
    lists it keeps per sample (see :func:`.object_lists.lists_gathered_after`): it runs over each
    process's real samples, and the lists (and any running sums) are joined after it."""

    lists: list[str]
    summed: list[str]


def _squeezed_samples(after: Sequence[cst.CSTNode], plan: GatherPlan) -> list[str]:
    """The gathered names the statements ``after`` the forward squeeze their batch dimension out
    of (``sr.data.cpu().squeeze(0)``): SRGAN's validation, whose loader gives one image per batch.
    A bare ``squeeze()`` (a ``(batch, 1)`` output made ``(batch,)``) is no such sign."""
    gathered = set(plan.names)
    found: dict[str, None] = {}
    for node in (inner for statement in after for inner in nodes_in(statement)):
        if not (
            isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "squeeze"
        ):
            continue
        first = node.args[0].value if len(node.args) == 1 else None
        if isinstance(first, cst.Integer) and first.value == "0":
            name = root_name(node.func.value)
            if name in gathered:
                found[name] = None
    return list(found)


class EvalLoopRewriter(RuleTransformer):
    """Gathers in every evaluation loop over a prepared loader (walking compound statements only),
    given what the rule read of the whole file first; reports the means over batches of each
    function once its loops are done, and collects the torchmetrics updates fed gathered values."""

    def __init__(
        self,
        facts: ScriptFacts,
        lines: set[int],
        layouts: SequenceLayouts,
        torchmetrics: TorchMetrics,
        streams: dict[str, str],
        zipped_loaders: set[str],
        padded_loaders: Callable[[], set[str]],
        model_lists: dict[str, set[str]] | None = None,
        runtime_target: bool = True,
    ) -> None:
        super().__init__(facts, lines)
        #: Whether the script runs on this project's runtime (``accelerator.without_padding``).
        self._runtime_target = runtime_target
        #: Module-level function → names there holding a list of prepared models (an ensemble).
        self._model_lists = model_lists or {}
        self._module: cst.CSTNode = cst.Module([])
        self._layouts = layouts
        self._metric_updates = GatheredUpdates(torchmetrics)
        #: Loaders over an iterable dataset class of the file without ``__len__`` → that class.
        self._streams = streams
        #: Loaders whose ``collate_fn`` returns ``tuple(zip(*batch))``: batches of per-sample lists.
        self._zipped_loaders = zipped_loaders
        #: Finds the loaders whose collate function pads each batch to its own longest sample
        #: (a search of every function of the file): asked only about a loop whose gathered values
        #: have a per-token dimension, once (see :attr:`padded_loaders`).
        self._find_padded_loaders = padded_loaders
        self._padded_loaders: set[str] | None = None
        #: Names a new variable must not take: those of the module-level function being walked
        #: (nested functions share their enclosing function's set), or the whole module's for
        #: module-level code.
        #: Collected only when a new name is needed: most files never need one.
        self._taken_by_scope: list[LazyNames] = []
        #: Evaluation loops that got a gather, per enclosing function (innermost last; the first
        #: entry is module-level code).
        self._gathered_loops: list[list[GatheredLoop]] = [[]]

    @property
    def _taken_names(self) -> set[str]:
        return self._taken_by_scope[-1].names

    def visit_Module(self, node: cst.Module) -> None:
        super().visit_Module(node)
        self._taken_by_scope.append(LazyNames(node))
        self._module = node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        top_level = len(self._taken_by_scope) == 1
        self._taken_by_scope.append(LazyNames(node) if top_level else self._taken_by_scope[-1])
        self._gathered_loops.append([])

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        self._taken_by_scope.pop()
        report_means_over_batches(self, [original_node], self._gathered_loops.pop())
        return super().leave_FunctionDef(original_node, updated_node)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        # Module-level code (a notebook-style script): its own statements, not the functions'.
        outside_definitions = [
            statement for statement in original_node.body if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))
        ]
        report_means_over_batches(self, outside_definitions, self._gathered_loops[0])
        return super().leave_Module(original_node, updated_node)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        # Loops are compound statements: the walk need not go into a simple line's expressions.
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return self.in_training_class()

    def metrics_fed_gathered_values(self) -> set[Site]:
        """The torchmetrics constructors to build with ``sync_on_compute=False`` (see
        :meth:`GatheredUpdates.fed_gathered_values`), once the walk is over."""
        return self._metric_updates.fed_gathered_values(self)

    def leave_For(
        self, original_node: cst.For, updated_node: cst.For
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        loop = loop_over_loader(original_node, self.facts)
        # Whether the loop evaluates is the analysis's answer, the one prepare shards by.
        if loop is None or not self.evaluates(original_node) or self._unsharded(original_node):
            # Each process keeps its own batches (and writes their files), or runs every batch
            # of a loader left unsharded: nothing to gather.
            return updated_node
        if self._over_unprepared_loader(original_node):
            # A loader built where nothing prepares it (a local of an evaluation helper): every
            # rank sees every sample, and gathering would count each one N times.
            return updated_node
        # Which backward calls train is the loops owner's answer: a loss reaching what an
        # optimizer steps. Any other (gradients for the input, a helper object's own method)
        # leaves the loop an evaluation that needs its own batch between forwards.
        trains = contains(original_node, self._trains, cst.Call)
        if not trains and contains(original_node, is_backward, cst.Call):
            return self._counts_summed(original_node, updated_node)
        if trains or contains(original_node, lambda n: is_gather(n, self.facts), cst.Call):
            return updated_node
        sequence_first = sequence_first_reason(original_node, self._layouts, self.facts)
        if sequence_first is not None:
            self.report(
                original_node,
                SEQUENCE_FIRST,
                f"{sequence_first}: its tensors are (sequence, batch, ...) and gather_for_metrics joins along "
                "dim 0, mixing sequence positions across processes; not gathered, so the metrics cover "
                "this process only (gather batch-first views by hand: output.transpose(0, 1))",
                False,
            )
            return updated_node
        if not self.accelerator_reachable():
            self.report(
                original_node,
                UNREACHABLE,
                "evaluation loop where the accelerator is not reachable: metrics cover this rank only",
                False,
            )
            return updated_node
        if contains(original_node.iter, _without_padding_call, cst.Call):
            return updated_node  # converted already: its lists are gathered after it
        return self._gather_in_loop(original_node, updated_node, loop)

    def _trains(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is a backward call that trains (see ``training_backward_sites``)."""
        return is_backward(node) and self.facts.origins.site(node) in self.facts.training_backward_sites

    def _scope(self) -> cst.CSTNode:
        """The function holding the node being visited, or the module."""
        return next((n for n in reversed(self._anchors) if isinstance(n, cst.FunctionDef)), self._module)

    def _counts_summed(
        self, original: cst.For, loop: cst.For
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        """An evaluation taking gradients for its inputs (see :mod:`.counts`): its counts are
        summed over the processes after the loop."""
        scope = self._scope()
        names = counted_names(loop, scope)
        if not names or not self.accelerator_reachable():
            return loop
        accelerator = self.instance_accelerator() or cst.Name(self.accelerator)
        if self._runtime_target:
            # The last round's padding would be counted on the process it pads: each process
            # counts its real rows only, so the sums cover every sample once.
            loop = _without_padding(loop, accelerator, skip_empty=not self.facts.backward_trains)
        self.report(
            original,
            GATHERED,
            f"counts summed across processes after the loop: {', '.join(names)}"
            + (" (each process's batches without the padding of the last round)" if self._runtime_target else ""),
        )
        loader = iterated_name(original.iter, through_any_call=True)
        if batches_counted(scope, loader, self.builtin):
            self.report(
                original,
                MEAN_OF_BATCHES,
                f"len({loader}) counts this process's batches once prepared: divide the summed counts by "
                f"the number of samples (len({loader}.dataset)) or sum the batch count across processes too",
                False,
            )
        return cst.FlattenSentinel([loop, *(summed_across_processes(name, accelerator) for name in names)])

    def _unsharded(self, node: cst.For) -> bool:
        """Each process runs the loop over its own batches (the locality owner's per-rank loops),
        or over every batch (the loaders owner's ``unsharded_loops``): nothing to gather."""
        site = self.origins.site(node)
        return self.runs_per_rank(node) or (site is not None and site.line in self.facts.unsharded_loops)

    def _over_unprepared_loader(self, node: cst.For) -> bool:
        """The loop's loader is built by the function holding the loop, and that function is not
        where the training objects are built and prepared (an evaluation helper's own loader)."""
        name = loader_iterated(node, self.facts)
        if name in self.facts.unprepared_loaders:
            return True  # a script with no model reading its loaders whole (dataset statistics)
        function = next((n for n in reversed(self._anchors) if isinstance(n, cst.FunctionDef)), None)
        if function is None or function.name.value in (self.facts.main_function, self.facts.creating_function):
            return False
        owner = next((n for n in reversed(self._anchors) if isinstance(n, cst.ClassDef)), None)
        # An evaluation helper called once training is over, or a training class's method: the
        # plan prepares the loader where it is built.
        owner_name = owner.name.value if owner is not None else None
        if name in plan_of(self.facts).built_and_prepared_by(function.name.value, owner_name):
            return False
        if (owner_name or function.name.value, name) in self.facts.loaders_unpacked_from_parameters:
            return False  # unpacked from the loader tuple it is handed, which its caller prepared
        scope = (function.name.value,) if owner_name is None else (owner_name, function.name.value)
        picked = self.facts.names_picked_by_locals.get((scope, name)) if name is not None else None
        if picked and picked <= self.facts.loaders:
            return False  # ``loader = self.test_loader`` under ``if``/``else``: the loaders it picks
        where = self.facts.origins.site(function)
        return (
            where is not None
            and name is not None
            and any(where.line <= site.line <= where.end_line for site in self.facts.assign_sites.get(name, ()))
        )

    # ---- one loop -------------------------------------------------------------------------

    def _gather_in_loop(
        self, original: cst.For, loop: cst.For, batch: tuple[str, ...]
    ) -> cst.For | cst.FlattenSentinel[cst.BaseStatement]:
        if not isinstance(loop.body, cst.IndentedBlock):
            return loop
        loop, forward = self._forward_in(loop, batch)
        body = cast(cst.IndentedBlock, loop.body)
        if forward is None or isinstance(block_holding_forward(body.body, self.facts), (cst.For, cst.While)):
            # A forward in a loop inside the loop, before the one on a line of its own
            # (recurrent-visual-attention's glimpses): gathering the last forward alone would
            # join this process's earlier outputs with every process's last ones.
            self._report_no_forward(original, loop)
            return loop
        gather = self._what_to_gather(original, body.body, forward, batch)
        if gather is None:
            return loop
        if isinstance(gather, _KeptLists):
            return self._lists_gathered_after(original, loop, gather)
        new_body = self._write_gather(original, body.body, gather)
        self._report_gathered(original, gather.plan)
        return loop.with_changes(body=body.with_changes(body=new_body))

    def _forward_in(self, loop: cst.For, batch: tuple[str, ...]) -> tuple[cst.For, Forward | None]:
        """The forward whose outputs to gather, and the loop (with the forward put on a line of
        its own when it sat inside a larger expression)."""
        body = cast(cst.IndentedBlock, loop.body)
        forward = find_forward(body.body, self.facts)
        if forward is None:
            hoisted = hoist_forward(body.body, self.facts, lambda: fresh_name("output", self._taken_names))
            if hoisted is not None:
                body = body.with_changes(body=hoisted)
                loop = loop.with_changes(body=body)
                forward = find_forward(body.body, self.facts)
        if forward is None:
            # ``probs = torch.stack([m(x).softmax(-1) for m in models]).mean(0)`` over a list of
            # prepared models: one row per sample, gathered as a forward's output is.
            forward = find_ensemble_forward(body.body, self.facts, self._model_lists.get(self.function, set()), batch)
        if forward is None:
            # ``logits = (model(x) + model(torch.flip(x, dims=[-1]))) / 2``: test-time
            # augmentation, model outputs on views of the batch averaged row by row.
            forward = find_averaged_forwards(body.body, self.facts)
        return loop, forward

    def _unseen_forward(self, statements: Sequence[cst.BaseStatement]) -> str:
        """What ACC943 says of a loop whose forward the rule cannot gather: where it sits."""
        block = block_holding_forward(statements, self.facts)
        if block is None:
            return (
                "the forward is nested in a larger expression: assign its output to a name, "
                "then gather it with accelerator.gather_for_metrics"
            )
        if isinstance(block, cst.If):
            where, each = "a branch of an if/else", " in each branch"
        elif isinstance(block, (cst.Try, cst.TryStar)):
            where, each = "a try block", ""
        else:
            where, each = ("a loop" if isinstance(block, (cst.For, cst.While)) else "a block"), ""
        return (
            f"the forward sits in {where} inside the loop: its output is not gathered, so the metrics "
            f"cover this process only; gather it with the targets right after the forward{each}: "
            "accelerator.gather_for_metrics((output, targets))"
        )

    def _report_no_forward(self, original: cst.For, loop: cst.For) -> None:
        """Why an evaluation loop with no forward to gather is left as written, when it says."""
        runner = model_passed_to_call(loop, self.facts)
        if contains(loop, lambda n: is_model_call(n, self.facts), cst.Call):
            self.report(original, NESTED_FORWARD, self._unseen_forward(cast(cst.IndentedBlock, loop.body).body), False)
        elif runner is not None:
            # ``pred = greedy_decode(model, src)``: the forward runs in a function whose
            # output's layout the rule cannot see (a decoded sequence's length may differ
            # between processes, and gathering tensors of different shapes fails).
            self.report(
                runner[1],
                FORWARD_IN_CALL,
                f"the model runs inside {runner[0]}(...): its output is not gathered, so the metrics cover "
                "this process only; gather what it returns with the targets, "
                "accelerator.gather_for_metrics((preds, targets)) (accelerator.pad_across_processes "
                "first where its length varies between batches)",
                False,
            )
        elif grown_in(loop.body):
            # Models called under names the analysis does not hold (an ensemble's ``m(x)`` for
            # ``m in models``): what it counts covers this process's shard of the loader.
            self.report(
                original,
                UNKNOWN_MODEL,
                "evaluation over a prepared loader with no forward of a known model (models from a "
                "list, an ensemble): not gathered, so the counts cover this process only; gather the "
                "predictions and targets with accelerator.gather_for_metrics((preds, targets))",
                False,
            )

    def _kept_lists(self, original: cst.For) -> _KeptLists | None:
        """The lists to gather after ``original`` (see :func:`.object_lists.lists_gathered_after`),
        where its outputs cannot be gathered after the forward; None where there are none, or on
        ``--target accelerate``, which has no ``without_padding``: the padding of the last round
        would be kept in the lists (the loop is reported as before, saying so)."""
        lists = self._lists_in(original)
        if not lists or not self._runtime_target:
            return None
        return _KeptLists(lists, counted_names(original, self._scope()))

    def _lists_in(self, original: cst.For) -> list[str]:
        """The lists ``original`` keeps per sample, to gather after it (see
        :func:`.object_lists.lists_gathered_after`)."""
        scope = self._scope()
        inside = self._anchors
        if scope is not self._module:
            inside = inside[next(i for i, node in enumerate(inside) if node is scope) + 1 :]
        return lists_gathered_after(original, scope, inside, self.builtin)

    def _accelerate_lists(self, original: cst.For) -> str:
        """What a report says, on ``--target accelerate``, of the lists the runtime would gather
        after the loop: Accelerate cannot drop the padding of the last round from them."""
        if self._runtime_target:
            return ""
        lists = self._lists_in(original)
        if not lists:
            return ""
        return (
            f"; {', '.join(lists)} could be gathered after the loop as objects, but Accelerate has no way to drop "
            "the samples that pad the last round of batches from them (converting for this project's runtime "
            "does: accelerator.without_padding(loader))"
        )

    def _lists_gathered_after(
        self, original: cst.For, loop: cst.For, kept: _KeptLists
    ) -> cst.FlattenSentinel[cst.BaseStatement]:
        """The loop over each process's real samples, then its lists gathered as objects and its
        running sums summed."""
        accelerator = self.instance_accelerator() or cst.Name(self.accelerator)
        # No collective runs in the loop, and no backward: a batch with no real row is skipped (a
        # model's code often fails on an empty batch: ``max(decode_lengths)``, packing no sequence).
        loop = _without_padding(loop, accelerator, skip_empty=True)
        summed = f"; summed across processes: {', '.join(kept.summed)}" if kept.summed else ""
        self.report(
            original,
            GATHERED,
            f"lists gathered across processes after the loop: {', '.join(kept.lists)}{summed} (each process's "
            "batches without the padding of the last round)",
        )
        return cst.FlattenSentinel(
            [
                loop,
                *(gather_object_statement(name, accelerator) for name in kept.lists),
                *(summed_across_processes(name, accelerator) for name in kept.summed),
            ]
        )

    def _what_to_gather(
        self, original: cst.For, statements: Sequence[cst.BaseStatement], forward: Forward, batch: tuple[str, ...]
    ) -> _LoopGather | _KeptLists | None:
        """The gather to write after the forward, or the lists to gather after the loop where its
        outputs cannot be gathered; None (reported where the script must change) when nothing can
        be gathered."""
        statement, outputs = forward
        # ``input, target = batch[0], batch[1]``: names unpacked from the batch are per-sample
        # too, and what the outputs are compared with must be gathered with them.
        unpacked = unpacked_from(statements, statement, batch, self.builtin)
        batch = (*batch, *unpacked.tensors)
        after = statements_after(statements, statement)
        plan = plan_gather(outputs, batch, after, lambda: self._taken_names)
        # A sum moved below the gather (``total += b_size``) reads the values computed again there.
        read_after = variables_read(*after, *(line for line, _ in unpacked.summed_counts.values()))
        lists = per_sample_lists(original, statements, batch, self._zipped_loaders, self.builtin)
        python_values = self._python_values(statement, unpacked, plan, read_after, lists)
        if python_values:
            kept = self._kept_lists(original)
            if kept is None:
                self._report_python_values(original, python_values)
            return kept
        recomputed = _recomputed(unpacked, read_after)
        if plan.gathered:
            _gather_what_is_counted(plan, recomputed, unpacked)
        if self._reordered(statement, statements, plan, batch) is not None:
            kept = self._kept_lists(original)
            if kept is not None:
                return kept
        if self._batch_read_otherwise(original, statement, statements, plan, batch):
            return None
        for scalar in plan.batch_scalars:
            self.report(
                original,
                BATCH_SCALAR,
                f"{scalar} is one value per batch and process: it cannot be gathered per sample",
                False,
            )
        if not plan.gathered:
            return None
        self._report_local_batch_sizes(original, statements, statement, batch, unpacked, plan)
        joined = self._joined_rows(original, plan)
        if joined:
            self.report(
                original,
                JOINED_ROWS,
                f"{', '.join(joined)}: rows the loader's collate_fn joins from its samples' own rows (boxes with "
                "their image's index in this process's batch), not one row per sample: a gather would drop the "
                "padding by counting rows and join indices that point at other processes' images, so nothing is "
                "gathered and the metrics cover this process only; split them into one entry per sample and gather "
                "those lists as objects",
                False,
            )
            return None
        squeezed = _squeezed_samples(after, plan)
        if squeezed:
            self.report(
                original,
                ONE_SAMPLE_BATCHES,
                f"{', '.join(squeezed)}: squeezed to one sample after the forward (x.squeeze(0)), the loop takes its "
                "batch for one sample (a loader of batch size 1); gathered, a batch holds one sample of every process and the squeeze no longer removes the "
                "batch dimension, so nothing is gathered and the metrics cover this process only; gather the values "
                "the metrics read, then loop over their rows",
                False,
            )
            return None
        listed = [name for expr, name in zip(plan.gathered, plan.names) if isinstance(expr, cst.Name) and name in lists]
        if listed and len(listed) != len(plan.gathered):
            # A tensor gather of a list of per-image dicts joins the i-th items of every process;
            # which of the other values are lists is not known here.
            self.report(
                original,
                OBJECT_LISTS,
                f"{', '.join(listed)}: a list of per-sample objects (detection-style batches); not gathered, "
                "so the metrics cover this process only: gather each list on its own with "
                "accelerator.gather_for_metrics(x, use_gather_object=True), tensors as they are",
                False,
            )
            return None
        return _LoopGather(statement, batch, unpacked, plan, recomputed, listed)

    def _joined_rows(self, loop: cst.For, plan: GatherPlan) -> list[str]:
        """The gathered names that hold a batch value the loader's collate function joins from the
        samples' own rows (``for _, imgs, targets in loader`` of a YOLO-style collate: ``targets``),
        where the loader stays prepared (the loaders owner's ``joined_rows_loops``)."""
        site = self.origins.site(loop)
        positions = self.facts.joined_rows_loops.get(site.line, frozenset()) if site is not None else frozenset()
        target = batch_target(loop, through_any_call=True) if positions else None
        if target is None:
            return []
        if isinstance(target, (cst.Tuple, cst.List)):
            rows = {dotted(e.value) for i, e in enumerate(target.elements) if i in positions}
        else:
            rows = {dotted(target)} if -1 in positions else set()
        return [name for expression, name in zip(plan.gathered, plan.names) if root_name(expression) in rows]

    def _python_values(
        self,
        forward: cst.SimpleStatementLine,
        unpacked: Unpacked,
        plan: GatherPlan,
        read_after: set[str],
        lists: set[str],
    ) -> list[str]:
        """A Python list (or number) with one entry per sample of this process (``decode_lengths``
        from the forward, ``lengths = caplens.tolist()``) read after the forward: a tensor gather
        cannot join it, and gathering the tensors without it would pair every process's rows with
        this process's entries. Lists of per-sample objects (detection) are gathered as objects
        instead; none where nothing is gathered."""
        candidates = [*unpacked.python_values, *python_values_bound(forward, self._layouts)]
        python_values = [name for name in dict.fromkeys(candidates) if name in read_after and name not in lists]
        return python_values if plan.gathered else []

    def _report_python_values(self, original: cst.For, python_values: list[str]) -> None:
        """Nothing is gathered where a Python value per sample is read after the forward (see
        :meth:`_python_values`) and the loop keeps no lists to gather after it: the script must
        make it a tensor."""
        self.report(
            original,
            PYTHON_VALUE,
            f"{', '.join(python_values)}: a Python value made per batch (a list of lengths, a number), not a "
            "tensor with a batch dimension: gather_for_metrics cannot join it with the gathered tensors, so "
            "nothing is gathered and the metrics cover this process only; make it a tensor "
            "(torch.tensor(x, device=accelerator.device)) and gather it with the outputs"
            + self._accelerate_lists(original),
            False,
        )

    def _batch_read_otherwise(
        self,
        original: cst.For,
        forward: cst.SimpleStatementLine,
        statements: Sequence[cst.BaseStatement],
        plan: GatherPlan,
        batch: tuple[str, ...],
    ) -> bool:
        """Whether the loop reads its outputs in a way a gather along the batch would break, and
        was reported: a recurrent hidden state (layers first), outputs stored at positions made
        from the batch index, or targets that are positions within the batch."""
        hidden = hidden_states_read(forward, plan.gathered, self._layouts)
        if hidden:
            self.report(
                original,
                SEQUENCE_FIRST,
                f"{', '.join(hidden)}: a recurrent layer's hidden state, (layers, batch, hidden) even in a "
                "batch-first model, and gather_for_metrics joins along dim 0, mixing layers across processes; "
                "not gathered, so the metrics cover this process only (gather hidden.transpose(0, 1) by hand)",
                False,
            )
            return True
        reordered = self._reordered(forward, statements, plan, batch)
        if reordered is not None:
            # ``allcaps[sort_ind]``: after the gather the positions of one process's batch would
            # pick rows of the joined batch.
            self.report(
                original,
                BATCH_ORDER,
                f"{reordered}: a model output used as positions in this process's batch (the order it sorted the "
                "batch in); after a gather they would pick rows of the joined batch, so nothing is gathered and the "
                "metrics cover this process only: re-order first, then gather what is compared "
                "(accelerator.gather_for_metrics((scores, y[sort_ind])))" + self._accelerate_lists(original),
                False,
            )
            return True
        after = statements_after(statements, forward)
        positions = batch_positions(after, set(plan.names) | set(batch), self.facts)
        stored = stored_by_batch_index(after, enumerate_index(original, self.builtin), set(plan.names))
        if stored is not None and plan.gathered:
            # ``preds[i * bs:(i + 1) * bs] = logits...``: after the gather each step holds one
            # batch of every process, N times the rows the slice has room for.
            self.report(
                original,
                INDEXED_STORE,
                f"{stored}: outputs stored at positions computed from the batch index; a gathered step holds "
                "one batch of every process, more rows than the slice, so nothing is gathered and the array "
                "covers this process only: gather the outputs and store them at a running offset "
                "(preds[offset:offset + len(out)] = out; offset += len(out))",
                False,
            )
            return True
        if positions is not None and plan.gathered:
            # ``logits = model(img, txt)`` a similarity matrix over this batch, compared with
            # ``torch.arange(len(img))``: its columns are this process's batch, so gathered rows
            # would be matched with positions in the gathered batch.
            self.report(
                original,
                IN_BATCH_TARGETS,
                f"{positions}: targets made from positions in the batch (in-batch matching, as a similarity "
                "matrix over the batch); gathering would match each process's rows with positions in the joined "
                "batch, so nothing is gathered and the metrics cover this process only: compute the per-sample "
                "result first (hits = logits.argmax(1) == labels), then gather it with "
                "accelerator.gather_for_metrics(hits)",
                False,
            )
            return True
        return False

    def _reordered(
        self,
        forward: cst.SimpleStatementLine,
        statements: Sequence[cst.BaseStatement],
        plan: GatherPlan,
        batch: tuple[str, ...],
    ) -> str | None:
        """``allcaps[sort_ind]`` after the forward: a model output used as positions in this
        process's batch, which a gather would make positions in the joined batch; None where the
        loop has none (or nothing is gathered)."""
        if not plan.gathered:
            return None
        outputs = {name for line in forward.body for name in bound_by(line)}
        return indexed_by_outputs(statements_after(statements, forward), outputs, set(plan.names) | set(batch))

    def _report_local_batch_sizes(
        self,
        original: cst.For,
        statements: Sequence[cst.BaseStatement],
        forward: cst.SimpleStatementLine,
        batch: tuple[str, ...],
        unpacked: Unpacked,
        plan: GatherPlan,
    ) -> None:
        """``n, _ = x.shape`` before the forward is this process's batch size, a Python number
        the gather cannot reach: a sum of it after the gather counts this process's samples only."""
        for size, sum_target in sizes_summed_after(statements, forward, set(batch), self.builtin):
            if size in unpacked.recomputed:
                continue  # counted again from the gathered rows
            first = plan.names[0]
            self.report(
                original,
                LOCAL_BATCH_SIZE,
                f"{size} is the size of this process's batch, read before the gather: {sum_target} counts this "
                f"process's samples only; count the gathered rows instead ({sum_target} += len({first}))",
                False,
            )

    def _write_gather(
        self, original: cst.For, statements: Sequence[cst.BaseStatement], gather: _LoopGather
    ) -> list[cst.BaseStatement]:
        """The loop body with the gather after the forward, the values recomputed from the gathered
        tensors and the row counts moved below it, and the later reads of gathered expressions
        through their new names."""
        plan = gather.plan
        if plan.new_names:  # the taken names are collected only when a new one is needed
            self._taken_names.update(plan.new_names)
        gather_lines: list[cst.SimpleStatementLine]
        if gather.object_lists:
            gather_lines = [gather_objects_statement(name, self.facts) for name in gather.object_lists]
        else:
            gather_lines = gather_statements(
                plan, maybe_objects(original, gather.batch, plan, self.builtin), self.facts
            )
        report_summed_batch_means(self, original)
        self._metric_updates.note(self, statements_after(statements, gather.forward), plan)
        gather_lines += [
            cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=value)])
            for name, value, _ in gather.recomputed
        ]
        body = list(statements)
        summed_counts = gather.unpacked.summed_counts
        if summed_counts:
            # ``total += labels.size(0)`` before the forward counts this process's rows: it moves
            # below the gather, which leaves the count of one process's run unchanged.
            # Its comments move with it.
            body = [line for line in body if id(line) not in summed_counts]
            gather_lines += [line for line, _ in summed_counts.values()]
        return insert_after(body, gather.forward, gather_lines, plan, self)

    def padded_loaders(self) -> set[str]:
        """Loaders whose collate function pads each batch to its own longest sample, found the
        first time a loop asks (most loops gather no per-token value, and a second conversion of
        the output, the verification, makes no gather: neither searches the file)."""
        if self._padded_loaders is None:
            self._padded_loaders = self._find_padded_loaders()
        return self._padded_loaders

    def _report_gathered(self, original: cst.For, plan: GatherPlan) -> None:
        """The gather made, and what of the loader's batches it cannot make right."""
        gathered = ", ".join(expression_code(e) for e in plan.gathered)
        self.report(original, GATHERED, f"gather_for_metrics({gathered}) after the forward", True)
        loader = iterated_name(original.iter, through_any_call=True)
        self._gathered_loops[-1].append(GatheredLoop(loader or "", original))
        if gathers_padded_sequences(original, plan) and loader in self.padded_loaders():
            self.report(
                original,
                RAGGED_PADDING,
                f"{loader}'s collate_fn pads each batch to its own longest sample: two processes' "
                "batches can differ in length, and the gather then fails; pad each gathered sequence first, "
                "accelerator.pad_across_processes(x, dim=1, pad_index=<its padding value>), before "
                "gather_for_metrics",
                False,
            )
        stream = self._streams.get(loader or "")
        if stream is not None:
            self.report(
                original,
                UNSIZED_STREAM,
                f"{stream} is an IterableDataset without __len__: the last batches are padded with repeated "
                "samples to a batch per process, and without a length gather_for_metrics cannot tell them "
                f"from real ones, so the metrics count them too; give {stream} a __len__ (the number of "
                "samples it yields) so the gather drops them, or drop them by hand",
                False,
            )


def _without_padding(loop: cst.For, accelerator: cst.BaseExpression, *, skip_empty: bool) -> cst.For:
    """``for x, y in accelerator.without_padding(loader):`` for ``for x, y in loader:`` (also
    under ``enumerate``, a progress bar): the loader's batches cut to this process's real rows.
    ``skip_empty=False`` in a module that trains: its models are wrapped in DDP, whose backward
    (a helper object's, on the prepared model) all-reduces, so every process keeps every batch
    (one with no real row then has none)."""
    loader = iterated(loop.iter, through_any_call=True)
    args = [cst.Arg(loader)]
    if not skip_empty:
        args.append(
            cst.Arg(
                cst.Name("False"),
                keyword=cst.Name("skip_empty"),
                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
            )
        )
    call = cst.Call(func=cst.Attribute(accelerator, cst.Name("without_padding")), args=args)
    if loader is loop.iter:
        return loop.with_changes(iter=call)
    return loop.with_changes(iter=cast(cst.BaseExpression, loop.iter.deep_replace(loader, call)))


def _recomputed(unpacked: Unpacked, read_after: set[str]) -> list[Recomputed]:
    """``b_size = real.size(0)``, ``lengths = (caplens - 1).tolist()``: Python values of this
    process's rows that the loop reads after the forward (or that such a value reads: ``n =
    len(lengths)``), computed again from the gathered tensors after the gather (``total +=
    b_size``, ``range(b_size)``, ``pack_padded_sequence(scores, lengths)`` then cover every
    sample). Their statements are read again as written: the values they read are gathered."""
    needed = set(read_after)
    for name in reversed(list(unpacked.recomputed)):
        if name in needed:
            needed |= variables_read(unpacked.recomputed[name][0])
    return [(name, *unpacked.recomputed[name]) for name in unpacked.recomputed if name in needed]


def _gather_what_is_counted(plan: GatherPlan, recomputed: list[Recomputed], unpacked: Unpacked) -> None:
    """Adds to the gather the batch tensors the recomputed values and the moved row counts read,
    whole, where the plan does not gather them whole already."""
    whole = {name for expr, name in zip(plan.gathered, plan.names) if isinstance(expr, cst.Name)}
    counted = [tensors for _, _, tensors in recomputed] + [{t} for _, t in unpacked.summed_counts.values()]
    for tensors in counted:
        for tensor in sorted(tensors - whole):
            plan.gathered.append(cst.Name(tensor))
            plan.names.append(tensor)
            whole.add(tensor)


def _without_padding_call(node: cst.CSTNode) -> bool:
    """``accelerator.without_padding(loader)`` (or ``self.accelerator...``): a loop converted
    already."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "without_padding"
    )
