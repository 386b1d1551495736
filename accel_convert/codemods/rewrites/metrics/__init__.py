"""ACC113 metrics: gather per-sample outputs and targets in evaluation loops with ``gather_for_metrics``.

On N processes each rank sees 1/N of the evaluation set, and the last global batch is padded with
repeated samples. Sums of Python floats (``correct += ...item()``) cannot be de-duplicated, so the
per-sample tensors are gathered right after the forward, before anything reduces them:
``gather_for_metrics`` concatenates every rank's rows and drops the padding, and the rest of the
loop then computes the single-process numbers. An evaluation loop is, as for every rule, a loop
over a data loader with no backward in it,
under ``torch.no_grad()``/``inference_mode()``/``set_grad_enabled(False)``, in a ``@torch.no_grad()``
function, after ``model.eval()``, or decoding with ``model.generate``.

Only tensors with a batch dimension are gathered. A Python value the loop makes from the batch
before the forward, a row count (``b_size = real.size(0)``) or a list (``decode_lengths = (caplens -
1).tolist()``), is computed again after the gather from the gathered tensors, so ``total += b_size``
and ``for j in range(b_size)`` cover every process's rows; ``range(<the loaders' batch size>)`` over
the gathered batch becomes ``range(len(x))`` of a gathered tensor. A Python value that cannot be
computed again (one the model's ``forward`` returns, also a model class of another module of the
program; one bound by unpacking) cannot be joined with the gathered tensors: the loop is left as
written and reported (ACC946). So is a loop (ACC955) that indexes the batch with a model output
(``allcaps[sort_ind]``, the order a captioning decoder sorted its batch in): positions in one
process's batch would pick rows of the joined batch.

Where the outputs cannot be gathered after the forward for one of those two reasons, and what the
loop computes is lists it keeps per sample (sgrvinod's captioning ``validate()``:
``references.append(img_captions)`` in a loop over the batch's images, ``hypotheses.extend(preds)`` of
``.tolist()`` values, then ``corpus_bleu(references, hypotheses)`` after the loop), the lists are
gathered after the loop instead: the loop iterates ``accelerator.without_padding(loader)`` (each
process's real samples once; a batch with no real row is skipped, as no collective and no backward
runs in the loop, and a model's code often fails on an empty batch), and each list
becomes ``references = accelerator.gather_object(references)``, every process's list joined in
process order. The i-th items of two lists stay a pair, and a corpus metric computed from them (a
BLEU score) is the one-process value on every process, as is what it decides (the best epoch, early
stopping). Running sums in the same loop are summed across processes after it. The lists must be
bound empty before the loop (within any loop around it: each evaluation starts them afresh), read in
it only where they grow (or in an ``assert``), and grown with values made from the batch, the model's
outputs and names the loop does not change (through its assignments and lists of its own). Lists
read while the loop runs, bound once for several evaluations, grown with the batch index, a running
sum or a per-batch ``.item()``, or a loop that stops early (``break``) keep the report. With
``--target accelerate``, which cannot drop the padding of the last round from Python lists, the loop
is reported as before, saying which lists the runtime would gather.

Model outputs read through attributes (``outputs.logits``) or batches read by key
(``batch["labels"]``) are gathered as those expressions into new names that the rest of the loop
uses. A batch-mean ``outputs.loss`` (or a ``loss`` among the forward's outputs, or any output the
loop reads with ``.item()``: one value per batch) cannot be gathered per sample and is reported
(ACC949, a warning), as is a forward nested inside a larger expression or sitting in a branch of an
``if``/``else`` (a ``try`` block, a loop) inside the loop (ACC943, saying which). A size read off the batch
before the forward (``n, _ = x.shape``, ``n = len(x)``) is a Python number, not a per-sample row: it
is not gathered, and a sum of it after the gather (``total += n``, this process's samples only) is
reported (ACC950), with the gathered rows to count instead.

An evaluation that takes gradients for its inputs (a module that trains nothing: an FGSM attack's
``loss.backward()`` then ``data.grad``) needs each process's own rows between its forwards: its
Python counts (``correct += 1``) are summed across processes after the loop
(``accelerator.reduce(torch.tensor(correct, device=accelerator.device), "sum").item()``), and a
``len(loader)`` it divides by is reported (ACC941). So is an evaluation loop in a module that
trains, when the only backward in it is not one that trains (a helper object's own ``backward``:
an attack, a saliency map, Grad-CAM). The loop iterates ``accelerator.without_padding(loader)``:
the samples that pad the last round of batches (repeated so that every process gets a batch) are
dropped, so each sample is counted once; in a module that trains (its models wrapped in DDP),
``skip_empty=False`` keeps a batch with no real row as an empty one, so that every process runs as
many batches. With ``--target accelerate``, which has no such method, the padding of a ragged last
batch is counted too.

A mean over batches (``/ len(loader)``, ``/ (batch_idx + 1)``, ``np.mean`` of a list appended once per
batch, a ``steps += 1`` counter) is reported (ACC941): the original weighs each of its batches
equally, while a gathered per-batch value averages one batch of every process (the last ones
ragged or missing), so the mean changes; the one-process mean over batches cannot be rebuilt
from gathered batches. Evaluation over an ``IterableDataset`` of the file without ``__len__`` is
reported too (ACC953): its last batches are padded and, without a length, the gather cannot drop the
padding. Batches of per-sample lists (detection: ``collate_fn`` returning ``tuple(zip(*batch))``,
outputs rebuilt per image) are gathered list by list with ``use_gather_object=True``; where only
some of the values are known to be lists, the loop is reported instead (ACC951).

An ensemble's ``probs = torch.stack([m(x).softmax(-1) for m in models]).mean(0)`` is a forward
too when every member of ``models`` goes through a function that prepares its model parameter
(``for m in models: train(m, loader)``, the prepare rule's ``accelerator.prepare(model, ...)``
there; the list may reach the evaluation as a parameter): the stack's new first dimension is
averaged away, one row per sample remains. Members of a list nothing prepares, or stacked
without that average, are reported (ACC945).

A torchmetrics metric updated with the gathered values (``metric.update(output, target)``) would
sync across processes once more in ``compute()`` (its default ``sync_on_compute=True``): ratios
come out right, but sums and counts (``SumMetric``, a confusion matrix, ``MeanSquaredError``'s
sums) N times. Its constructor gets ``sync_on_compute=False``, when every update of it receives
gathered values and the constructor is a torchmetrics metric (or a ``MetricCollection`` of them);
otherwise (a wrapper, the file's own subclass, a metric also updated per process, an ``x.update``
of gathered values whose ``x`` the rule cannot trace) it is reported (ACC940).

A sequence-first model (``nn.Transformer``, ``nn.LSTM``... without ``batch_first=True``) or batches
padded sequence-first (``pad_sequence``) give ``(sequence, batch, ...)`` tensors: the gather would
join sequence positions of different processes (or fail on different lengths). Those loops are
reported (ACC922) and left as they are: the batch dimension and the padding to strip are the
script's to say.

An evaluation written as a comprehension over a prepared loader is reported (ACC938): a
comprehension has no place for a gather after its forward.

An evaluation loop where the accelerator is not reachable is reported (ACC939): its metrics cover
one process.

A batch-mean loss added up per batch is reported (ACC942): after the gather each term covers one
batch of every process, so the sum shrinks with the process count.

A model run inside another call (a generate or decode helper) is reported (ACC944): its output is
not gathered, and decoded lengths may differ between processes. Where the evaluation's result
decides work the processes share (a save under ``if score > best:``, a path every process reads),
the locality owner keeps its loader unprepared instead: every process evaluates every batch.

Outputs stored at positions computed from the batch index (``preds[i * bs:(i + 1) * bs] = ...``)
are reported (ACC947): a gathered step holds one batch of every process, more rows than the slice;
the running-offset form ``preds[offset:offset + len(out)]`` is gathered.

Targets made from positions in the batch (``torch.arange(len(x))`` against a similarity matrix over
the batch, in-batch matching) are reported (ACC948): gathered, each process's rows would be matched
with positions in the joined batch.

Token-level values of a loader whose ``collate_fn`` pads each batch to its own longest sample are
reported (ACC952): two processes' batches can differ in length, and the gather then fails.

Batch values a loader's ``collate_fn`` joins from the samples' own rows (a detector's boxes,
``torch.cat(targets, 0)`` with a column holding each box's image index in the batch: a function or a
dataset class's method, of the file or of another module of the program) cannot be gathered: a row
is not a sample, so the gather would drop the last batch's padding by counting rows, and joined
indices would point at another process's images. The loaders owner keeps an evaluation loader of
that kind unprepared instead (``model/loaders.joined_rows_loaders``): every process evaluates every
batch, as the original does, and nothing is gathered. One that stays prepared (a training loop
iterates it too, or another module hands it in prepared) is reported (ACC965), nothing gathered.

A loop that takes its batch for one sample after the forward (SRGAN's validation over a loader of
batch size 1: ``display_transform()(sr.data.cpu().squeeze(0))``) is reported (ACC966) and nothing is
gathered: a gathered batch holds one sample of every process, and the squeeze would leave the batch
dimension in.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import name_words
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.model.locality import locality
from accel_convert.codemods.rewrites.metrics.codes import (
    BATCH_ORDER,
    BATCH_SCALAR,
    COMPREHENSION,
    FORWARD_IN_CALL,
    GATHERED,
    IN_BATCH_TARGETS,
    INDEXED_STORE,
    JOINED_ROWS,
    LOCAL_BATCH_SIZE,
    MANUAL,
    MEAN_OF_BATCHES,
    NESTED_FORWARD,
    OBJECT_LISTS,
    ONE_SAMPLE_BATCHES,
    PYTHON_VALUE,
    RAGGED_PADDING,
    SEQUENCE_FIRST,
    SUMMED_BATCH_MEANS,
    SYNCED_TWICE,
    UNKNOWN_MODEL,
    UNREACHABLE,
    UNSIZED_STREAM,
)
from accel_convert.codemods.rewrites.metrics.ensembles import prepared_model_lists
from accel_convert.codemods.rewrites.metrics.forward import evaluated_models
from accel_convert.codemods.rewrites.metrics.layouts import model_layouts
from accel_convert.codemods.rewrites.metrics.loaders import (
    loaders_of_sample_lists,
    loaders_over_streams,
    loaders_padded_per_batch,
)
from accel_convert.codemods.rewrites.metrics.loop import EvalLoopRewriter
from accel_convert.codemods.rewrites.metrics.torchmetrics import SyncOnComputeOff, torchmetrics_in

# This module is the rule: its docstring, codes and examples. Each question it asks lives in a
# module of its own (the docstring of each says what it owns); ``loop.py`` holds the order in
# which the walk asks them.


class MetricsCodemod(Rule):
    code = GATHERED
    name = "metrics"
    fixes = {
        "ACC938": (
            "Write the comprehension as a ``for`` loop over the loader, which the converter gathers, or gather the per-batch values yourself: ``preds = accelerator.gather_for_metrics(model(x).argmax(1))`` for each batch."
        ),
        "ACC939": (
            "Make the accelerator reachable in the evaluation: add an ``accelerator`` parameter to the function and pass it from the caller, then gather the outputs and targets with ``accelerator.gather_for_metrics((outputs, targets))`` right after the forward."
        ),
        "ACC940": (
            "Build the metric with ``sync_on_compute=False`` and update it with gathered values only, or update it with this process's values only and keep its default sync; not both."
        ),
        "ACC941": (
            'Compute the metric from per-sample values instead of averaging batch means: add up per-sample counts or ``reduction="sum"`` losses over the gathered batches and divide by the number of samples (``total += len(y)``) after the loop.'
        ),
        "ACC942": (
            'Sum per-sample losses: compute the evaluation loss with ``reduction="sum"`` (e.g. ``F.cross_entropy(out, y, reduction="sum")``) and divide by the number of samples after the loop.'
        ),
        "ACC943": (
            "Assign the forward's output to a name on its own line (``output = model(x)``), then use it in the larger expression; convert again, or gather it yourself with ``accelerator.gather_for_metrics((output, y))``. Where the forward sits in a branch of an ``if``/``else`` (or a ``try`` block, a loop) inside the evaluation loop, gather its output with the targets right after it, in each branch."
        ),
        "ACC944": (
            "Gather what the call returns together with the targets: ``preds, targets = accelerator.gather_for_metrics((preds, targets))`` right after it, padded first with ``accelerator.pad_across_processes(preds, dim=1)`` where its length varies."
        ),
        "ACC945": (
            "Gather the predictions and targets after they are computed: ``preds, targets = accelerator.gather_for_metrics((preds, targets))`` in the loop, before anything counts them."
        ),
        "ACC946": (
            "Make the Python value a tensor on the device, ``lengths = torch.tensor(lengths, device=accelerator.device)``, and gather it with the outputs: ``output, lengths = accelerator.gather_for_metrics((output, lengths))``."
        ),
        "ACC947": (
            "Gather the outputs and store them at a running offset instead of a position from the batch index: ``out = accelerator.gather_for_metrics(out)``, ``preds[offset:offset + len(out)] = out``, ``offset += len(out)``."
        ),
        "ACC948": (
            "Compute the per-sample result inside the batch first (``hits = logits.argmax(1) == labels``), then gather that: ``hits = accelerator.gather_for_metrics(hits)``."
        ),
        "ACC955": (
            "Re-order first, then gather what is compared: ``scores, targets = accelerator.gather_for_metrics((scores, y[sort_ind]))``, so positions are used within this process's batch only."
        ),
        "ACC966": (
            "Gather the values the metrics read right after the forward, then take each sample out of the gathered rows: ``sr, hr = accelerator.gather_for_metrics((sr, hr))`` and ``for s, h in zip(sr, hr): ...`` where the loop squeezed ``sr.squeeze(0)``."
        ),
        "ACC965": (
            "Split the joined rows into one entry per sample inside the loop (``boxes = [targets[targets[:, 0] == i] for i in range(len(imgs))]``) and gather that list on its own as objects, ``boxes = accelerator.gather_for_metrics(boxes, use_gather_object=True)``, the outputs as they are: each sample's rows stay together and the padding is dropped by sample."
        ),
        "ACC949": (
            'Compute the loss per sample (``reduction="none"``) and gather that, or ``reduction="sum"`` reduced across processes with ``accelerator.reduce(loss, "sum")``, and divide by the gathered sample count.'
        ),
        "ACC950": (
            "Count the gathered rows instead of the batch size read before the gather: ``total += len(output)`` (the gathered output), not ``total += n``."
        ),
        "ACC951": (
            "Gather each list of per-sample objects on its own: ``targets = accelerator.gather_for_metrics(targets, use_gather_object=True)``, and gather tensors as they are."
        ),
        "ACC952": (
            "Pad each sequence to the longest across processes before gathering: ``x = accelerator.pad_across_processes(x, dim=1, pad_index=PAD)``, then ``accelerator.gather_for_metrics(x)``; or pad every batch to one fixed length in the ``collate_fn``."
        ),
        "ACC953": (
            "Give the ``IterableDataset`` a ``__len__`` that returns the number of samples it yields, so the gather drops the padded repeats; or drop the last ``num_processes`` repeats by hand."
        ),
        "ACC922": (
            "Gather batch-first views by hand: transpose the model's outputs and the targets to ``(batch, ...)`` (``output.transpose(0, 1)``), pad them with ``accelerator.pad_across_processes(x, dim=1)`` where lengths differ, then ``accelerator.gather_for_metrics((output, target))``; or build the model with ``batch_first=True`` and convert again."
        ),
    }
    providers = (locality,)
    extra_codes = {
        COMPREHENSION: "metrics-comprehension: evaluation written as a comprehension over a prepared loader, not gathered (write it as a for loop)",
        UNREACHABLE: "metrics-unreachable: an evaluation loop where the accelerator is not reachable: its metrics cover one process",
        SYNCED_TWICE: "metrics-synced-twice: a metric object updated with gathered values that syncs across processes again in compute()",
        MEAN_OF_BATCHES: "metrics-mean-of-batches: a mean over batches, which the gather changes (a batch of every process per step)",
        SUMMED_BATCH_MEANS: "metrics-summed-batch-means: a batch-mean loss added up per batch: after the gather the sum shrinks with the process count",
        NESTED_FORWARD: (
            "metrics-nested-forward: the forward nested in a larger expression, or in a branch or block inside "
            "the loop: its output is not gathered"
        ),
        FORWARD_IN_CALL: "metrics-forward-in-call: the model runs inside another call (a generate or decode helper): its output is not gathered",
        UNKNOWN_MODEL: "metrics-unknown-model: evaluation with no forward of a known model (models from a list, an ensemble), not gathered",
        PYTHON_VALUE: "metrics-python-value: a Python value made per batch (a list of lengths, a number) among the values to gather: nothing gathered",
        INDEXED_STORE: "metrics-indexed-store: outputs stored at positions computed from the batch index: nothing gathered",
        IN_BATCH_TARGETS: "metrics-in-batch-targets: targets made from positions in the batch (in-batch matching): nothing gathered",
        BATCH_ORDER: "metrics-batch-order: a model output that orders this process's batch (y[sort_ind]): nothing gathered",
        ONE_SAMPLE_BATCHES: "metrics-one-sample-batches: a batch taken for one sample (x.squeeze(0)): nothing gathered",
        JOINED_ROWS: "metrics-joined-rows: batch values joined from the samples' own rows (a detector's boxes): nothing gathered",
        BATCH_SCALAR: "metrics-batch-scalar: a value that is one per batch and process (a loss): it cannot be gathered per sample",
        LOCAL_BATCH_SIZE: "metrics-local-batch-size: a batch size read before the gather, summed: it counts this process's samples only",
        OBJECT_LISTS: "metrics-object-lists: lists of per-sample objects (detection-style batches), not gathered",
        RAGGED_PADDING: "metrics-ragged-padding: batches padded to their own longest sample: gathering sequences of different lengths fails",
        UNSIZED_STREAM: "metrics-unsized-stream: an IterableDataset without __len__: the padded repeats of its last batches are counted",
        SEQUENCE_FIRST: "metrics-sequence-first: evaluation of a sequence-first model or (sequence, batch) data, "
        "not gathered (gather along the batch dimension by hand)",
    }
    aliases = {MANUAL: (*(code for code in extra_codes if code != SEQUENCE_FIRST),)}
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
                    test_set = TensorDataset(torch.randn(20, 8), torch.randint(0, 3, (20,)))
                    train_loader = DataLoader(train_set, batch_size=8)
                    test_loader = DataLoader(test_set, batch_size=8)
                    model = nn.Linear(8, 3)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in train_loader:
                        optimizer.zero_grad()
                        loss = nn.functional.cross_entropy(model(data), target)
                        loss.backward()
                        optimizer.step()
                    model.eval()
                    correct = 0
                    with torch.no_grad():
                        for data, target in test_loader:
                            output = model(data)
                            correct += output.argmax(dim=1).eq(target).sum().item()
                    print(f"accuracy {correct}/{len(test_loader.dataset)}")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
                    test_set = TensorDataset(torch.randn(20, 8), torch.randint(0, 3, (20,)))
                    train_loader = DataLoader(train_set, batch_size=8)
                    test_loader = DataLoader(test_set, batch_size=8)
                    model = nn.Linear(8, 3)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, train_loader, test_loader = accelerator.prepare(
                        model, optimizer, train_loader, test_loader
                    )
                    for data, target in train_loader:
                        optimizer.zero_grad()
                        loss = nn.functional.cross_entropy(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    model.eval()
                    correct = 0
                    with torch.no_grad():
                        for data, target in test_loader:
                            output = model(data)
                            output, target = accelerator.gather_for_metrics((output, target))
                            correct += output.argmax(dim=1).eq(target).sum().item()
                    accelerator.print(f"accuracy {correct}/{len(test_loader.dataset)}")


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            # Gradients off with set_grad_enabled(False): an evaluation like any other. A row
            # count taken before the forward is read again from the gathered batch.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
                    test_set = TensorDataset(torch.randn(20, 8), torch.randint(0, 3, (20,)))
                    train_loader = DataLoader(train_set, batch_size=8)
                    test_loader = DataLoader(test_set, batch_size=8)
                    model = nn.Linear(8, 3)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in train_loader:
                        optimizer.zero_grad()
                        loss = nn.functional.cross_entropy(model(data), target)
                        loss.backward()
                        optimizer.step()
                    correct = total = 0
                    with torch.set_grad_enabled(False):
                        for data, target in test_loader:
                            n = target.size(0)
                            output = model(data)
                            correct += output.argmax(dim=1).eq(target).sum().item()
                            total += n
                    print(f"accuracy {correct}/{total}")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
                    test_set = TensorDataset(torch.randn(20, 8), torch.randint(0, 3, (20,)))
                    train_loader = DataLoader(train_set, batch_size=8)
                    test_loader = DataLoader(test_set, batch_size=8)
                    model = nn.Linear(8, 3)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, train_loader, test_loader = accelerator.prepare(
                        model, optimizer, train_loader, test_loader
                    )
                    for data, target in train_loader:
                        optimizer.zero_grad()
                        loss = nn.functional.cross_entropy(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    correct = total = 0
                    with torch.set_grad_enabled(False):
                        for data, target in test_loader:
                            n = target.size(0)
                            output = model(data)
                            output, target = accelerator.gather_for_metrics((output, target))
                            n = target.size(0)
                            correct += output.argmax(dim=1).eq(target).sum().item()
                            total += n
                    accelerator.print(f"accuracy {correct}/{total}")


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            # The forward returns a Python list (decode_lengths), and what the loop computes is
            # two lists kept per sample, read after it: the loop runs over each process's real
            # samples, and the lists are gathered as objects after it, in process order.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Captioner(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.linear = nn.Linear(8, 5 * 6)

                    def forward(self, x, lengths):
                        decode_lengths = (lengths - 1).tolist()
                        return self.linear(x).view(-1, 5, 6), decode_lengths


                def validate(model, loader):
                    references, hypotheses = [], []
                    with torch.no_grad():
                        for x, caps, lengths in loader:
                            scores, decode_lengths = model(x, lengths)
                            for j in range(caps.shape[0]):
                                references.append(caps[j, 1 : lengths[j]].tolist())
                            preds = scores.argmax(2).tolist()
                            hypotheses.extend([p[:n] for p, n in zip(preds, decode_lengths)])
                    matched = sum(len(set(r) & set(h)) for r, h in zip(references, hypotheses))
                    return matched / sum(len(h) for h in hypotheses)


                def main():
                    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 6, (64, 5)), torch.randint(2, 6, (64,)))
                    test_set = TensorDataset(torch.randn(20, 8), torch.randint(0, 6, (20, 5)), torch.randint(2, 6, (20,)))
                    train_loader = DataLoader(train_set, batch_size=8)
                    test_loader = DataLoader(test_set, batch_size=8)
                    model = Captioner()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, caps, lengths in train_loader:
                        optimizer.zero_grad()
                        scores, _ = model(x, lengths)
                        nn.functional.cross_entropy(scores.flatten(0, 1), caps.flatten()).backward()
                        optimizer.step()
                    model.eval()
                    print(f"overlap {validate(model, test_loader):.3f}")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class Captioner(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.linear = nn.Linear(8, 5 * 6)

                    def forward(self, x, lengths):
                        decode_lengths = (lengths - 1).tolist()
                        return self.linear(x).view(-1, 5, 6), decode_lengths


                def validate(model, loader, accelerator):
                    references, hypotheses = [], []
                    with torch.no_grad():
                        for x, caps, lengths in accelerator.without_padding(loader):
                            scores, decode_lengths = model(x, lengths)
                            for j in range(caps.shape[0]):
                                references.append(caps[j, 1 : lengths[j]].tolist())
                            preds = scores.argmax(2).tolist()
                            hypotheses.extend([p[:n] for p, n in zip(preds, decode_lengths)])
                        references = accelerator.gather_object(references)
                        hypotheses = accelerator.gather_object(hypotheses)
                    matched = sum(len(set(r) & set(h)) for r, h in zip(references, hypotheses))
                    return matched / sum(len(h) for h in hypotheses)


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 6, (64, 5)), torch.randint(2, 6, (64,)))
                    test_set = TensorDataset(torch.randn(20, 8), torch.randint(0, 6, (20, 5)), torch.randint(2, 6, (20,)))
                    train_loader = DataLoader(train_set, batch_size=8)
                    test_loader = DataLoader(test_set, batch_size=8)
                    model = Captioner()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, train_loader, test_loader = accelerator.prepare(
                        model, optimizer, train_loader, test_loader
                    )
                    for x, caps, lengths in train_loader:
                        optimizer.zero_grad()
                        scores, _ = model(x, lengths)
                        accelerator.backward(nn.functional.cross_entropy(scores.flatten(0, 1), caps.flatten()))
                        optimizer.step()
                    model.eval()
                    accelerator.print(f"overlap {validate(model, test_loader, accelerator):.3f}")


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            # The same on --target accelerate: it cannot drop the padding of the last round from
            # Python lists, so the loop is left as written and reported.
            code=PYTHON_VALUE,
            target="accelerate",
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Captioner(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.linear = nn.Linear(8, 5 * 6)

                    def forward(self, x, lengths):
                        decode_lengths = (lengths - 1).tolist()
                        return self.linear(x).view(-1, 5, 6), decode_lengths


                def validate(model, loader):
                    references, hypotheses = [], []
                    with torch.no_grad():
                        for x, caps, lengths in loader:
                            scores, decode_lengths = model(x, lengths)
                            for j in range(caps.shape[0]):
                                references.append(caps[j, 1 : lengths[j]].tolist())
                            preds = scores.argmax(2).tolist()
                            hypotheses.extend([p[:n] for p, n in zip(preds, decode_lengths)])
                    matched = sum(len(set(r) & set(h)) for r, h in zip(references, hypotheses))
                    return matched / sum(len(h) for h in hypotheses)


                def main():
                    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 6, (64, 5)), torch.randint(2, 6, (64,)))
                    test_set = TensorDataset(torch.randn(20, 8), torch.randint(0, 6, (20, 5)), torch.randint(2, 6, (20,)))
                    train_loader = DataLoader(train_set, batch_size=8)
                    test_loader = DataLoader(test_set, batch_size=8)
                    model = Captioner()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, caps, lengths in train_loader:
                        optimizer.zero_grad()
                        scores, _ = model(x, lengths)
                        nn.functional.cross_entropy(scores.flatten(0, 1), caps.flatten()).backward()
                        optimizer.step()
                    model.eval()
                    print(f"overlap {validate(model, test_loader):.3f}")


                if __name__ == "__main__":
                    main()
            """,
            message=(
                "decode_lengths: a Python value made per batch (a list of lengths, a number), not a tensor with a "
                "batch dimension: gather_for_metrics cannot join it with the gathered tensors, so nothing is "
                "gathered and the metrics cover this process only; make it a tensor "
                "(torch.tensor(x, device=accelerator.device)) and gather it with the outputs; references, "
                "hypotheses could be gathered after the loop as objects, but Accelerate has no way to drop the "
                "samples that pad the last round of batches from them (converting for this project's runtime "
                "does: accelerator.without_padding(loader))"
            ),
        ),
        Example(
            # decode_lengths is a Python list the model's forward makes, and the loop counts in
            # Python sums, not lists it could gather after the loop: left as written, reported.
            code=PYTHON_VALUE,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Tagger(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.linear = nn.Linear(8, 3)

                    def forward(self, x, lengths):
                        decode_lengths = (lengths - 1).tolist()
                        return self.linear(x), decode_lengths


                def main():
                    train_set = TensorDataset(torch.randn(64, 6, 8), torch.randint(0, 3, (64, 6)), torch.randint(2, 7, (64,)))
                    test_set = TensorDataset(torch.randn(20, 6, 8), torch.randint(0, 3, (20, 6)), torch.randint(2, 7, (20,)))
                    train_loader = DataLoader(train_set, batch_size=8)
                    test_loader = DataLoader(test_set, batch_size=8)
                    model = Tagger()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, tags, lengths in train_loader:
                        optimizer.zero_grad()
                        scores, _ = model(x, lengths)
                        nn.functional.cross_entropy(scores.flatten(0, 1), tags.flatten()).backward()
                        optimizer.step()
                    correct = words = 0
                    with torch.no_grad():
                        for x, tags, lengths in test_loader:
                            scores, decode_lengths = model(x, lengths)
                            for i, n in enumerate(decode_lengths):
                                correct += (scores[i, :n].argmax(-1) == tags[i, :n]).sum().item()
                                words += n
                    print(f"accuracy {correct}/{words}")


                if __name__ == "__main__":
                    main()
            """,
            message=(
                "decode_lengths: a Python value made per batch (a list of lengths, a number), not a tensor with a "
                "batch dimension: gather_for_metrics cannot join it with the gathered tensors, so nothing is "
                "gathered and the metrics cover this process only; make it a tensor "
                "(torch.tensor(x, device=accelerator.device)) and gather it with the outputs"
            ),
        ),
        Example(
            code=BATCH_SCALAR,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Regressor(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.linear = nn.Linear(8, 1)

                    def forward(self, x, y):
                        prediction = self.linear(x)
                        return nn.functional.mse_loss(prediction, y), prediction


                def main():
                    train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    test_loader = DataLoader(TensorDataset(torch.randn(20, 8), torch.randn(20, 1)), batch_size=8)
                    model = Regressor()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, y in train_loader:
                        optimizer.zero_grad()
                        loss, _ = model(x, y)
                        loss.backward()
                        optimizer.step()
                    model.eval()
                    total_loss = 0.0
                    with torch.no_grad():
                        for x, y in test_loader:
                            loss, prediction = model(x, y)
                            total_loss += loss.item()
                    print(f"eval loss {total_loss / len(test_loader):.4f}")


                if __name__ == "__main__":
                    main()
            """,
            message="loss is one value per batch and process: it cannot be gathered per sample",
        ),
        Example(
            code=SEQUENCE_FIRST,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Tagger(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.lstm = nn.LSTM(8, 16)
                        self.head = nn.Linear(16, 3)

                    def forward(self, x):
                        # the LSTM takes (sequence, batch, features); so does everything after it
                        out, _ = self.lstm(x.transpose(0, 1))
                        return self.head(out)


                def main():
                    train_loader = DataLoader(TensorDataset(torch.randn(64, 5, 8), torch.randint(0, 3, (64, 5))), batch_size=8)
                    test_loader = DataLoader(TensorDataset(torch.randn(20, 5, 8), torch.randint(0, 3, (20, 5))), batch_size=8)
                    model = Tagger()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, y in train_loader:
                        optimizer.zero_grad()
                        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.t().flatten())
                        loss.backward()
                        optimizer.step()
                    model.eval()
                    correct = 0
                    with torch.no_grad():
                        for x, y in test_loader:
                            output = model(x)
                            correct += (output.argmax(-1) == y.t()).sum().item()
                    print(f"accuracy {correct}/{5 * len(test_loader.dataset)}")


                if __name__ == "__main__":
                    main()
            """,
            message="the model is sequence-first (nn.LSTM built without batch_first=True): its tensors are "
            "(sequence, batch, ...) and gather_for_metrics joins along dim 0, mixing sequence positions across "
            "processes; not gathered, so the metrics cover this process only (gather batch-first views by hand: "
            "output.transpose(0, 1))",
        ),
        Example(
            code=COMPREHENSION,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                with torch.no_grad():
                    correct = sum((model(x).argmax(1) == y).sum().item() for x, y in test_loader)
                print(f"accuracy {correct / len(test_loader.dataset):.3f}")
            """,
            message=(
                "evaluation in a comprehension over the prepared loader test_loader: not gathered, so "
                "what it computes covers this process's shard only (write it as a for loop over the "
                "batches, which the converter gathers, or gather the per-batch values with "
                "accelerator.gather_for_metrics)"
            ),
        ),
        Example(
            code=UNREACHABLE,
            before="""
                import torch
                import torch.nn as nn
                from accelerate import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                if __name__ == "__main__":
                    torch.manual_seed(0)
                    model = nn.Linear(8, 3)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                    test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                    correct = 0
                    with torch.no_grad():
                        for x, y in test_loader:
                            correct += (model(x).argmax(1) == y).sum().item()
                    print("before training", correct)
                    accelerator = Accelerator()
                    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
                    for x, y in train_loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.cross_entropy(model(x), y))
                        optimizer.step()
            """,
            message=("evaluation loop where the accelerator is not reachable: metrics cover this rank only"),
        ),
        Example(
            code=SYNCED_TWICE,
            before="""
                import torch
                import torch.nn as nn
                import torchmetrics
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                metric = torchmetrics.SumMetric()
                for x, y in train_loader:
                    optimizer.zero_grad()
                    output = model(x)
                    nn.functional.cross_entropy(output, y).backward()
                    optimizer.step()
                    metric.update(output.detach().argmax(1) == y)

                model.eval()
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x)
                        metric.update(output.argmax(1) == y)
                print(metric.compute())
            """,
            message=(
                "metric is updated with gathered values, and its compute() syncs across processes again "
                "(counting sums N times); not changed because it is also updated with this process's "
                "values only: build it with sync_on_compute=False or update it with this process's "
                "values only"
            ),
        ),
        Example(
            code=MEAN_OF_BATCHES,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                accuracies = []
                with torch.no_grad():
                    for x, y in test_loader:
                        accuracies.append((model(x).argmax(1) == y).float().mean().item())
                print(f"accuracy {sum(accuracies) / len(accuracies):.3f}")
            """,
            message=(
                "a mean over batches (divided by len(accuracies), a count of batches): the original "
                "weighs each of its batches equally; after the gather a per-batch value averages one "
                "batch of every process (the last ones ragged or missing), one not gathered covers this "
                "process's batches only, so the mean differs from the one-process number; sum per-sample "
                'values (reduction="sum", counts) and divide by the number of samples'
            ),
        ),
        Example(
            code=SUMMED_BATCH_MEANS,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                criterion = nn.CrossEntropyLoss()
                test_loss = 0.0
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x)
                        test_loss += criterion(output, y).item()
                print(f"test loss {test_loss:.3f}")
            """,
            message=(
                "a batch-mean loss added up per batch: after the gather each term covers one batch of "
                'every process, so the sum shrinks with the process count; use reduction="sum"'
            ),
        ),
        Example(
            code=NESTED_FORWARD,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        correct += ((model(x) + model(x.flip(-1))).argmax(1) == y).sum().item()
                print(correct)
            """,
            message=(
                "the forward is nested in a larger expression: assign its output to a name, then gather "
                "it with accelerator.gather_for_metrics"
            ),
        ),
        Example(
            code=NESTED_FORWARD,
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                parser = argparse.ArgumentParser()
                parser.add_argument("--flip", action="store_true")
                args = parser.parse_args()
                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        if args.flip:
                            output = model(x.flip(-1))
                        else:
                            output = model(x)
                        correct += (output.argmax(1) == y).sum().item()
                print(correct)
            """,
            message=(
                "the forward sits in a branch of an if/else inside the loop: its output is not gathered, so the "
                "metrics cover this process only; gather it with the targets right after the forward in each "
                "branch: accelerator.gather_for_metrics((output, targets))"
            ),
        ),
        Example(
            code=FORWARD_IN_CALL,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                def predict(net, inputs):
                    return net(inputs).argmax(1)


                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        preds = predict(model, x)
                        correct += (preds == y).sum().item()
                print(correct)
            """,
            message=(
                "the model runs inside predict(...): its output is not gathered, so the metrics cover "
                "this process only; gather what it returns with the targets, "
                "accelerator.gather_for_metrics((preds, targets)) (accelerator.pad_across_processes "
                "first where its length varies between batches)"
            ),
        ),
        Example(
            code=UNKNOWN_MODEL,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                models = [model, nn.Linear(8, 3)]
                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        votes = torch.stack([m(x) for m in models])
                        correct += (votes.mean(0).argmax(1) == y).sum().item()
                print(correct)
            """,
            message=(
                "evaluation over a prepared loader with no forward of a known model (models from a list, "
                "an ensemble): not gathered, so the counts cover this process only; gather the "
                "predictions and targets with accelerator.gather_for_metrics((preds, targets))"
            ),
        ),
        Example(
            code=INDEXED_STORE,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                predictions = torch.zeros(len(test_loader.dataset), dtype=torch.long)
                with torch.no_grad():
                    for i, (x, y) in enumerate(test_loader):
                        output = model(x)
                        predictions[i * 8 : (i + 1) * 8] = output.argmax(1)
                print(predictions.bincount())
            """,
            message=(
                "predictions[i * 8 : (i + 1) * 8]: outputs stored at positions computed from the batch "
                "index; a gathered step holds one batch of every process, more rows than the slice, so "
                "nothing is gathered and the array covers this process only: gather the outputs and "
                "store them at a running offset (preds[offset:offset + len(out)] = out; offset += "
                "len(out))"
            ),
        ),
        Example(
            code=IN_BATCH_TARGETS,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        embeddings = model(x)
                        similarity = embeddings @ embeddings.T
                        targets = torch.arange(x.size(0))
                        correct += (similarity.argmax(1) == targets).sum().item()
                print(correct)
            """,
            message=(
                "torch.arange(x.size(0)): targets made from positions in the batch (in-batch matching, "
                "as a similarity matrix over the batch); gathering would match each process's rows with "
                "positions in the joined batch, so nothing is gathered and the metrics cover this "
                "process only: compute the per-sample result first (hits = logits.argmax(1) == labels), "
                "then gather it with accelerator.gather_for_metrics(hits)"
            ),
        ),
        Example(
            # The model sorts its batch by length and returns the order (show-attend-tell's
            # decoder): positions in one process's batch, which would index the joined batch.
            code=BATCH_ORDER,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class SortedTagger(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.linear = nn.Linear(8, 3)

                    def forward(self, x, lengths):
                        lengths, sort_ind = lengths.sort(dim=0, descending=True)
                        return self.linear(x[sort_ind]), sort_ind


                torch.manual_seed(0)
                model = SortedTagger()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                data = TensorDataset(torch.randn(64, 8), torch.randint(1, 9, (64,)), torch.randint(0, 3, (64,)))
                train_loader = DataLoader(data, batch_size=8)
                test_loader = DataLoader(data, batch_size=16)
                for x, lengths, y in train_loader:
                    optimizer.zero_grad()
                    scores, sort_ind = model(x, lengths)
                    nn.functional.cross_entropy(scores, y[sort_ind]).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for x, lengths, y in test_loader:
                        scores, sort_ind = model(x, lengths)
                        correct += (scores.argmax(1) == y[sort_ind]).sum().item()
                print(correct)
            """,
            message=(
                "y[sort_ind]: a model output used as positions in this process's batch (the order it "
                "sorted the batch in); after a gather they would pick rows of the joined batch, so "
                "nothing is gathered and the metrics cover this process only: re-order first, then "
                "gather what is compared (accelerator.gather_for_metrics((scores, y[sort_ind])))"
            ),
        ),
        Example(
            code=LOCAL_BATCH_SIZE,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                total = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        n, _ = x.shape
                        output = model(x)
                        correct += (output.argmax(1) == y).sum().item()
                        total += n
                print(f"accuracy {correct / total:.3f}")
            """,
            message=(
                "n is the size of this process's batch, read before the gather: total counts this "
                "process's samples only; count the gathered rows instead (total += len(output))"
            ),
        ),
        Example(
            code=ONE_SAMPLE_BATCHES,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                net = nn.Linear(8, 8)
                optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
                data = TensorDataset(torch.randn(32, 8), torch.randn(32, 8))
                train_loader = DataLoader(data, batch_size=8)
                val_loader = DataLoader(data, batch_size=1)
                for lr, hr in train_loader:
                    optimizer.zero_grad()
                    ((net(lr) - hr) ** 2).mean().backward()
                    optimizer.step()

                images = []
                with torch.no_grad():
                    for lr, hr in val_loader:
                        sr = net(lr)
                        images.append(torch.stack([hr.squeeze(0), sr.squeeze(0)]))
                print(len(images))
            """,
            message=(
                "sr, hr: squeezed to one sample after the forward (x.squeeze(0)), the loop takes its batch for one "
                "sample (a loader of batch size 1); gathered, a batch holds one sample of every process and the "
                "squeeze no longer removes the batch dimension, so nothing is gathered and the metrics cover this "
                "process only; gather the values the metrics read, then loop over their rows"
            ),
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                net = nn.Linear(8, 8)
                optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
                data = TensorDataset(torch.randn(32, 8), torch.randn(32, 1, 8))
                train_loader = DataLoader(data, batch_size=8)
                val_loader = DataLoader(data, batch_size=8)
                for lr, hr in train_loader:
                    optimizer.zero_grad()
                    ((net(lr) - hr.squeeze(1)) ** 2).mean().backward()
                    optimizer.step()

                total = 0.0
                with torch.no_grad():
                    for lr, hr in val_loader:
                        sr = net(lr)
                        total += ((sr - hr.squeeze(1)) ** 2).sum().item()
                print(total)
            """,
            code=ONE_SAMPLE_BATCHES,
            leaves_alone=True,
        ),
        Example(
            code=JOINED_ROWS,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, Dataset


                class Boxes(Dataset):
                    def __len__(self):
                        return 12

                    def __getitem__(self, i):
                        return torch.randn(8), torch.rand(i % 3 + 1, 3)

                    def collate_fn(self, batch):
                        images, boxes = zip(*batch)
                        for i, rows in enumerate(boxes):
                            rows[:, 0] = i
                        return torch.stack(images), torch.cat(boxes, 0)


                torch.manual_seed(0)
                model = nn.Linear(8, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                data = Boxes()
                train_loader = DataLoader(data, batch_size=4, collate_fn=data.collate_fn)
                for images, boxes in train_loader:
                    optimizer.zero_grad()
                    model(images).sum().backward()
                    optimizer.step()

                hits = 0
                with torch.no_grad():
                    for images, boxes in train_loader:
                        scores = model(images)
                        picked = scores.argmax(1)
                        hits += (boxes[:, 1].long() % 2 == picked[boxes[:, 0].long()]).sum().item()
                print(hits)
            """,
            message=(
                "boxes: rows the loader's collate_fn joins from its samples' own rows (boxes with their "
                "image's index in this process's batch), not one row per sample: a gather would drop the "
                "padding by counting rows and join indices that point at other processes' images, so nothing "
                "is gathered and the metrics cover this process only; split them into one entry per sample "
                "and gather those lists as objects"
            ),
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def collate(batch):
                    images, labels = zip(*batch)
                    return torch.cat([x.unsqueeze(0) for x in images]), torch.stack(labels)


                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                data = TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,)))
                train_loader = DataLoader(data, batch_size=8, collate_fn=collate)
                test_loader = DataLoader(data, batch_size=8, collate_fn=collate)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x)
                        correct += (output.argmax(1) == y).sum().item()
                print(correct)
            """,
            code=JOINED_ROWS,
            leaves_alone=True,
        ),
        Example(
            code=OBJECT_LISTS,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for images, targets in test_loader:
                        images = list(images)
                        targets = [{"label": t} for t in targets]
                        detections = model(torch.stack(images))
                        correct += sum(int(d.argmax() == t["label"]) for d, t in zip(detections, targets))
                print(correct)
            """,
            message=(
                "targets: a list of per-sample objects (detection-style batches); not gathered, so the "
                "metrics cover this process only: gather each list on its own with "
                "accelerator.gather_for_metrics(x, use_gather_object=True), tensors as they are"
            ),
        ),
        Example(
            code=RAGGED_PADDING,
            before="""
                import torch
                import torch.nn as nn
                from torch.nn.utils.rnn import pad_sequence
                from torch.utils.data import DataLoader

                torch.manual_seed(0)


                def collate(batch):
                    tokens, tags = zip(*batch)
                    return pad_sequence(tokens, batch_first=True), pad_sequence(tags, batch_first=True, padding_value=-100)


                data = [(torch.randint(1, 50, (n % 7 + 3,)), torch.randint(0, 4, (n % 7 + 3,))) for n in range(40)]
                model = nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 4))
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(data, batch_size=4, collate_fn=collate)
                test_loader = DataLoader(data, batch_size=4, collate_fn=collate)
                for tokens, tags in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(tokens).transpose(1, 2), tags, ignore_index=-100).backward()
                    optimizer.step()

                model.eval()
                correct = 0
                with torch.no_grad():
                    for tokens, tags in test_loader:
                        predictions = model(tokens).argmax(-1)
                        mask = tags != -100
                        correct += (predictions[mask] == tags[mask]).sum().item()
                print(correct)
            """,
            message=(
                "test_loader's collate_fn pads each batch to its own longest sample: two processes' "
                "batches can differ in length, and the gather then fails; pad each gathered sequence "
                "first, accelerator.pad_across_processes(x, dim=1, pad_index=<its padding value>), "
                "before gather_for_metrics"
            ),
        ),
        Example(
            code=UNSIZED_STREAM,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, IterableDataset, TensorDataset

                torch.manual_seed(0)


                class Stream(IterableDataset):
                    def __iter__(self):
                        for i in range(32):
                            yield torch.randn(8), i % 3


                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(Stream(), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                model.eval()
                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        correct += (model(x).argmax(1) == y).sum().item()
                print(correct)
            """,
            message=(
                "Stream is an IterableDataset without __len__: the last batches are padded with repeated "
                "samples to a batch per process, and without a length gather_for_metrics cannot tell "
                "them from real ones, so the metrics count them too; give Stream a __len__ (the number "
                "of samples it yields) so the gather drops them, or drop them by hand"
            ),
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                total = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        correct += (model(x).argmax(1) == y).sum().item()
                        total += y.size(0)
                print(f"accuracy {correct / total:.3f}")
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                accelerator = Accelerator()
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                model, optimizer, train_loader, test_loader = accelerator.prepare(
                    model, optimizer, train_loader, test_loader
                )
                for x, y in train_loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.cross_entropy(model(x), y))
                    optimizer.step()

                correct = 0
                total = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x)
                        output, y = accelerator.gather_for_metrics((output, y))
                        correct += (output.argmax(1) == y).sum().item()
                        total += y.size(0)
                accelerator.print(f"accuracy {correct / total:.3f}")
            """,
            code="ACC941",
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                test_loss = 0.0
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x)
                        test_loss += nn.functional.cross_entropy(output, y, reduction="sum").item()
                print(f"test loss {test_loss / len(test_loader.dataset):.3f}")
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                accelerator = Accelerator()
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                model, optimizer, train_loader, test_loader = accelerator.prepare(
                    model, optimizer, train_loader, test_loader
                )
                for x, y in train_loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.cross_entropy(model(x), y))
                    optimizer.step()

                test_loss = 0.0
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x)
                        output, y = accelerator.gather_for_metrics((output, y))
                        test_loss += nn.functional.cross_entropy(output, y, reduction="sum").item()
                accelerator.print(f"test loss {test_loss / len(test_loader.dataset):.3f}")
            """,
            code="ACC942",
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                for epoch in range(2):
                    correct = 0
                    for x, y in train_loader:
                        optimizer.zero_grad()
                        output = model(x)
                        nn.functional.cross_entropy(output, y).backward()
                        optimizer.step()
                        correct += (output.argmax(1) == y).sum().item()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                accelerator = Accelerator()
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
                for epoch in range(2):
                    correct = 0
                    for x, y in train_loader:
                        optimizer.zero_grad()
                        output = model(x)
                        accelerator.backward(nn.functional.cross_entropy(output, y))
                        optimizer.step()
                        correct += (output.argmax(1) == y).sum().item()
            """,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Tagger(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.lstm = nn.LSTM(8, 16, batch_first=True)
                        self.head = nn.Linear(16, 3)

                    def forward(self, x):
                        out, _ = self.lstm(x)
                        return self.head(out)


                def main():
                    train_loader = DataLoader(TensorDataset(torch.randn(64, 5, 8), torch.randint(0, 3, (64, 5))), batch_size=8)
                    test_loader = DataLoader(TensorDataset(torch.randn(20, 5, 8), torch.randint(0, 3, (20, 5))), batch_size=8)
                    model = Tagger()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, y in train_loader:
                        optimizer.zero_grad()
                        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
                        loss.backward()
                        optimizer.step()
                    model.eval()
                    correct = 0
                    with torch.no_grad():
                        for x, y in test_loader:
                            output = model(x)
                            correct += (output.argmax(-1) == y).sum().item()
                    print(f"accuracy {correct}/{5 * len(test_loader.dataset)}")


                if __name__ == "__main__":
                    main()
            """,
            code=SEQUENCE_FIRST,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        correct += (model(x).argmax(1) == y).sum().item()
                print(f"accuracy {correct / len(test_loader.dataset):.3f}")
            """,
            code=COMPREHENSION,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from accelerate import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                if __name__ == "__main__":
                    torch.manual_seed(0)
                    model = nn.Linear(8, 3)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                    test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                    accelerator = Accelerator()
                    model, optimizer, train_loader, test_loader = accelerator.prepare(
                        model, optimizer, train_loader, test_loader
                    )
                    for x, y in train_loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.cross_entropy(model(x), y))
                        optimizer.step()
                    correct = 0
                    with torch.no_grad():
                        for x, y in test_loader:
                            correct += (model(x).argmax(1) == y).sum().item()
                    print("after training", correct)
            """,
            code=UNREACHABLE,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                import torchmetrics
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                metric = torchmetrics.SumMetric()
                for x, y in train_loader:
                    optimizer.zero_grad()
                    output = model(x)
                    nn.functional.cross_entropy(output, y).backward()
                    optimizer.step()

                model.eval()
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x)
                        metric.update(output.argmax(1) == y)
                print(metric.compute())
            """,
            code=SYNCED_TWICE,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x) + model(x.flip(-1))
                        correct += (output.argmax(1) == y).sum().item()
                print(correct)
            """,
            code=NESTED_FORWARD,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                def labels_of(output):
                    return output.argmax(1)


                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x)
                        preds = labels_of(output)
                        correct += (preds == y).sum().item()
                print(correct)
            """,
            code=FORWARD_IN_CALL,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                other = nn.Linear(8, 3)
                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        votes = torch.stack([model(x), other(x)])
                        correct += (votes.mean(0).argmax(1) == y).sum().item()
                print(correct)
            """,
            code=UNKNOWN_MODEL,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Tagger(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.linear = nn.Linear(8, 3)

                    def forward(self, x, lengths):
                        decode_lengths = lengths - 1
                        return self.linear(x), decode_lengths


                def main():
                    train_set = TensorDataset(torch.randn(64, 6, 8), torch.randint(0, 3, (64, 6)), torch.randint(2, 7, (64,)))
                    test_set = TensorDataset(torch.randn(20, 6, 8), torch.randint(0, 3, (20, 6)), torch.randint(2, 7, (20,)))
                    train_loader = DataLoader(train_set, batch_size=8)
                    test_loader = DataLoader(test_set, batch_size=8)
                    model = Tagger()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, tags, lengths in train_loader:
                        optimizer.zero_grad()
                        scores, _ = model(x, lengths)
                        nn.functional.cross_entropy(scores.flatten(0, 1), tags.flatten()).backward()
                        optimizer.step()
                    correct = words = 0
                    with torch.no_grad():
                        for x, tags, lengths in test_loader:
                            scores, decode_lengths = model(x, lengths)
                            mask = torch.arange(6) < decode_lengths.unsqueeze(1)
                            correct += (scores.argmax(-1) == tags)[mask].sum().item()
                            words += mask.sum().item()
                    print(f"accuracy {correct}/{words}")


                if __name__ == "__main__":
                    main()
            """,
            code=PYTHON_VALUE,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                predictions = torch.zeros(len(test_loader.dataset), dtype=torch.long)
                offset = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x)
                        predictions[offset : offset + len(output)] = output.argmax(1)
                        offset += len(output)
                print(predictions.bincount())
            """,
            code=INDEXED_STORE,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        embeddings = model(x)
                        targets = y
                        correct += (embeddings.argmax(1) == targets).sum().item()
                print(correct)
            """,
            code=IN_BATCH_TARGETS,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Regressor(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.linear = nn.Linear(8, 1)

                    def forward(self, x):
                        return self.linear(x)


                def main():
                    train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    test_loader = DataLoader(TensorDataset(torch.randn(20, 8), torch.randn(20, 1)), batch_size=8)
                    model = Regressor()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, y in train_loader:
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(x), y).backward()
                        optimizer.step()
                    model.eval()
                    total_loss = 0.0
                    with torch.no_grad():
                        for x, y in test_loader:
                            prediction = model(x)
                            total_loss += nn.functional.mse_loss(prediction, y, reduction="sum").item()
                    print(f"eval loss {total_loss / len(test_loader.dataset):.4f}")


                if __name__ == "__main__":
                    main()
            """,
            code=BATCH_SCALAR,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                total = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        output = model(x)
                        n, _ = output.shape
                        correct += (output.argmax(1) == y).sum().item()
                        total += n
                print(f"accuracy {correct / total:.3f}")
            """,
            code=LOCAL_BATCH_SIZE,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for images, targets in test_loader:
                        detections = model(images)
                        correct += (detections.argmax(1) == targets).sum().item()
                print(correct)
            """,
            code=OBJECT_LISTS,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.nn.utils.rnn import pad_sequence
                from torch.utils.data import DataLoader

                torch.manual_seed(0)


                def collate(batch):
                    tokens, tags = zip(*batch)
                    return pad_sequence(tokens, batch_first=True), pad_sequence(tags, batch_first=True, padding_value=-100)


                data = [(torch.randint(1, 50, (9,)), torch.randint(0, 4, (9,))) for n in range(40)]
                model = nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 4))
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(data, batch_size=4, collate_fn=collate)
                test_loader = DataLoader(data, batch_size=4)
                for tokens, tags in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(tokens).transpose(1, 2), tags, ignore_index=-100).backward()
                    optimizer.step()

                model.eval()
                correct = 0
                with torch.no_grad():
                    for tokens, tags in test_loader:
                        predictions = model(tokens).argmax(-1)
                        correct += (predictions == tags).sum().item()
                print(correct)
            """,
            code=RAGGED_PADDING,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, IterableDataset, TensorDataset

                torch.manual_seed(0)


                class Stream(IterableDataset):
                    def __iter__(self):
                        for i in range(32):
                            yield torch.randn(8), i % 3

                    def __len__(self):
                        return 32


                model = nn.Linear(8, 3)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=8)
                test_loader = DataLoader(Stream(), batch_size=8)
                for x, y in train_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()

                model.eval()
                correct = 0
                with torch.no_grad():
                    for x, y in test_loader:
                        correct += (model(x).argmax(1) == y).sum().item()
                print(correct)
            """,
            code=UNSIZED_STREAM,
            leaves_alone=True,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class SortedTagger(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.linear = nn.Linear(8, 3)

                    def forward(self, x, lengths):
                        lengths, sort_ind = lengths.sort(dim=0, descending=True)
                        scores = self.linear(x[sort_ind])
                        return scores[sort_ind.argsort()]


                torch.manual_seed(0)
                model = SortedTagger()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                data = TensorDataset(torch.randn(64, 8), torch.randint(1, 9, (64,)), torch.randint(0, 3, (64,)))
                train_loader = DataLoader(data, batch_size=8)
                test_loader = DataLoader(data, batch_size=16)
                for x, lengths, y in train_loader:
                    optimizer.zero_grad()
                    scores = model(x, lengths)
                    nn.functional.cross_entropy(scores, y).backward()
                    optimizer.step()

                correct = 0
                with torch.no_grad():
                    for x, lengths, y in test_loader:
                        scores = model(x, lengths)
                        correct += (scores.argmax(1) == y).sum().item()
                print(correct)
            """,
            code=BATCH_ORDER,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool((facts.eval_loops or facts.loader_comprehensions) and evaluated_models(facts))

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        # An evaluation written as a comprehension cannot take a gather after its forward.
        comprehensions = [
            report_at(
                site,
                COMPREHENSION,
                f"evaluation in a comprehension over the prepared loader {loader}: not gathered, so what it "
                "computes covers this process's shard only (write it as a for loop over the batches, which "
                "the converter gathers, or gather the per-batch values with accelerator.gather_for_metrics)",
            )
            for loader, site in facts.loader_comprehensions
        ]
        if comprehensions and not facts.eval_loops:
            return module, comprehensions  # no loop to gather: the rule ran for these reports
        # Only loops over a loader change: their headers name it.
        rewriter = EvalLoopRewriter(
            facts,
            facts.lines_mentioning(name_words(facts.loaders)),
            model_layouts(module, facts),
            torchmetrics_in(module, facts),
            loaders_over_streams(module, facts),
            loaders_of_sample_lists(module, facts),
            lambda: loaders_padded_per_batch(module, facts),
            prepared_model_lists(module, facts),
            runtime_target=options.target == "runtime",
        )
        new_module = module.visit(rewriter)
        synced = rewriter.metrics_fed_gathered_values()
        if not synced:
            return new_module, rewriter.changes(module) + comprehensions
        adder = SyncOnComputeOff(facts, synced)
        return new_module.visit(adder), rewriter.changes(module) + adder.changes(new_module) + comprehensions
