"""ACC113 metrics: gather per-sample outputs and targets in evaluation loops with ``gather_for_metrics``.

On N processes each rank sees 1/N of the evaluation set, and the last global batch is padded with
repeated samples. Sums of Python floats (``correct += ...item()``) cannot be de-duplicated, so the
per-sample tensors are gathered right after the forward, before anything reduces them:
``gather_for_metrics`` concatenates every rank's rows and drops the padding, and the rest of the
loop then computes the single-process numbers. An evaluation loop is the analysis's (asked through
``RuleTransformer.evaluates``, as every rule does): a loop over a data loader with no backward in it,
under ``torch.no_grad()``/``inference_mode()``/``set_grad_enabled(False)``, in a ``@torch.no_grad()``
function, after ``model.eval()``, or decoding with ``model.generate``.

Only tensors with a batch dimension are gathered. A Python value the loop makes from the batch
before the forward, a row count (``b_size = real.size(0)``) or a list (``decode_lengths = (caplens -
1).tolist()``), is computed again after the gather from the gathered tensors, so ``total += b_size``
and ``for j in range(b_size)`` cover every process's rows; ``range(<the loaders' batch size>)`` over
the gathered batch becomes ``range(len(x))`` of a gathered tensor. A Python value that cannot be
computed again (one the model's ``forward`` returns, one bound by unpacking) cannot be joined with
the gathered tensors: the loop is left as written and reported (ACC913).

Model outputs read through attributes (``outputs.logits``) or batches read by key
(``batch["labels"]``) are gathered as those expressions into new names that the rest of the loop
uses. A batch-mean ``outputs.loss`` (or a ``loss`` among the forward's outputs, or any output the
loop reads with ``.item()``: one value per batch) cannot be gathered per sample and is reported
(ACC913 as a warning), as is a forward nested inside a larger expression. A size read off the batch
before the forward (``n, _ = x.shape``, ``n = len(x)``) is a Python number, not a per-sample row: it
is not gathered, and a sum of it after the gather (``total += n``, this process's samples only) is
reported (ACC913), with the gathered rows to count instead.

A mean over batches (``/ len(loader)``, ``/ (batch_idx + 1)``, ``np.mean`` of a list appended once per
batch, a ``steps += 1`` counter) is reported (ACC913): the original weighs each of its batches
equally, while a gathered per-batch value averages one batch of every process (the last ones
ragged or missing), so the mean changes; the one-process mean over batches cannot be rebuilt
from gathered batches. Evaluation over an ``IterableDataset`` of the file without ``__len__`` is
reported too: its last batches are padded and, without a length, the gather cannot drop the
padding. Batches of per-sample lists (detection: ``collate_fn`` returning ``tuple(zip(*batch))``,
outputs rebuilt per image) are gathered list by list with ``use_gather_object=True``; where only
some of the values are known to be lists, the loop is reported instead.

An ensemble's ``probs = torch.stack([m(x).softmax(-1) for m in models]).mean(0)`` is a forward
too when every member of ``models`` goes through a function that prepares its model parameter
(``for m in models: train(m, loader)``, the prepare rule's ``accelerator.prepare(model, ...)``
there; the list may reach the evaluation as a parameter): the stack's new first dimension is
averaged away, one row per sample remains. Members of a list nothing prepares, or stacked
without that average, are reported (ACC913).

A torchmetrics metric updated with the gathered values (``metric.update(output, target)``) would
sync across processes once more in ``compute()`` (its default ``sync_on_compute=True``): ratios
come out right, but sums and counts (``SumMetric``, a confusion matrix, ``MeanSquaredError``'s
sums) N times. Its constructor gets ``sync_on_compute=False``, when every update of it receives
gathered values and the constructor is a torchmetrics metric (or a ``MetricCollection`` of them);
otherwise (a wrapper, the file's own subclass, a metric also updated per process, an ``x.update``
of gathered values whose ``x`` the rule cannot trace) it is reported (ACC913).

A sequence-first model (``nn.Transformer``, ``nn.LSTM``... without ``batch_first=True``) or batches
padded sequence-first (``pad_sequence``) give ``(sequence, batch, ...)`` tensors: the gather would
join sequence positions of different processes (or fail on different lengths). Those loops are
reported (ACC922) and left as they are: the batch dimension and the padding to strip are the
script's to say.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeGuard, cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_call, is_accelerator_method, name_words
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change, Options, Site
from accel_convert.codemods.engine.positions import reanchor, skips_statement
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import (
    calls_in,
    class_methods,
    counted_by_one,
    dotted,
    enumerate_index,
    expression_code,
    is_host_number,
    keyword_is,
    mean_reduced,
    names_in,
    nodes_in,
    parameter_names,
    root_name,
    rows_counted,
    target_names,
)
from accel_convert.codemods.engine.torch_names import (
    AVERAGING_FUNCTIONS,
    CONCATENATIONS,
    DATA_LOADERS,
    ITERABLE_DATASETS,
    PADDING_COLLATORS,
    RECURRENT_LAYERS,
    ROW_WISE_FUNCTIONS,
    SEQUENCE_FIRST_LAYERS,
    SEQUENCE_FIRST_PADDING,
    SEQUENCE_PADDERS,
)
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import StatementFilter, module_nodes, variables_read, walk

#: Attributes of model outputs that are one number per batch, not one row per sample.
BATCH_SCALAR_ATTRIBUTES = frozenset({"loss", "aux_loss"})
#: Evaluation of a sequence-first model or of (sequence, batch) data: not gathered, reported.
SEQUENCE_FIRST = "ACC922"
#: The evaluations left as written, one code per reason (``ACC913``, "metrics-manual", was all of
#: them: it stays an alias of these codes in --select/--ignore and the config).
COMPREHENSION = "ACC938"
UNREACHABLE = "ACC939"
SYNCED_TWICE = "ACC940"
MEAN_OF_BATCHES = "ACC941"
SUMMED_BATCH_MEANS = "ACC942"
NESTED_FORWARD = "ACC943"
FORWARD_IN_CALL = "ACC944"
UNKNOWN_MODEL = "ACC945"
PYTHON_VALUE = "ACC946"
INDEXED_STORE = "ACC947"
IN_BATCH_TARGETS = "ACC948"
BATCH_SCALAR = "ACC949"
LOCAL_BATCH_SIZE = "ACC950"
OBJECT_LISTS = "ACC951"
RAGGED_PADDING = "ACC952"
UNSIZED_STREAM = "ACC953"
MANUAL = "ACC913"
#: Methods whose first argument is a batch dimension the gather multiplies by N.
RESHAPE_METHODS = frozenset({"view", "reshape"})


class MetricsCodemod(Rule):
    code = "ACC113"
    name = "metrics"
    extra_codes = {
        COMPREHENSION: "metrics-comprehension: evaluation written as a comprehension over a prepared loader, not gathered (write it as a for loop)",
        UNREACHABLE: "metrics-unreachable: an evaluation loop where the accelerator is not reachable: its metrics cover one process",
        SYNCED_TWICE: "metrics-synced-twice: a metric object updated with gathered values that syncs across processes again in compute()",
        MEAN_OF_BATCHES: "metrics-mean-of-batches: a mean over batches, which the gather changes (a batch of every process per step)",
        SUMMED_BATCH_MEANS: "metrics-summed-batch-means: a batch-mean loss added up per batch: after the gather the sum shrinks with the process count",
        NESTED_FORWARD: "metrics-nested-forward: the forward nested in a larger expression: its output is not gathered",
        FORWARD_IN_CALL: "metrics-forward-in-call: the model runs inside another call (a generate or decode helper): its output is not gathered",
        UNKNOWN_MODEL: "metrics-unknown-model: evaluation with no forward of a known model (models from a list, an ensemble), not gathered",
        PYTHON_VALUE: "metrics-python-value: a Python value made per batch (a list of lengths, a number) among the values to gather: nothing gathered",
        INDEXED_STORE: "metrics-indexed-store: outputs stored at positions computed from the batch index: nothing gathered",
        IN_BATCH_TARGETS: "metrics-in-batch-targets: targets made from positions in the batch (in-batch matching): nothing gathered",
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
            # decode_lengths is a Python list the model's forward makes: left as written, reported.
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
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return bool((facts.eval_loops or facts.loader_comprehensions) and _evaluated_models(facts))

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
        rewriter = _EvalLoopRewriter(
            facts,
            facts.lines_mentioning(name_words(facts.loaders)),
            replace(
                _sequence_first_layouts(module, facts),
                hidden_outputs=_recurrent_hidden_outputs(module, facts),
                python_outputs=_python_value_outputs(module, facts),
            ),
            _torchmetrics_in(module, facts),
            _loaders_over_streams(module, facts),
            _loaders_of_sample_lists(module, facts),
            _loaders_padded_per_batch(module, facts),
            _prepared_model_lists(module, facts),
        )
        new_module = module.visit(rewriter)
        synced = rewriter.metrics_fed_gathered_values()
        if not synced:
            return new_module, rewriter.changes(module) + comprehensions
        adder = _SyncOnComputeOff(facts, synced)
        return new_module.visit(adder), rewriter.changes(module) + adder.changes(new_module) + comprehensions


class _EvalLoopRewriter(RuleTransformer):
    def __init__(
        self,
        facts: ScriptFacts,
        lines: set[int],
        layouts: _SequenceLayouts,
        torchmetrics: _TorchMetrics,
        streams: dict[str, str],
        zipped_loaders: set[str],
        padded_loaders: set[str],
        model_lists: dict[str, set[str]] | None = None,
    ) -> None:
        super().__init__(facts, lines)
        #: Module-level function → names there holding a list of prepared models (an ensemble).
        self._model_lists = model_lists or {}
        self._layouts = layouts
        self._torchmetrics = torchmetrics
        #: Loaders over an iterable dataset class of the file without ``__len__`` → that class.
        self._streams = streams
        #: Loaders whose ``collate_fn`` returns ``tuple(zip(*batch))``: batches of per-sample lists.
        self._zipped_loaders = zipped_loaders
        #: Loaders whose collate function pads each batch to its own longest sample.
        self._padded_loaders = padded_loaders
        #: torchmetrics metric → original positions of its updates with gathered values.
        self._gathered_updates: dict[str, set[Site]] = {}
        #: The first such update of each metric (where a report points).
        self._first_update: dict[str, cst.Call] = {}
        #: Names a new variable must not take: those of the module-level function being walked
        #: (nested functions share their enclosing function's set), or the whole module's for
        #: module-level code.
        #: Collected only when a new name is needed: most files never need one.
        self._taken_by_scope: list[_LazyNames] = []
        #: Evaluation loops that got a gather, per enclosing function (innermost last; the first
        #: entry is module-level code).
        self._gathered_loops: list[list[_GatheredLoop]] = [[]]

    @property
    def _taken_names(self) -> set[str]:
        return self._taken_by_scope[-1].names

    def visit_Module(self, node: cst.Module) -> None:
        super().visit_Module(node)
        self._taken_by_scope.append(_LazyNames(node))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        top_level = len(self._taken_by_scope) == 1
        self._taken_by_scope.append(_LazyNames(node) if top_level else self._taken_by_scope[-1])
        self._gathered_loops.append([])

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        self._taken_by_scope.pop()
        self._report_per_batch_means([original_node], self._gathered_loops.pop())
        return super().leave_FunctionDef(original_node, updated_node)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        # Module-level code (a notebook-style script): its own statements, not the functions'.
        outside_definitions = [
            statement for statement in original_node.body if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))
        ]
        self._report_per_batch_means(outside_definitions, self._gathered_loops[0])
        return super().leave_Module(original_node, updated_node)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        # Loops are compound statements: the walk need not go into a simple line's expressions.
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return self.in_training_class()

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.BaseStatement:
        loop = _loop_over_loader(original_node, self.facts)
        # Whether the loop evaluates is the analysis's answer, the one prepare shards by.
        if loop is None or not self.evaluates(original_node):
            return updated_node
        if self._over_unprepared_loader(original_node, loop):
            # A loader built where nothing prepares it (a local of an evaluation helper): every
            # rank sees every sample, and gathering would count each one N times.
            return updated_node
        if _contains(original_node, lambda n: _is_backward(n, self.facts) or _is_gather(n, self.facts), cst.Call):
            return updated_node
        sequence_first = self._sequence_first_reason(original_node)
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
        return self._gather_in_loop(original_node, updated_node, loop)

    def _python_value_outputs(self, forward: cst.SimpleStatementLine) -> list[str]:
        """The names the forward binds to outputs its model's ``forward`` makes as Python values
        (see :func:`_python_value_outputs`)."""
        assign = forward.body[0]
        if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call):
            return []
        positions = self._layouts.python_outputs.get(dotted(assign.value.func) or "")
        if not positions:
            return []
        target = assign.targets[0].target
        if isinstance(target, (cst.Tuple, cst.List)):
            return [
                name
                for index, element in enumerate(target.elements)
                if index in positions
                for name in target_names(element.value)
            ]
        return list(target_names(target)) if -1 in positions else []

    def _hidden_states_read(self, forward: cst.SimpleStatementLine, plan: _GatherPlan) -> list[str]:
        """The names the forward binds to a recurrent hidden state (see
        :func:`_recurrent_hidden_outputs`) that the gather would take, whole or in part."""
        assign = forward.body[0]
        if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call):
            return []
        positions = self._layouts.hidden_outputs.get(dotted(assign.value.func) or "")
        if not positions:
            return []
        target = assign.targets[0].target
        hidden: set[str] = set()
        if isinstance(target, (cst.Tuple, cst.List)):
            for index, element in enumerate(target.elements):
                if index in positions:
                    hidden.update(target_names(element.value))
        elif -1 in positions:
            hidden.update(target_names(target))
        read = [root_name(expression) or "" for expression in plan.gathered]
        return [name for name in dict.fromkeys(read) if name in hidden]

    def _note_metric_updates(self, statements: list[cst.CSTNode], plan: _GatherPlan) -> None:
        """torchmetrics metrics updated (``metric.update(preds, target)``, ``metric(preds,
        target)``) after the gather: their states now hold every process's samples, and their
        ``compute()`` would add the processes' states up once more. A ``.update(...)`` of
        something else given gathered values, in a file using torchmetrics, is reported: it may be
        a metric built where this rule cannot see."""
        if not self._torchmetrics.imported:
            return
        read = {expression_code(e) for e in plan.gathered} | set(plan.names)
        for statement in statements:
            for call in calls_in(statement):
                func = call.func
                owner = func.value if isinstance(func, cst.Attribute) and func.attr.value in METRIC_UPDATES else func
                name = dotted(owner)
                if name is None:
                    continue
                if name in self._torchmetrics.constructors:
                    site = self.facts.origins.site(call)
                    if site is not None:
                        self._gathered_updates.setdefault(name, set()).add(site)
                        self._first_update.setdefault(name, call)
                elif owner is not func and func.attr.value == "update" and _mentions(call, read):  # type: ignore[attr-defined]
                    self.report(
                        call,
                        SYNCED_TWICE,
                        f"{name}.update(...) receives gathered values: if {name} is a torchmetrics metric, build it "
                        "with sync_on_compute=False, or its compute() adds up every process's samples again",
                        False,
                    )

    def metrics_fed_gathered_values(self) -> set[Site]:
        """The original positions of the torchmetrics constructors to build with
        ``sync_on_compute=False``: metrics every update of which receives gathered values. A
        metric also updated elsewhere (per process), or one whose constructor cannot take the
        keyword (a wrapper, the file's own subclass), is reported instead."""
        sites: set[Site] = set()
        for name, updates in self._gathered_updates.items():
            constructors = self._torchmetrics.constructors[name]
            if constructors and self._torchmetrics.uses.get(name, set()) <= updates:
                sites.update(constructors)
                continue
            why = (
                "it is also updated with this process's values only"
                if constructors
                else "its constructor may not take sync_on_compute"
            )
            self.findings.add(
                self._first_update[name],
                SYNCED_TWICE,
                f"{name} is updated with gathered values, and its compute() syncs across processes again "
                f"(counting sums N times); not changed because {why}: build it with sync_on_compute=False "
                "or update it with this process's values only",
                False,
            )
        return sites

    def _sequence_first_reason(self, loop: cst.For) -> str | None:
        """Why the loop's tensors may be sequence-first: it calls a sequence-first model, or the
        file pads its batches sequence-first. None: nothing says so."""
        if self._layouts.padding is not None:
            return self._layouts.padding
        for call in calls_in(loop.body):
            if _is_model_call(call, self.facts):
                reason = self._layouts.models.get(dotted(call.func) or "")
                if reason is not None:
                    return reason
        return None

    def _over_unprepared_loader(self, node: cst.For, targets: tuple[str, ...]) -> bool:
        """The loop's loader is built by the function holding the loop, and that function is not
        where the training objects are built and prepared (an evaluation helper's own loader)."""
        function = next((n for n in reversed(self._anchors) if isinstance(n, cst.FunctionDef)), None)
        if function is None or function.name.value in (self.facts.main_function, self.facts.creating_function):
            return False
        where = self.facts.origins.site(function)
        loader = node.iter
        while isinstance(loader, cst.Call) and loader.args:
            loader = loader.args[0].value
        name = dotted(loader)
        return (
            where is not None
            and name is not None
            and any(where.line <= site.line <= where.end_line for site in self.facts.assign_sites.get(name, ()))
        )

    def _report_per_batch_means(self, scope: Sequence[cst.CSTNode], loops: list[_GatheredLoop]) -> None:
        """A mean over batches where evaluation loops were gathered: a value divided by a count of
        batches (``len(test_loader)``, ``num_val_batches = len(loader)``, ``batch_idx + 1``, a
        ``steps += 1`` counter, ``len(losses)`` of a list appended once per batch) or ``np.mean``
        of such a list. The original weighs each of its batches equally; after the gather each
        per-batch value averages one batch of every process (the last ones ragged or missing),
        so the mean weighs the samples otherwise and prints another number. The one-process
        mean over batches cannot be rebuilt from gathered batches, so it is reported, not
        rewritten: sum per-sample values and divide by the number of samples."""
        if not loops:
            return
        finder = _MeansOverBatches(_batch_counts(loops, scope, self.facts), self.facts)
        for node in scope:
            walk(node, finder)
        for node, anchor, how in finder.found:
            self.findings.add(
                node,
                MEAN_OF_BATCHES,
                f"a mean over batches ({how}): the original weighs each of its batches equally; after the "
                "gather a per-batch value averages one batch of every process (the last ones ragged or "
                "missing), one not gathered covers this process's batches only, so the mean differs from "
                'the one-process number; sum per-sample values (reduction="sum", counts) and divide by the '
                "number of samples",
                False,
                anchor,
            )

    def _report_summed_batch_means(self, loop: cst.For) -> None:
        """``test_loss += criterion(outputs, targets).item()`` with a batch-mean criterion: after the
        gather each term averages the batches of every process, so the sum has N times fewer
        terms and the reported loss shrinks N times. Reported: sum per-sample losses instead. The
        loss may be named first (``loss = criterion(outputs, targets)``, then ``+= loss.item()``)."""
        # the function's own criteria, and the module's it reads as globals
        criteria = self.facts.batch_mean_losses.get(self.function, set()) | self.facts.batch_mean_losses.get(
            "<module>", set()
        )
        nodes = nodes_in(loop.body)
        losses = {
            node.targets[0].target.value
            for node in nodes
            if isinstance(node, cst.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
            and any(_is_batch_mean_loss(call, criteria, self.facts) for call in calls_in(node.value))
        }
        for node in nodes:
            if not isinstance(node, cst.AugAssign) or not isinstance(node.operator, cst.AddAssign):
                continue
            if _multiplied(node.value):
                continue  # ``loss.item() * targets.size(0)``: weighed by the (gathered) batch size, a sum per sample
            if variables_read(node.value) & losses or any(
                _is_batch_mean_loss(call, criteria, self.facts) for call in calls_in(node.value)
            ):
                self.report(
                    node,
                    SUMMED_BATCH_MEANS,
                    "a batch-mean loss added up per batch: after the gather each term covers one batch of "
                    'every process, so the sum shrinks with the process count; use reduction="sum"',
                    False,
                )

    def _per_sample_lists(
        self, loop: cst.For, statements: Sequence[cst.BaseStatement], batch: tuple[str, ...]
    ) -> set[str]:
        """Names holding a list (or tuple) of per-sample objects, not a batch tensor: the batch
        of a loader whose ``collate_fn`` returns ``tuple(zip(*batch))`` (torchvision's detection
        references), and names the loop rebuilds item by item from themselves
        (``outputs = [{k: v.to("cpu") for k, v in t.items()} for t in outputs]``)."""
        found: set[str] = set()
        loader = loop.iter
        while isinstance(loader, cst.Call) and loader.args:
            loader = loader.args[0].value
        if dotted(loader) in self._zipped_loaders:
            found.update(batch)
        for node in nodes_in(cst.IndentedBlock(body=list(statements))):
            if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
                continue
            name = dotted(node.targets[0].target)
            value = node.value
            if isinstance(value, cst.Call) and dotted(value.func) in ("list", "tuple") and value.args:
                value = value.args[0].value
            if (
                name is not None
                and isinstance(value, (cst.ListComp, cst.GeneratorExp))
                and dotted(value.for_in.iter) == name
            ):
                found.add(name)
        return found

    def _gather_in_loop(self, original: cst.For, loop: cst.For, targets: tuple[str, ...]) -> cst.For:
        body = loop.body
        if not isinstance(body, cst.IndentedBlock):
            return loop
        forward = _find_forward(body.body, self.facts)
        if forward is None:
            hoisted = _hoist_forward(body.body, self.facts, lambda: _fresh_name("output", self._taken_names))
            if hoisted is not None:
                body = body.with_changes(body=hoisted)
                loop = loop.with_changes(body=body)
                forward = _find_forward(body.body, self.facts)
        if forward is None:
            # ``probs = torch.stack([m(x).softmax(-1) for m in models]).mean(0)`` over a list of
            # prepared models: one row per sample, gathered as a forward's output is.
            forward = _find_ensemble_forward(
                body.body, self.facts, self._model_lists.get(self.function, set()), targets
            )
        if forward is None:
            # ``logits = (model(x) + model(torch.flip(x, dims=[-1]))) / 2``: test-time
            # augmentation, model outputs on views of the batch averaged row by row.
            forward = _find_averaged_forwards(body.body, self.facts)
        if forward is None:
            runner = _model_passed_to_call(loop, self.facts)
            if _contains(loop, lambda n: _is_model_call(n, self.facts), cst.Call):
                self.report(
                    original,
                    NESTED_FORWARD,
                    "the forward is nested in a larger expression: assign its output to a name, "
                    "then gather it with accelerator.gather_for_metrics",
                    False,
                )
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
            elif any(isinstance(node, cst.AugAssign) for node in nodes_in(loop.body)):
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
            return loop
        statement, outputs = forward
        # ``input, target = batch[0], batch[1]``: names unpacked from the batch are per-sample
        # too, and what the outputs are compared with must be gathered with them.
        unpacked = _unpacked_from(body.body, statement, targets)
        targets = (*targets, *unpacked.tensors)
        after = _statements_after(body.body, statement)
        plan = _plan_gather(outputs, targets, after, lambda: self._taken_names)
        read_after = variables_read(*after)
        # A Python list (or number) with one entry per sample of this process (``decode_lengths``
        # from the forward, ``lengths = caplens.tolist()``): a tensor gather cannot join it, and
        # gathering the tensors without it would pair every process's rows with this process's
        # entries. Nothing is gathered; the script must make it a tensor.
        candidates = [*unpacked.python_values, *self._python_value_outputs(statement)]
        # lists of per-sample objects (detection) are gathered as objects, below
        object_lists = self._per_sample_lists(original, body.body, targets) if candidates else set()
        python_values = [name for name in dict.fromkeys(candidates) if name in read_after and name not in object_lists]
        if python_values and plan.gathered:
            self.report(
                original,
                PYTHON_VALUE,
                f"{', '.join(python_values)}: a Python value made per batch (a list of lengths, a number), not a "
                "tensor with a batch dimension: gather_for_metrics cannot join it with the gathered tensors, so "
                "nothing is gathered and the metrics cover this process only; make it a tensor "
                "(torch.tensor(x, device=accelerator.device)) and gather it with the outputs",
                False,
            )
            return loop
        # ``b_size = real.size(0)``, ``lengths = (caplens - 1).tolist()``: Python values of this
        # process's rows, computed again from the gathered tensors after the gather (``total +=
        # b_size``, ``range(b_size)``, ``pack_padded_sequence(scores, lengths)`` then cover every
        # sample). Their statements are read again as written: the values they read are gathered.
        needed = set(read_after)
        for name in reversed(list(unpacked.recomputed)):  # and what a later one reads (n = len(lengths))
            if name in needed:
                needed |= variables_read(unpacked.recomputed[name][0])
        recomputed = [(name, *unpacked.recomputed[name]) for name in unpacked.recomputed if name in needed]
        whole = {name for expr, name in zip(plan.gathered, plan.names) if isinstance(expr, cst.Name)}
        counted = [tensors for _, _, tensors in recomputed] + [{t} for _, t in unpacked.summed_counts.values()]
        for tensors in counted:
            for tensor in sorted(tensors - whole) if plan.gathered else ():
                plan.gathered.append(cst.Name(tensor))
                plan.names.append(tensor)
                whole.add(tensor)
        hidden = self._hidden_states_read(statement, plan)
        if hidden:
            self.report(
                original,
                SEQUENCE_FIRST,
                f"{', '.join(hidden)}: a recurrent layer's hidden state, (layers, batch, hidden) even in a "
                "batch-first model, and gather_for_metrics joins along dim 0, mixing layers across processes; "
                "not gathered, so the metrics cover this process only (gather hidden.transpose(0, 1) by hand)",
                False,
            )
            return loop
        positions = _batch_positions(
            _statements_after(body.body, statement), set(plan.names) | set(targets), self.facts
        )
        stored = _stored_by_batch_index(
            _statements_after(body.body, statement), enumerate_index(original), set(plan.names)
        )
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
            return loop
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
            return loop
        for scalar in plan.batch_scalars:
            self.report(
                original,
                BATCH_SCALAR,
                f"{scalar} is one value per batch and process: it cannot be gathered per sample",
                False,
            )
        if not plan.gathered:
            return loop
        for size, sum_target in _sizes_summed_after(body.body, statement, set(targets)):
            if size in unpacked.recomputed:
                continue  # counted again from the gathered rows
            # ``n, _ = x.shape`` before the forward is this process's batch size, a Python number
            # the gather cannot reach: the sum counts this process's samples only.
            first = plan.names[0]
            self.report(
                original,
                LOCAL_BATCH_SIZE,
                f"{size} is the size of this process's batch, read before the gather: {sum_target} counts this "
                f"process's samples only; count the gathered rows instead ({sum_target} += len({first}))",
                False,
            )
        lists = self._per_sample_lists(original, body.body, targets)
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
            return loop
        if plan.new_names:  # the taken names are collected only when a new one is needed
            self._taken_names.update(plan.new_names)
        gather_line: list[cst.SimpleStatementLine]
        if listed:
            gather_line = [_gather_objects_statement(name, self.facts) for name in listed]
        else:
            gather_line = _gather_statements(plan, _maybe_objects(original, targets, plan), self.facts)
        self._report_summed_batch_means(original)
        self._note_metric_updates(_statements_after(body.body, statement), plan)
        statements = list(body.body)
        if plan.gathered:
            gather_line += [
                cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=value)])
                for name, value, _ in recomputed
            ]
            # ``total += labels.size(0)`` before the forward counts this process's rows: it moves
            # below the gather, which leaves the count of one process's run unchanged.
            # Its comments move with it.
            if unpacked.summed_counts:
                statements = [line for line in statements if id(line) not in unpacked.summed_counts]
                gather_line += [line for line, _ in unpacked.summed_counts.values()]
        new_body = _insert_after(statements, statement, gather_line, plan, self.facts)
        gathered = ", ".join(expression_code(e) for e in plan.gathered)
        self.report(original, MetricsCodemod.code, f"gather_for_metrics({gathered}) after the forward", True)
        loader = original.iter
        while isinstance(loader, cst.Call) and loader.args:
            loader = loader.args[0].value
        self._gathered_loops[-1].append(_GatheredLoop(dotted(loader) or "", original))
        if dotted(loader) in self._padded_loaders and _gathers_padded_sequences(original, plan):
            self.report(
                original,
                RAGGED_PADDING,
                f"{dotted(loader)}'s collate_fn pads each batch to its own longest sample: two processes' "
                "batches can differ in length, and the gather then fails; pad each gathered sequence first, "
                "accelerator.pad_across_processes(x, dim=1, pad_index=<its padding value>), before "
                "gather_for_metrics",
                False,
            )
        stream = self._streams.get(dotted(loader) or "")
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
        return loop.with_changes(body=body.with_changes(body=new_body))


# ---- torchmetrics ---------------------------------------------------------------------------

#: Methods of a torchmetrics metric that add a batch to its state.
METRIC_UPDATES = frozenset({"update", "forward"})


@dataclass(frozen=True)
class _TorchMetrics:
    """The torchmetrics metrics the file builds: name → original positions of the constructor
    calls to give ``sync_on_compute=False`` (empty: none can be given it safely), and name →
    original positions of every update of it in the file."""

    imported: bool = False
    constructors: dict[str, set[Site]] = field(default_factory=dict)
    uses: dict[str, set[Site]] = field(default_factory=dict)


def _torchmetrics_in(module: cst.Module, facts: ScriptFacts) -> _TorchMetrics:
    """Names bound to torchmetrics metrics (``metric = torchmetrics.Accuracy(...).to(device)``,
    a ``MetricCollection`` of such), and where each is updated. Wrappers (a metric given another
    metric) and the file's own ``Metric`` subclasses are known but get no keyword: their
    constructors may not accept it."""
    if not any(qualified.partition(".")[0] == "torchmetrics" for qualified in facts.imports.values()):
        return _TorchMetrics()
    own_metrics = {
        node.name.value
        for node in module.body
        if isinstance(node, cst.ClassDef) and any(_is_torchmetrics_class(base.value, facts) for base in node.bases)
    }
    constructors: dict[str, set[Site]] = {}
    nodes = module_nodes(module)
    for node in nodes:
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            continue
        name = dotted(node.targets[0].target)
        built = _constructor(node.value)
        if name is None or built is None:
            continue
        if dotted(built.func) in own_metrics:
            constructors.setdefault(name, set())
        elif _is_torchmetrics_class(built.func, facts):
            sites = constructors.setdefault(name, set())
            for call in _metrics_taking_the_keyword(built, facts):
                site = facts.origins.site(call)
                if site is None:
                    constructors[name] = set()
                    break
                sites.add(site)
    uses: dict[str, set[Site]] = {}
    for node in nodes:
        if not isinstance(node, cst.Call):
            continue
        func = node.func
        owner = func.value if isinstance(func, cst.Attribute) and func.attr.value in METRIC_UPDATES else func
        name = dotted(owner)
        site = facts.origins.site(node)
        if name in constructors and site is not None:
            uses.setdefault(name, set()).add(site)
    return _TorchMetrics(True, constructors, uses)


def _is_torchmetrics_class(func: cst.BaseExpression, facts: ScriptFacts) -> bool:
    qualified = facts.qualified_name(func) or ""
    last = qualified.rpartition(".")[2]
    return qualified.startswith("torchmetrics.") and ".functional" not in qualified and last[:1].isupper()


def _metrics_taking_the_keyword(built: cst.Call, facts: ScriptFacts) -> list[cst.Call]:
    """The constructor calls to give ``sync_on_compute=False``: the metric itself, or each metric
    of a ``MetricCollection([...])``/``({...})``; none when a metric is given another metric (a
    wrapper) or the collection holds anything but metric constructors."""
    inner = [call for call in calls_in(built) if call is not built and _is_torchmetrics_class(call.func, facts)]
    if (facts.qualified_name(built.func) or "").rpartition(".")[2] != "MetricCollection":
        return [] if inner else [built]
    if not built.args or not isinstance(built.args[0].value, (cst.List, cst.Tuple, cst.Dict)):
        return []
    collection = built.args[0].value
    elements = (
        [element.value for element in collection.elements if isinstance(element, cst.DictElement)]
        if isinstance(collection, cst.Dict)
        else [element.value for element in collection.elements]
    )
    metrics = [_constructor(element) for element in elements]
    if len(metrics) != len(collection.elements) or not all(
        call is not None
        and _is_torchmetrics_class(call.func, facts)
        and not any(c is not call and _is_torchmetrics_class(c.func, facts) for c in calls_in(call))
        for call in metrics
    ):
        return []
    return [call for call in metrics if call is not None]


def _mentions(call: cst.Call, names: set[str]) -> bool:
    return any(expression_code(arg.value) in names or names_in(arg.value) & names for arg in call.args)


class _SyncOnComputeOff(RuleTransformer):
    """Adds ``sync_on_compute=False`` to the torchmetrics constructors at ``sites`` (original
    positions): the metric is updated with values gathered from every process already."""

    def __init__(self, facts: ScriptFacts, sites: set[Site]) -> None:
        super().__init__(facts, {site.line for site in sites})
        self._sites = sites

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        site = self.facts.origins.site(original_node)
        if site is None or site not in self._sites:
            return updated_node
        if any(arg.keyword is not None and arg.keyword.value == "sync_on_compute" for arg in updated_node.args):
            return updated_node
        keyword = cst.Arg(
            value=cst.Name("False"),
            keyword=cst.Name("sync_on_compute"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        self.report(
            original_node,
            MetricsCodemod.code,
            "sync_on_compute=False: the metric is updated with values gathered from every process; "
            "syncing again in compute() would count them once per process",
        )
        return updated_node.with_changes(args=[*updated_node.args, keyword])


# ---- loaders over streams ------------------------------------------------------------------


def _loaders_over_streams(module: cst.Module, facts: ScriptFacts) -> dict[str, str]:
    """Loaders (names, and parameters of the file's functions called with them) over an
    ``IterableDataset`` subclass of the file that has no ``__len__`` → that class's name.
    File-wide names, as the analysis's roles are: a parameter given such a loader at any call
    counts."""
    classes = {statement.name.value: statement for statement in module.body if isinstance(statement, cst.ClassDef)}
    streams: dict[str, bool] = {}  # class → it (or a base of the file) defines __len__
    grew = True
    while grew:
        grew = False
        for class_name, definition in classes.items():
            if class_name in streams:
                continue
            bases = [base.value for base in definition.bases]
            if any(facts.qualified_name(base) in ITERABLE_DATASETS for base in bases) or any(
                dotted(base) in streams for base in bases
            ):
                own = (
                    any(
                        isinstance(item, cst.FunctionDef) and item.name.value == "__len__"
                        for item in definition.body.body
                    )
                    if isinstance(definition.body, cst.IndentedBlock)
                    else False
                )
                streams[class_name] = own or any(streams.get(dotted(base) or "", False) for base in bases)
                grew = True
    unsized = {name for name, sized in streams.items() if not sized}
    if not unsized:
        return {}
    nodes = module_nodes(module)
    datasets: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            built = node.value
            name = dotted(node.targets[0].target)
            if name is not None and isinstance(built, cst.Call) and dotted(built.func) in unsized:
                datasets[name] = dotted(built.func) or ""
    loaders: dict[str, str] = {}
    for node in nodes:
        if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call)):
            continue
        call, name = node.value, dotted(node.targets[0].target)
        if name is None or facts.qualified_name(call.func) not in DATA_LOADERS:
            continue
        dataset = next((arg.value for arg in call.args if arg.keyword and arg.keyword.value == "dataset"), None)
        if dataset is None and call.args and call.args[0].keyword is None:
            dataset = call.args[0].value
        if isinstance(dataset, cst.Call) and dotted(dataset.func) in unsized:
            loaders[name] = dotted(dataset.func) or ""
        elif dotted(dataset) in datasets:
            loaders[name] = datasets[dotted(dataset) or ""]
    return _passed_to_parameters(module, loaders)


def _passed_to_parameters(module: cst.Module, loaders: dict[str, str]) -> dict[str, str]:
    """``loaders`` with the parameters of the file's functions called with one of them
    (``evaluate(model, test_loader, device)``: the helper's ``loader`` is that loader)."""
    loaders = dict(loaders)
    functions = {node.name.value: node for node in module.body if isinstance(node, cst.FunctionDef)}
    calls = [call for call in module_nodes(module) if isinstance(call, cst.Call) and dotted(call.func) in functions]
    grew = bool(loaders)
    while grew:
        grew = False
        for call in calls:
            parameters = functions[dotted(call.func) or ""].params
            positional = [param.name.value for param in parameters.params]
            for index, arg in enumerate(call.args):
                stream = loaders.get(dotted(arg.value) or "")
                if stream is None or arg.star:
                    continue
                if arg.keyword is not None:
                    parameter: str | None = arg.keyword.value
                else:
                    parameter = positional[index] if index < len(positional) else None
                if parameter is not None and parameter not in loaders:
                    loaders[parameter] = stream
                    grew = True
    return loaders


class _CallsOnLines(StatementFilter):
    """The calls of the statements holding one of ``lines`` (where the analysis saw the calls
    asked for). Local: only the rule reading sequence-first layers needs these nodes."""

    def __init__(self, lines: set[int], facts: ScriptFacts) -> None:
        super().__init__()
        self.lines = sorted(lines)
        self.origins = facts.origins
        self.calls: list[cst.Call] = []

    def enters_statement(self, node: cst.CSTNode) -> bool:
        return not skips_statement(node, self.lines, self.origins)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def _loaders_of_sample_lists(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """Loaders built with a ``collate_fn`` that returns ``tuple(zip(*batch))`` (a function of
    the file or a lambda): each batch is a tuple of per-sample lists (images of different sizes,
    target dicts), and with the parameters they are passed to."""
    if "zip" not in facts.called:
        return set()  # no ``tuple(zip(*batch))`` anywhere

    @functools.cache
    def zipping() -> set[str]:
        """The file's functions returning ``tuple(zip(*batch))``: read once a loader names one."""
        return {
            node.name.value
            for node in module.body
            if isinstance(node, cst.FunctionDef)
            and any(
                isinstance(n, cst.Return) and n.value is not None and _zips_samples(n.value) for n in nodes_in(node)
            )
        }

    def matches(collate: cst.BaseExpression) -> bool:
        if isinstance(collate, cst.Lambda):
            return _zips_samples(collate.body)
        name = dotted(collate)
        return name is not None and name in zipping()

    return _loaders_collated_by(module, facts, matches)


def _loaders_collated_by(
    module: cst.Module, facts: ScriptFacts, matches: Callable[[cst.BaseExpression], bool]
) -> set[str]:
    """Names bound to a DataLoader whose ``collate_fn`` ``matches``, and the parameters they are
    passed to."""
    loaders: dict[str, str] = {}
    for node in module_nodes(module):
        if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call)):
            continue
        collate = next((a.value for a in node.value.args if a.keyword and a.keyword.value == "collate_fn"), None)
        if collate is None or not matches(collate):
            continue
        name = dotted(node.targets[0].target)
        if name is not None and facts.qualified_name(node.value.func) in DATA_LOADERS:
            loaders[name] = ""
    return set(_passed_to_parameters(module, loaders)) if loaders else set()


def _loaders_padded_per_batch(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """Loaders whose ``collate_fn`` pads each batch to its own longest sample: a function of the
    file calling ``pad_sequence`` or taking ``max(len(...) ...)`` of the samples, or a
    transformers padding collator (``DataCollatorWithPadding(...)``, inline or by name); with the
    parameters they are passed to."""
    if not (facts.called & (SEQUENCE_PADDERS | PADDING_COLLATORS) or "max" in facts.called):
        return set()  # the analysis saw no call that pads: no walk of the file
    padding = {
        node.name.value
        for node in module.body
        if isinstance(node, cst.FunctionDef) and any(_pads_to_longest(call, facts) for call in calls_in(node))
    }
    collators: set[str] = set()
    for node in module_nodes(module):
        if (
            isinstance(node, cst.Assign)
            and len(node.targets) == 1
            and isinstance(node.value, cst.Call)
            and facts.qualified_name(node.value.func) in PADDING_COLLATORS
        ):
            collators.add(dotted(node.targets[0].target) or "")
    if not padding and not collators:
        return set()
    return _loaders_collated_by(
        module,
        facts,
        lambda collate: (
            dotted(collate) in padding | collators
            or (isinstance(collate, cst.Call) and facts.qualified_name(collate.func) in PADDING_COLLATORS)
        ),
    )


#: Batch fields that hold one value per token (padded to the batch's longest sequence).
TOKEN_FIELDS = frozenset({"input_ids", "attention_mask", "token_type_ids"})


def _gathers_padded_sequences(loop: cst.For, plan: _GatherPlan) -> bool:
    """Whether a gathered value has a per-token dimension: a token field of the batch
    (``batch["input_ids"]``), or labels compared with ``-100`` in the loop (token labels whose
    padding the loss ignores). A sentence classifier's logits and labels have none, however the
    batch is padded."""
    for expression, name in zip(plan.gathered, plan.names):
        key = name
        if isinstance(expression, cst.Subscript) and isinstance(expression.slice[0].slice, cst.Index):
            index = expression.slice[0].slice.value
            if isinstance(index, cst.SimpleString) and isinstance(index.evaluated_value, str):
                key = index.evaluated_value
        if key in TOKEN_FIELDS or "mask" in key:
            return True
    return any(
        isinstance(node, cst.UnaryOperation)
        and isinstance(node.operator, cst.Minus)
        and isinstance(node.expression, cst.Integer)
        and node.expression.value == "100"
        for node in nodes_in(loop.body)
    )


def _pads_to_longest(call: cst.Call, facts: ScriptFacts) -> bool:
    """``pad_sequence(...)``, or ``max(len(f["input_ids"]) for f in features)``."""
    if facts.qualified_name(call.func) in SEQUENCE_PADDERS:
        return True
    return dotted(call.func) == "max" and any(
        isinstance(inner, cst.Call) and dotted(inner.func) == "len"
        for arg in call.args
        for inner in nodes_in(arg.value)
    )


def _zips_samples(value: cst.BaseExpression) -> bool:
    """``tuple(zip(*batch))`` or ``list(zip(*batch))``."""
    if not (isinstance(value, cst.Call) and dotted(value.func) in ("tuple", "list") and len(value.args) == 1):
        return False
    inner = value.args[0].value
    return (
        isinstance(inner, cst.Call)
        and dotted(inner.func) == "zip"
        and len(inner.args) == 1
        and inner.args[0].star == "*"
    )


# ---- sequence-first layouts ----------------------------------------------------------------


@dataclass(frozen=True)
class _SequenceLayouts:
    """What says the evaluation tensors are ``(sequence, batch, ...)``: model names → why, and
    the reason the file's batches are padded sequence-first (None: they are not)."""

    models: dict[str, str] = field(default_factory=dict)
    padding: str | None = None
    #: Model names → the positions of their forward's outputs that are a recurrent layer's hidden
    #: state, ``(layers, batch, hidden)`` even in a batch-first model (-1: the one output).
    hidden_outputs: dict[str, frozenset[int]] = field(default_factory=dict)
    #: Model names → the positions of their forward's outputs that are Python values (a list of
    #: lengths made with ``.tolist()``), not tensors (-1: the one output).
    python_outputs: dict[str, frozenset[int]] = field(default_factory=dict)


def _sequence_first_layouts(module: cst.Module, facts: ScriptFacts) -> _SequenceLayouts:
    """Models built from a sequence-first layer (``nn.Transformer``, ``nn.LSTM``... without
    ``batch_first=True``), directly or through a class of the file that builds one (or builds
    such a class), and ``pad_sequence`` without ``batch_first=True``. Only a literal ``True``
    counts as batch-first: a flag could be either."""
    if not facts.called & (SEQUENCE_FIRST_LAYERS | SEQUENCE_FIRST_PADDING):
        return _SequenceLayouts()
    padding = None
    layer_reasons: dict[int, str] = {}
    wanted = facts.called & (SEQUENCE_FIRST_LAYERS | SEQUENCE_FIRST_PADDING)
    finder = _CallsOnLines({site.line for name in wanted for site in facts.call_sites.get(name, ())}, facts)
    walk(module, finder)
    for call in finder.calls:
        qualified = facts.qualified_name(call.func) or ""
        if qualified not in SEQUENCE_FIRST_PADDING and qualified not in SEQUENCE_FIRST_LAYERS:
            continue
        if _batch_first(call):
            continue
        if qualified in SEQUENCE_FIRST_PADDING and padding is None:
            padding = f"batches padded by {expression_code(call.func)}() without batch_first=True"
        elif qualified in SEQUENCE_FIRST_LAYERS:
            layer_reasons[id(call)] = f"{expression_code(call.func)} built without batch_first=True"
    if not layer_reasons:
        return _SequenceLayouts({}, padding)  # every layer batch-first (a literal True)
    # A class is sequence-first when it builds such a layer or such a class of the file.
    classes = {node.name.value: node for node in module.body if isinstance(node, cst.ClassDef)}
    class_calls = {name: calls_in(node) for name, node in classes.items()}
    class_reasons: dict[str, str] = {}
    for name, calls in class_calls.items():
        reason = next((layer_reasons[id(call)] for call in calls if id(call) in layer_reasons), None)
        if reason is not None:
            class_reasons[name] = f"the model is sequence-first ({reason})"
    grew = True
    while grew:
        grew = False
        for name, calls in class_calls.items():
            if name in class_reasons:
                continue
            inner = next((dotted(call.func) for call in calls if dotted(call.func) in class_reasons), None)
            if inner is not None:
                class_reasons[name] = class_reasons[inner]
                grew = True
    models: dict[str, str] = {}
    for node in module_nodes(module):
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            continue
        model = dotted(node.targets[0].target)
        built = _constructor(node.value)
        if model is None or model not in facts.models or built is None:
            continue
        name = model
        if id(built) in layer_reasons:
            models[name] = f"the model is sequence-first ({layer_reasons[id(built)]})"
        elif dotted(built.func) in class_reasons:
            models[name] = class_reasons[dotted(built.func) or ""]
    return _SequenceLayouts(models, padding)


def _recurrent_hidden_outputs(module: cst.Module, facts: ScriptFacts) -> dict[str, frozenset[int]]:
    """Models of the file's classes whose ``forward`` returns the hidden state of a recurrent
    layer it holds (``_, hidden = self.gru(x)`` ... ``return self.fc(hidden[-1]), hidden``),
    with the positions of those outputs: model name → positions (-1: the only output)."""
    if not facts.called & RECURRENT_LAYERS:
        return {}
    positions_by_class: dict[str, frozenset[int]] = {}
    for node in module.body:
        if not isinstance(node, cst.ClassDef):
            continue
        methods = {method.name.value: method for method in class_methods(node)}
        init, forward = methods.get("__init__"), methods.get("forward")
        if init is None or forward is None or not parameter_names(init) or not parameter_names(forward):
            continue
        layers = _recurrent_attributes(init, facts)
        if layers:
            positions = _hidden_positions(forward, layers)
            if positions:
                positions_by_class[node.name.value] = positions
    return _models_built_from(module, facts, positions_by_class)


def _python_value_outputs(module: cst.Module, facts: ScriptFacts) -> dict[str, frozenset[int]]:
    """Models of the file's classes whose ``forward`` returns a Python value it made
    (``decode_lengths = (caption_lengths - 1).tolist()`` ... ``return scores, decode_lengths``),
    with the positions of those outputs: model name → positions (-1: the only output)."""
    positions_by_class: dict[str, frozenset[int]] = {}
    for node in module.body:
        if not isinstance(node, cst.ClassDef):
            continue
        forward = next((method for method in class_methods(node) if method.name.value == "forward"), None)
        if forward is None:
            continue
        made = {
            name
            for found in nodes_in(forward)
            if isinstance(found, cst.Assign) and _python_value(found.value)
            for target in found.targets
            for name in target_names(target.target)
        }
        positions: set[int] = set()
        for found in nodes_in(forward):
            if not isinstance(found, cst.Return) or found.value is None:
                continue
            if isinstance(found.value, cst.Tuple):
                positions.update(
                    i for i, element in enumerate(found.value.elements) if _made_in_python(element.value, made)
                )
            elif _made_in_python(found.value, made):
                positions.add(-1)
        if positions:
            positions_by_class[node.name.value] = frozenset(positions)
    return _models_built_from(module, facts, positions_by_class)


def _made_in_python(value: cst.BaseExpression, made: set[str]) -> bool:
    """A returned value that is a Python value: one of the names ``made`` so, or such an expression."""
    return (isinstance(value, cst.Name) and value.value in made) or _python_value(value)


def _models_built_from(
    module: cst.Module, facts: ScriptFacts, positions_by_class: dict[str, frozenset[int]]
) -> dict[str, frozenset[int]]:
    """The models built from those classes (``decoder = Decoder(...).to(device)``) → the
    class's positions."""
    if not positions_by_class:
        return {}
    models: dict[str, frozenset[int]] = {}
    for found in module_nodes(module):
        if not isinstance(found, cst.Assign) or len(found.targets) != 1:
            continue
        model = dotted(found.targets[0].target)
        built = _constructor(found.value)
        if model in facts.models and built is not None and dotted(built.func) in positions_by_class:
            models[model] = positions_by_class[dotted(built.func) or ""]
    return models


def _recurrent_attributes(init: cst.FunctionDef, facts: ScriptFacts) -> set[str]:
    """``self.gru = nn.GRU(...)`` in ``__init__``: ``{"gru"}``."""
    instance = parameter_names(init)[0]
    found = set()
    for node in nodes_in(init):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call):
            target = node.targets[0].target
            if (
                isinstance(target, cst.Attribute)
                and dotted(target.value) == instance
                and facts.qualified_name(node.value.func) in RECURRENT_LAYERS
            ):
                found.add(target.attr.value)
    return found


def _hidden_positions(forward: cst.FunctionDef, layers: set[str]) -> frozenset[int]:
    """The outputs of ``forward`` that return a hidden state of ``layers`` as it came (a name
    bound to the layer's second output, or a tuple holding one)."""
    instance = parameter_names(forward)[0]
    hidden: set[str] = set()
    returns: list[cst.BaseExpression] = []
    for node in nodes_in(forward):
        if isinstance(node, cst.Return) and node.value is not None:
            returns.append(node.value)
        if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.Call)):
            continue
        func, target = node.value.func, node.targets[0].target
        if (
            isinstance(func, cst.Attribute)
            and dotted(func.value) == instance
            and func.attr.value in layers
            and isinstance(target, (cst.Tuple, cst.List))
            and len(target.elements) == 2
        ):
            hidden.update(target_names(target.elements[1].value))

    def holds_hidden(value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Name):
            return value.value in hidden
        return isinstance(value, cst.Tuple) and any(holds_hidden(element.value) for element in value.elements)

    positions: set[int] = set()
    for value in returns:
        if isinstance(value, cst.Tuple):
            positions.update(i for i, element in enumerate(value.elements) if holds_hidden(element.value))
        elif holds_hidden(value):
            positions.add(-1)
    return frozenset(positions)


def _batch_first(call: cst.Call) -> bool:
    return keyword_is(call, "batch_first", "True")


def _constructor(value: cst.BaseExpression) -> cst.Call | None:
    """The call building what ``value`` holds, through moves (``Model(...).to(device)``)."""
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in ("to", "cuda", "cpu", "float", "double", "half", "train", "eval")
    ):
        value = value.func.value
    return value if isinstance(value, cst.Call) else None


# ---- recognising the loop -----------------------------------------------------------------


def _loop_over_loader(node: cst.For, facts: ScriptFacts) -> tuple[str, ...] | None:
    """The per-sample names a loop over a loader binds (``enumerate``'s index left out), or None."""
    iterable = node.iter
    target: cst.BaseExpression = node.target
    enumerated = False
    while isinstance(iterable, cst.Call) and iterable.args:
        func = facts.callee_name(iterable.func) or ""
        enumerated = enumerated or func == "enumerate"
        iterable = iterable.args[0].value
    if dotted(iterable) not in facts.loaders:
        return None
    if enumerated and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
        target = target.elements[1].value
    return tuple(target_names(target, plain=True))


def _is_backward(node: cst.CSTNode, facts: ScriptFacts) -> bool:
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    return node.func.attr.value == "backward"


def _is_gather(node: cst.CSTNode, facts: ScriptFacts) -> bool:
    return is_accelerator_method(node, facts, "gather_for_metrics", "gather", "reduce", "gather_object")


#: Methods of a model that do not compute its outputs (mode switches, parameter access, moves).
_NOT_RUNNING_METHODS = frozenset(
    {"eval", "train", "parameters", "named_parameters", "state_dict", "zero_grad", "to", "cuda", "cpu", "modules"}
)


def _stored_by_batch_index(statements: Sequence[cst.CSTNode], index: str | None, gathered: set[str]) -> str | None:
    """The target of ``preds[i * batch_size:(i + 1) * batch_size] = logits...`` (a subscript
    computed from the loop's ``enumerate`` index ``i``, given a value read from what would be
    gathered) after the forward, as code; None when there is none."""
    if index is None:
        return None
    for statement in statements:
        for node in nodes_in(statement):
            if not isinstance(node, cst.Assign) or not names_in(node.value) & gathered:
                continue
            for target in node.targets:
                subscript = target.target
                if isinstance(subscript, cst.Subscript) and any(
                    index in names_in(element.slice) for element in subscript.slice
                ):
                    return expression_code(subscript)
    return None


def _batch_positions(statements: Sequence[cst.CSTNode], batch: set[str], facts: ScriptFacts) -> str | None:
    """``torch.arange(len(img))`` (or ``arange(logits.size(0))``) after the forward: the targets are
    positions within this batch; the call's code, or None."""
    for statement in statements:
        for node in nodes_in(statement):
            if (
                isinstance(node, cst.Call)
                and facts.qualified_name(node.func) == "torch.arange"
                and any(names_in(arg.value) & batch for arg in node.args if arg.keyword is None)
            ):
                return expression_code(node)
    return None


def _model_passed_to_call(loop: cst.For, facts: ScriptFacts) -> tuple[str, cst.Call] | None:
    """The function a model of the script is handed to in the loop (``greedy_decode(model, src)``),
    or the model's own method it calls (``model.generate(src)``, also as
    ``accelerator.unwrap_model(model).generate(src)``), where the forward runs out of the rule's
    sight, and that call; None when there is none."""
    models = _evaluated_models(facts)
    for node in nodes_in(loop.body):
        if not isinstance(node, cst.Call):
            continue
        if any(dotted(arg.value) in models for arg in node.args):
            return dotted(node.func) or expression_code(node.func), node
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value in _NOT_RUNNING_METHODS:
            continue
        owner = func.value
        if is_accelerator_method(owner, facts, "unwrap_model") and isinstance(owner, cst.Call) and owner.args:
            owner = owner.args[0].value
        if dotted(owner) in models:
            return f"{dotted(owner)}.{func.attr.value}", node
    return None


def _is_model_call(node: cst.CSTNode, facts: ScriptFacts) -> TypeGuard[cst.Call]:
    return isinstance(node, cst.Call) and dotted(node.func) in _evaluated_models(facts)


def _evaluated_models(facts: ScriptFacts) -> set[str]:
    """The models whose forward an evaluation may run: the trained ones, and those only moved to
    the device (a model rebuilt from a checkpoint to be tested, no optimizer built over it)."""
    return facts.models | facts.frozen_models


def _contains(node: cst.CSTNode, predicate, kind: type[cst.CSTNode] | None = None) -> bool:
    """Whether a node inside ``node`` (or ``node``) satisfies ``predicate``; ``kind``: only
    nodes of that type can (a walk that calls the predicate on those alone)."""
    finder = _Finder(predicate) if kind is None else _FINDERS[kind](predicate)
    walk(node, finder)
    return finder.found


class _KindFinder(cst.CSTVisitor):
    """Whether a node of one kind matching ``predicate`` is inside one loop or statement (see
    :class:`_Finder`): a ``visit_`` hook for that kind only, never a call per node."""

    def __init__(self, predicate) -> None:
        self.predicate = predicate
        self.found = False

    def _check(self, node: cst.CSTNode) -> bool:
        if not self.found and self.predicate(node):
            self.found = True
        return not self.found


class _CallFinder(_KindFinder):
    def visit_Call(self, node: cst.Call) -> bool:
        return self._check(node)


class _WithFinder(_KindFinder):
    def visit_With(self, node: cst.With) -> bool:
        return self._check(node)


_FINDERS: dict[type[cst.CSTNode], type[_KindFinder]] = {cst.Call: _CallFinder, cst.With: _WithFinder}


class _Finder(cst.CSTVisitor):
    """Whether a node matching ``predicate`` is inside one loop or statement. Local: it reads
    the loop the rewrite is deciding on, as earlier rules left it."""

    def __init__(self, predicate) -> None:
        self.predicate = predicate
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found:
            return False
        if self.predicate(node):
            self.found = True
            return False
        return True


class _LazyNames:
    """The variable names used in a node, collected on first use."""

    def __init__(self, node: cst.CSTNode) -> None:
        self._node = node
        self._names: set[str] | None = None

    @property
    def names(self) -> set[str]:
        if self._names is None:
            self._names = variables_read(self._node)
        return self._names


# ---- the forward and what follows it ------------------------------------------------------


def _find_forward(
    statements: Sequence[cst.BaseStatement], facts: ScriptFacts
) -> tuple[cst.SimpleStatementLine, tuple[str, ...]] | None:
    """The first ``outputs = model(...)`` line of the loop body (also inside ``with`` blocks)."""
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            assign = statement.body[0]
            if isinstance(assign, cst.Assign) and _is_model_call(assign.value, facts):
                names = [n for t in assign.targets for n in target_names(t.target, plain=True)]
                if len(assign.targets) == 1 and names:
                    return statement, tuple(names)
        elif isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            found = _find_forward(list(statement.body.body), facts)
            if found:
                return found
    return None


#: Methods applied to each member's output that keep one row per sample (their dim is never 0).
ROW_WISE_METHODS = frozenset({"softmax", "log_softmax", "sigmoid", "float", "detach"})


def _find_ensemble_forward(
    statements: Sequence[cst.BaseStatement], facts: ScriptFacts, model_lists: set[str], batch: tuple[str, ...]
) -> tuple[cst.SimpleStatementLine, tuple[str, ...]] | None:
    """The first ``probs = torch.stack([m(x)... for m in models]).mean(0)`` line of the loop body
    (also inside ``with`` blocks), ``models`` a list of prepared models: the members' outputs on
    the batch stacked along a new first dimension and averaged (or summed) over it again, so the
    result has one row per sample, as a single model's output has."""
    if not model_lists:
        return None
    for statement in statements:
        if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            found = _find_ensemble_forward(list(statement.body.body), facts, model_lists, batch)
            if found:
                return found
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            continue
        assign = statement.body[0]
        if (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
            and _is_ensemble_average(assign.value, facts, model_lists, batch)
        ):
            return statement, (assign.targets[0].target.value,)
    return None


def _find_averaged_forwards(
    statements: Sequence[cst.BaseStatement], facts: ScriptFacts
) -> tuple[cst.SimpleStatementLine, tuple[str, ...]] | None:
    """The first ``logits = (model(x) + model(flip(x))) / 2`` line of the loop body (also inside
    ``with`` blocks): forwards of known models joined by ``+ - * /`` with one another and with
    numbers only, so the result has the outputs' shape, one row per sample, and is gathered as a
    single forward's output is."""
    for statement in statements:
        if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            found = _find_averaged_forwards(list(statement.body.body), facts)
            if found:
                return found
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            continue
        assign = statement.body[0]
        if (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
            and isinstance(assign.value, cst.BinaryOperation)
            and _is_forward_arithmetic(assign.value, facts)
        ):
            return statement, (assign.targets[0].target.value,)
    return None


def _is_forward_arithmetic(value: cst.BaseExpression, facts: ScriptFacts) -> bool:
    """Whether ``value`` is model calls and numbers joined by ``+ - * /``, with a model call in it."""
    if isinstance(value, cst.BinaryOperation):
        if not isinstance(value.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)):
            return False
        left, right = value.left, value.right
        sides = [side for side in (left, right) if not isinstance(side, (cst.Integer, cst.Float))]
        return bool(sides) and all(_is_forward_arithmetic(side, facts) for side in sides)
    # ``model(x).softmax(1)``, ``F.softmax(model(x), dim=1)``: still one row per sample.
    while isinstance(value, cst.Call) and not _mentions_dim_zero(value.args):
        if facts.qualified_name(value.func) in ROW_WISE_FUNCTIONS:  # before the method form: ``torch.softmax``
            if not value.args or value.args[0].keyword is not None:
                break
            value = value.args[0].value
        elif isinstance(value.func, cst.Attribute) and value.func.attr.value in ROW_WISE_METHODS:
            value = value.func.value
        else:
            break
    return _is_model_call(value, facts)


def _is_ensemble_average(
    value: cst.BaseExpression, facts: ScriptFacts, model_lists: set[str], batch: tuple[str, ...]
) -> bool:
    """``torch.stack(<members>).mean(0)`` (or ``.sum(0)``, ``dim=0``) where ``<members>`` is
    ``[m(x)... for m in models]`` over a list of prepared models, called on the batch."""
    if not (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in ("mean", "sum")
        and _is_dim_zero(value.args)
    ):
        return False
    stacked = value.func.value
    if not (
        isinstance(stacked, cst.Call)
        and facts.qualified_name(stacked.func) == "torch.stack"
        and stacked.args
        and stacked.args[0].keyword is None
        and (len(stacked.args) == 1 or _is_dim_zero(stacked.args[1:]))
    ):
        return False
    members = stacked.args[0].value
    if not (
        isinstance(members, (cst.ListComp, cst.GeneratorExp))
        and members.for_in.inner_for_in is None
        and not members.for_in.ifs
        and isinstance(members.for_in.target, cst.Name)
        and isinstance(members.for_in.iter, cst.Name)
        and members.for_in.iter.value in model_lists
    ):
        return False
    member = members.for_in.target.value
    output = members.elt
    while (
        isinstance(output, cst.Call)
        and isinstance(output.func, cst.Attribute)
        and output.func.attr.value in ROW_WISE_METHODS
        and not _mentions_dim_zero(output.args)
    ):
        output = output.func.value
    return (
        isinstance(output, cst.Call)
        and isinstance(output.func, cst.Name)
        and output.func.value == member
        and bool(output.args)
        and all(
            arg.keyword is None and not arg.star and isinstance(arg.value, cst.Name) and arg.value.value in batch
            for arg in output.args
        )
    )


def _is_dim_zero(args: Sequence[cst.Arg]) -> bool:
    """``(0)`` or ``(dim=0)``."""
    return (
        len(args) == 1
        and (args[0].keyword is None or args[0].keyword.value == "dim")
        and isinstance(args[0].value, cst.Integer)
        and args[0].value.value == "0"
    )


def _mentions_dim_zero(args: Sequence[cst.Arg]) -> bool:
    return any(isinstance(arg.value, cst.Integer) and arg.value.value == "0" for arg in args)


def _prepared_model_lists(module: cst.Module, facts: ScriptFacts) -> dict[str, set[str]]:
    """Module-level function (``"<module>"`` for module-level code) → names there holding a list
    of prepared models: ``for m in models: train(m, loader)`` where ``train`` prepares its model
    parameter (``model, optimizer = accelerator.prepare(model, optimizer)``, written by the
    prepare rule), and parameters every caller fills with such a list (``evaluate(models, ...)``)."""
    if "stack" not in facts.word_lines:
        return {}  # no ``torch.stack`` of members' outputs to gather: spare the walks
    functions = {node.name.value: node for node in module.body if isinstance(node, cst.FunctionDef)}
    # Function → (index, name) of the parameters its body prepares.
    preparing: dict[str, list[tuple[int, str]]] = {}
    for name, function in functions.items():
        params = parameter_names(function)
        prepared = {
            arg_name
            for node in nodes_in(function)
            if isinstance(node, cst.Assign) and is_accelerator_method(node.value, facts, "prepare")
            for arg in cast(cst.Call, node.value).args
            if (arg_name := dotted(arg.value)) in params
        }
        if prepared:
            preparing[name] = [(index, param) for index, param in enumerate(params) if param in prepared]
    if not preparing:
        return {}
    # Module-level code (the ``__main__`` block included, definitions left out), then each function.
    top = cst.IndentedBlock(
        body=[node for node in module.body if not isinstance(node, (cst.FunctionDef, cst.ClassDef))]
    )
    scopes: list[tuple[str, cst.CSTNode]] = [("<module>", top), *functions.items()]
    found: dict[str, set[str]] = {}
    for scope, node in scopes:
        for loop in nodes_in(node):
            if not (
                isinstance(loop, cst.For) and isinstance(loop.target, cst.Name) and isinstance(loop.iter, cst.Name)
            ):
                continue
            member = loop.target.value
            for call in calls_in(loop.body):
                if isinstance(call.func, cst.Name) and _fills(call, preparing.get(call.func.value, []), member):
                    found.setdefault(scope, set()).add(loop.iter.value)
    # Parameters every caller fills with such a list.
    changed = True
    while changed:
        changed = False
        for name, function in functions.items():
            params = parameter_names(function)
            calls = [
                (scope, call)
                for scope, node in scopes
                for call in calls_in(node)
                if isinstance(call.func, cst.Name) and call.func.value == name
            ]
            if not calls:
                continue
            for index, param in enumerate(params):
                if param in found.get(name, set()):
                    continue
                if all(
                    (passed := _argument_at(call, index, param)) is not None and passed in found.get(scope, set())
                    for scope, call in calls
                ):
                    found.setdefault(name, set()).add(param)
                    changed = True
    return found


def _fills(call: cst.Call, prepared: list[tuple[int, str]], member: str) -> bool:
    """Whether ``call`` passes ``member`` to one of the ``prepared`` parameters."""
    return any(_argument_at(call, index, param) == member for index, param in prepared)


def _argument_at(call: cst.Call, index: int, param: str) -> str | None:
    """The plain name a call passes for the parameter at ``index`` named ``param``, if any."""
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    keyword = [arg for arg in call.args if arg.keyword is not None and arg.keyword.value == param]
    argument = keyword[0] if keyword else positional[index] if index < len(positional) else None
    return argument.value.value if argument is not None and isinstance(argument.value, cst.Name) else None


def _hoist_forward(statements, facts: ScriptFacts, new_name) -> list | None:
    """``correct += (model(x).argmax(1) == y).sum().item()`` → ``output = model(x)`` on its own
    line first, then the statement reads ``output``: the forward gets a name to gather. Only for
    the first line holding exactly one forward (models chained, ``decoder(encoder(x))``, count as
    one), outside lambdas, comprehensions and conditional
    expressions (where moving it would change what runs)."""
    result = list(statements)
    for index, statement in enumerate(result):
        if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            inner = _hoist_forward(list(statement.body.body), facts, new_name)
            if inner is not None:
                result[index] = statement.with_changes(body=statement.body.with_changes(body=inner))
                return result
            continue
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        finder = _ForwardCalls(facts)
        walk(statement, finder)
        if not finder.calls:
            continue
        # ``decoder(encoder(x))``: a forward fed by another is one forward, the outer call.
        nested = {id(node) for call in finder.calls for node in nodes_in(call) if node is not call}
        outermost = [call for call in finder.calls if id(call) not in nested]
        if len(outermost) != 1 or finder.guarded:
            return None
        call = outermost[0]
        name = new_name()
        forward_line = cst.SimpleStatementLine(
            body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=call)],
            leading_lines=statement.leading_lines,
        )
        # Replacing one expression leaves the line a line.
        rewritten = cast(cst.SimpleStatementLine, statement.visit(_ReplaceNode(call, cst.Name(name)))).with_changes(
            leading_lines=()
        )
        result[index : index + 1] = [forward_line, rewritten]
        return result
    return None


class _ForwardCalls(cst.CSTVisitor):
    """Model calls in one statement, and whether any sits where hoisting would change what runs.
    Local: it reads a statement of the evaluation loop being rewritten."""

    CONDITIONAL = (
        cst.Lambda,
        cst.ListComp,
        cst.SetComp,
        cst.DictComp,
        cst.GeneratorExp,
        cst.IfExp,
        cst.BooleanOperation,
    )

    def __init__(self, facts: ScriptFacts) -> None:
        self.facts = facts
        self.calls: list[cst.Call] = []
        self.guarded = False
        self._conditional_depth = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, self.CONDITIONAL):
            self._conditional_depth += 1
        if _is_model_call(node, self.facts):
            self.calls.append(node)
            self.guarded = self.guarded or self._conditional_depth > 0
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, self.CONDITIONAL):
            self._conditional_depth -= 1


class _ReplaceNode(cst.CSTTransformer):
    def __init__(self, target: cst.CSTNode, replacement: cst.CSTNode) -> None:
        super().__init__()
        self.target, self.replacement = target, replacement

    def on_leave(self, original_node, updated_node):
        return self.replacement if original_node is self.target else updated_node


def _statements_after(statements, forward: cst.CSTNode) -> list[cst.CSTNode]:
    """Every statement that runs after the forward in one iteration, in source order."""
    after: list[cst.CSTNode] = []
    _collect_after(list(statements), forward, after)
    return after


def _collect_after(statements, forward, after: list[cst.CSTNode]) -> bool:
    for index, statement in enumerate(statements):
        if statement is forward:
            after.extend(statements[index + 1 :])
            return True
        if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
            if _collect_after(list(statement.body.body), forward, after):
                after.extend(statements[index + 1 :])
                return True
    return False


@dataclass
class _GatherPlan:
    #: Expressions gathered, in order: names are rebound, other expressions get new names.
    gathered: list[cst.BaseExpression] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    new_names: list[str] = field(default_factory=list)
    batch_scalars: list[str] = field(default_factory=list)


class _UseCollector(cst.CSTVisitor):
    """How the statements after the forward read the outputs and the batch: whole names,
    ``name.attr`` or ``name[constant]``. Local: it reads the evaluation loop being rewritten."""

    def __init__(self, interesting: set[str]) -> None:
        self.interesting = interesting
        self.uses: list[cst.Name | cst.Attribute | cst.Subscript] = []
        #: Names read as ``name.item()``: one-element tensors, so one value per batch (a gathered
        #: copy would hold N values and ``.item()`` would fail).
        self.item_names: set[str] = set()
        self._consumed: set[int] = set()
        self._methods: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        # output.argmax(...): a method of a tensor, so the whole tensor is what is read
        if isinstance(node.func, cst.Attribute):
            self._methods.add(id(node.func))
            owner = node.func.value
            if node.func.attr.value == "item" and isinstance(owner, cst.Name) and owner.value in self.interesting:
                self.item_names.add(owner.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        # ``outputs.data``: the name after the dot is no variable, even where a batch is called
        # ``data`` (gathering it would gather the whole input batch)
        self._consumed.add(id(node.attr))
        if isinstance(node.value, cst.Name) and node.value.value in self.interesting:
            if id(node) in self._methods:
                return
            if node.attr.value == "shape":
                # ``images.shape[0]`` counts samples: a torch.Size is no tensor to gather, so the
                # tensor itself is gathered (its gathered shape counts every sample once).
                return
            self._consumed.add(id(node.value))
            self._record(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if isinstance(node.value, cst.Name) and node.value.value in self.interesting and _constant_index(node):
            self._consumed.add(id(node.value))
            self._record(node)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.interesting and id(node) not in self._consumed:
            self._record(node)

    def visit_Arg(self, node: cst.Arg) -> None:
        # keyword names (f(target=...)) are not uses of a variable called "target"
        if node.keyword is not None:
            self._consumed.add(id(node.keyword))

    def _record(self, node: cst.Name | cst.Attribute | cst.Subscript) -> None:
        if not any(node.deep_equals(seen) for seen in self.uses):
            self.uses.append(node)


def _constant_index(node: cst.Subscript) -> bool:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return False
    return isinstance(node.slice[0].slice.value, (cst.SimpleString, cst.Integer))


def _plan_gather(outputs, targets, after, taken) -> _GatherPlan:
    collector = _UseCollector(set(outputs) | set(targets))
    for statement in after:
        walk(statement, collector)
    plan = _GatherPlan()
    whole = {u.value for u in collector.uses if isinstance(u, cst.Name)}
    for use in collector.uses:
        if isinstance(use, cst.Name) and (
            (use.value in outputs and _is_batch_scalar(use.value, collector)) or use.value in collector.item_names
        ):
            # A target read with ``.item()`` too (``targets.append(y.item())`` over a loader of
            # batch size 1): gathered, it would hold N values and ``.item()`` would fail.
            plan.batch_scalars.append(use.value)
            continue
        if isinstance(use, cst.Name):
            plan.gathered.append(use)
            plan.names.append(use.value)
            continue
        owner = cast(cst.Name, use.value).value  # _UseCollector records name.attr and name[constant] only
        if owner in whole:
            continue  # the whole object is gathered already
        if isinstance(use, cst.Attribute) and use.attr.value in BATCH_SCALAR_ATTRIBUTES:
            plan.batch_scalars.append(expression_code(use))
            continue
        name = _fresh_name(_suggested_name(use), taken() | set(plan.names))
        plan.gathered.append(use)
        plan.names.append(name)
        plan.new_names.append(name)
    return plan


def _is_batch_scalar(output: str, collector: _UseCollector) -> bool:
    """A forward output that is one number per batch: ``loss, logits = model(**batch)``'s
    ``loss``, or any output the loop reads with ``.item()``."""
    return output in BATCH_SCALAR_ATTRIBUTES or output in collector.item_names


def _suggested_name(use: cst.BaseExpression) -> str:
    if isinstance(use, cst.Attribute):
        return use.attr.value
    # Else ``name[constant]``, the only subscript _UseCollector records (see _constant_index).
    subscript = cast(cst.Subscript, use)
    index = cast(cst.Index, subscript.slice[0].slice).value
    key = index.evaluated_value if isinstance(index, cst.SimpleString) else None
    if isinstance(key, str) and key.isidentifier():
        return key
    return f"{cast(cst.Name, subscript.value).value}_{expression_code(index)}"


#: Python's builtins: a gathered ``batch["id"]`` named ``id`` would hide ``id()`` for the rest of the function.
_BUILTIN_NAMES = frozenset(dir(builtins))


def _fresh_name(name: str, taken: set[str]) -> str:
    candidate = name
    while candidate in taken or candidate in _BUILTIN_NAMES:
        candidate = f"gathered_{candidate}" if not candidate.startswith("gathered_") else f"{candidate}_"
    return candidate


def _gather_statement(plan: _GatherPlan, facts: ScriptFacts) -> cst.SimpleStatementLine:
    if len(plan.gathered) == 1:
        argument: cst.BaseExpression = plan.gathered[0]
        target: cst.BaseAssignTargetExpression = cst.Name(plan.names[0])
    else:
        argument = cst.Tuple([cst.Element(e) for e in plan.gathered])
        target = cst.Tuple([cst.Element(cst.Name(n)) for n in plan.names], lpar=[], rpar=[])
    call = accelerator_call(facts, "gather_for_metrics", argument)
    return cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(target)], value=call)])


#: Calls whose arguments are taken as containers of items, whatever the items are: a batch
#: value read only through them may be a list of strings (ids, file names, captions).
_CONTAINER_METHODS = frozenset({"append", "extend"})
_CONTAINER_FUNCTIONS = frozenset({"zip", "list", "enumerate", "tuple"})


def _maybe_objects(loop: cst.For, batch: tuple[str, ...], plan: _GatherPlan) -> set[str]:
    """Batch values the loop reads only as containers (``ids`` in ``all_ids.extend(ids)``,
    ``zip(batch["id"], preds)``, ``names += paths``), never as a tensor (no method or attribute,
    no operator, no other call): the default collate makes a list of a batch of strings, and
    gathering such a list in one tuple with tensors breaks ``gather_for_metrics`` (it falls back
    to ``gather_object`` for the whole tuple, a flat list of every rank's values). Gathered on its
    own, the same call gathers a tensor as a tensor and a list as a list, in the tensors' order.
    The names (``plan.names``) the values are gathered into."""
    if len(plan.gathered) < 2:
        return set()
    candidates = [
        (expression, name)
        for expression, name in zip(plan.gathered, plan.names)
        if root_name(expression) in batch and isinstance(expression, (cst.Name, cst.Subscript))
    ]
    if not candidates:
        return set()
    nodes = list(nodes_in(loop.body))
    container_uses: set[int] = set()
    for node in nodes:
        arguments: list[cst.BaseExpression] = []
        if isinstance(node, cst.Call):
            func = node.func
            if (isinstance(func, cst.Attribute) and func.attr.value in _CONTAINER_METHODS) or (
                isinstance(func, cst.Name) and func.value in _CONTAINER_FUNCTIONS
            ):
                arguments = [arg.value for arg in node.args if arg.keyword is None and not arg.star]
        elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
            arguments = [node.value]
        elif isinstance(node, cst.For):
            arguments = [node.iter]
        container_uses.update(id(argument) for argument in arguments)
    found: set[str] = set()
    for expression, name in candidates:
        uses = [node for node in nodes if type(node) is type(expression) and node.deep_equals(expression)]
        if uses and all(id(node) in container_uses for node in uses):
            found.add(name)
    return found


def _gather_statements(plan: _GatherPlan, objects: set[str], facts: ScriptFacts) -> list[cst.SimpleStatementLine]:
    """One gather of the tensors, then one of each value that may be a list of objects."""
    if not objects:
        return [_gather_statement(plan, facts)]
    tensors = _GatherPlan()
    alone: list[cst.SimpleStatementLine] = []
    for expression, name in zip(plan.gathered, plan.names):
        if name in objects:
            alone.append(_gather_statement(_GatherPlan(gathered=[expression], names=[name]), facts))
        else:
            tensors.gathered.append(expression)
            tensors.names.append(name)
    return ([_gather_statement(tensors, facts)] if tensors.gathered else []) + alone


def _gather_objects_statement(name: str, facts: ScriptFacts) -> cst.SimpleStatementLine:
    """``outputs = accelerator.gather_for_metrics(outputs, use_gather_object=True)``: every
    process's list of per-sample objects joined into one list, the padding dropped."""
    call = accelerator_call(facts, "gather_for_metrics", cst.Name(name))
    keyword = cst.Arg(
        value=cst.Name("True"),
        keyword=cst.Name("use_gather_object"),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    call = call.with_changes(args=[*call.args, keyword])
    return cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=call)])


class _ExpressionReplacer(cst.CSTTransformer):
    """After the gather: gathered expressions read through their new names,
    ``x.view(<batch size>, ...)`` of gathered tensors becomes ``x.view(-1, ...)``, and
    ``range(<batch size>)`` becomes ``range(len(x))`` of a gathered tensor (the gathered batch
    holds every rank's rows: a loop over the loader's batch size would visit 1/N of them)."""

    def __init__(self, plan: _GatherPlan, batch_size_expr: str | None) -> None:
        self.replacements = [
            (expr, name) for expr, name in zip(plan.gathered, plan.names) if not isinstance(expr, cst.Name)
        ]
        self.gathered_names = set(plan.names)
        self.batch_size_expr = batch_size_expr
        #: A gathered tensor whose rows are the gathered batch's (the first one gathered).
        self.rows = plan.names[0] if plan.names else None

    def leave_Attribute(self, original_node, updated_node):
        return self._replace(updated_node)

    def leave_Subscript(self, original_node, updated_node):
        return self._replace(updated_node)

    def _replace(self, node):
        for expr, name in self.replacements:
            if node.deep_equals(expr):
                return cst.Name(name)
        return node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = updated_node.func
        if (
            self.batch_size_expr
            and self.rows is not None
            and isinstance(func, cst.Name)
            and func.value == "range"
            and len(updated_node.args) == 1
            and dotted(updated_node.args[0].value) == self.batch_size_expr
        ):
            rows = cst.Call(func=cst.Name("len"), args=[cst.Arg(cst.Name(self.rows))])
            return updated_node.with_changes(args=[updated_node.args[0].with_changes(value=rows)])
        if not (
            self.batch_size_expr
            and isinstance(func, cst.Attribute)
            and func.attr.value in RESHAPE_METHODS
            and dotted(func.value) in self.gathered_names
            and len(updated_node.args) > 1
            and dotted(updated_node.args[0].value) == self.batch_size_expr
        ):
            return updated_node
        first = updated_node.args[0].with_changes(value=cst.UnaryOperation(cst.Minus(), cst.Integer("1")))
        return updated_node.with_changes(args=[first, *updated_node.args[1:]])


def _insert_after(statements, forward, gather_lines: list, plan: _GatherPlan, facts: ScriptFacts) -> list:
    """The loop body with the gather line after the forward and later reads rewritten."""
    replacer = _ExpressionReplacer(plan, facts.batch_size_expr)
    state = {"inserted": False}

    def rewrite(block: list) -> list:
        result = []
        for statement in block:
            if state["inserted"]:
                # The replacer is a plain libcst transformer, which rebuilds every node it walks:
                # carry the original positions over, so that later rules report (and walk) the
                # statement where the user wrote it.
                rewritten = statement.visit(replacer)
                reanchor(statement, rewritten, facts.origins)
                result.append(rewritten)
            elif statement is forward:
                result.extend([statement, *gather_lines])
                state["inserted"] = True
            elif isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
                inner = rewrite(list(statement.body.body))
                result.append(statement.with_changes(body=statement.body.with_changes(body=inner)))
            else:
                result.append(statement)
        return result

    return rewrite(list(statements))


@dataclass
class _Unpacked:
    """What the loop binds from the batch before the forward (see :func:`_unpacked_from`)."""

    #: Per-sample tensors (``target = batch[1]``, ``x, y = batch``): gathered with the outputs.
    tensors: list[str] = field(default_factory=list)
    #: Python values made from batch tensors, a row count (``b_size = real.size(0)``) or a list
    #: (``decode_lengths = (caplens - 1).tolist()``) → (the value, the batch tensors it reads): no
    #: tensor to gather, so computed again from the gathered tensors after the gather.
    recomputed: dict[str, tuple[cst.BaseExpression, set[str]]] = field(default_factory=dict)
    #: Python values made from the batch that cannot be computed again (bound by unpacking):
    #: one entry per sample of this process, which no tensor gather can join.
    python_values: list[str] = field(default_factory=list)
    #: ``total += labels.size(0)`` before the forward → the tensor counted: moved after the
    #: gather, where it counts every process's rows.
    summed_counts: dict[int, tuple[cst.SimpleStatementLine, str]] = field(default_factory=dict)


#: Methods of a tensor that return Python numbers or lists, or a NumPy array: not gatherable.
_PYTHON_VALUE_METHODS = frozenset({"tolist", "item", "numpy"})
#: Builtins that build a Python value (a list of ints, a number) from what they are given.
_PYTHON_VALUE_BUILTINS = frozenset({"list", "tuple", "sorted", "int", "float", "sum", "max", "min"})


def _python_value(value: cst.BaseExpression) -> bool:
    """Whether ``value`` builds a Python value, not a tensor: a comprehension, a
    ``.tolist()``/``.item()``/``.numpy()``, ``list(...)``/``int(...)``..."""
    # A list or tuple display may hold tensors (gathered as nested tensors); a comprehension
    # makes one entry per element of what it runs over.
    if isinstance(value, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)):
        return True
    if isinstance(value, cst.Call):
        func = value.func
        if isinstance(func, cst.Attribute) and func.attr.value in _PYTHON_VALUE_METHODS:
            return True
        return isinstance(func, cst.Name) and func.value in _PYTHON_VALUE_BUILTINS
    return False


def _unpacked_from(statements: Sequence[cst.BaseStatement], forward: cst.CSTNode, batch: tuple[str, ...]) -> _Unpacked:
    """Names assigned, before the forward, from expressions made from the batch names
    (``target = batch[1]``, ``x, y = batch``, ``labels = batch["labels"].to(device)``), by kind:
    tensors, row counts, other Python values."""
    found = _Unpacked()
    known = set(batch)
    for statement in statements:
        if statement is forward or _contains(statement, lambda node: node is forward):
            break
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        first = statement.body[0]
        if (
            len(statement.body) == 1
            and isinstance(first, cst.AugAssign)
            and isinstance(first.operator, cst.AddAssign)
            and isinstance(first.target, cst.Name)
            and rows_counted(first.value) in known
        ):
            found.summed_counts[id(statement)] = (statement, cast(str, rows_counted(first.value)))
        for small in statement.body:
            if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                continue
            target, value = small.targets[0].target, small.value
            pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]]
            if (
                isinstance(target, cst.Tuple)
                and isinstance(value, cst.Tuple)
                and len(target.elements) == len(value.elements)
            ):
                pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
            else:
                pairs = [(target, value)]
            for bound, source in pairs:
                names = [name for name in target_names(bound, plain=True) if name not in batch]
                counted = rows_counted(source)
                reads = variables_read(source)
                if counted in known or (_python_value(source) and reads & (known | set(found.recomputed))):
                    tensors = {counted} if counted in known else reads & known
                    for name in reads & set(found.recomputed):  # ``n = len(lengths)`` of a recomputed list
                        tensors |= found.recomputed[name][1]
                    if isinstance(bound, cst.Name) and len(pairs) == 1:
                        found.recomputed[bound.value] = (source, tensors)
                    else:
                        found.python_values.extend(names)
                elif is_host_number(source):
                    # A size (``n, _ = x.shape``): a Python number, not a row to gather; a sum of
                    # it after the gather is reported (_sizes_summed_after).
                    continue
                elif root_name(source) in known:
                    found.tensors.extend(names)
                    known.update(names)
    return found


def _sizes_summed_after(
    statements: Sequence[cst.BaseStatement], forward: cst.CSTNode, batch: set[str]
) -> list[tuple[str, str]]:
    """``(n, total)`` for ``n, _ = x.shape`` (``n = len(x)``, ``n = x.size(0)``) of a batch name
    bound before the forward and added to ``total`` after it."""
    sizes: set[str] = set()
    found: list[tuple[str, str]] = []
    before = True
    for statement in statements:
        if statement is forward or _contains(statement, lambda node: node is forward):
            before = False
        for node in nodes_in(statement):
            if before and isinstance(node, cst.Assign) and is_host_number(node.value) and names_in(node.value) & batch:
                sizes.update(name for target in node.targets for name in target_names(target.target, plain=True))
            elif not before and isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
                read = sorted(names_in(node.value) & sizes)
                if read:
                    found.append((read[0], expression_code(node.target)))
    return found


@dataclass(frozen=True)
class _GatheredLoop:
    """An evaluation loop the rule gathered in: its loader and the original loop."""

    loader: str
    loop: cst.For


@dataclass
class _BatchCounts:
    """What counts the batches of gathered evaluation loops in one function (or in the
    module-level code): the loaders (``len(loader)``), names holding a count of batches
    (``num_val_batches = len(loader)``, an ``enumerate`` index, a ``steps += 1`` counter) and
    lists appended once per batch (``losses.append(loss.item())``)."""

    loaders: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    per_batch_lists: set[str] = field(default_factory=set)


def _batch_counts(loops: list[_GatheredLoop], scope: Sequence[cst.CSTNode], facts: ScriptFacts) -> _BatchCounts:
    counts = _BatchCounts(loaders={loop.loader for loop in loops})
    for gathered in loops:
        index = enumerate_index(gathered.loop)
        if index is not None:
            counts.names.add(index)
        for statement in _statements_once_per_batch(gathered.loop):
            for small in statement.body:
                counter = counted_by_one(small)
                if isinstance(counter, cst.Name):
                    counts.names.add(counter.value)
                call = small.value if isinstance(small, cst.Expr) else None
                if (
                    isinstance(call, cst.Call)
                    and isinstance(call.func, cst.Attribute)
                    and call.func.attr.value == "append"
                    and isinstance(call.func.value, cst.Name)
                ):
                    counts.per_batch_lists.add(call.func.value.value)
    for node in scope:
        for assign in nodes_in(node):
            if not (
                isinstance(assign, cst.Assign)
                and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Name)
            ):
                continue
            target, value = assign.targets[0].target.value, assign.value
            # ``num_val_batches = len(dataloader)``: an alias of the count.
            if any(_is_len_of(call, counts.loaders) for call in calls_in(value)):
                counts.names.add(target)
            # ``preds = np.concatenate(preds)``: the batches' arrays joined, one entry per sample.
            if (
                isinstance(value, cst.Call)
                and value.args
                and dotted(value.args[0].value) == target
                and facts.qualified_name(value.func) in CONCATENATIONS
            ):
                counts.per_batch_lists.discard(target)
    return counts


def _statements_once_per_batch(loop: cst.For) -> list[cst.SimpleStatementLine]:
    """The simple statements of a loop body that run once per batch: inside ``with`` and ``if``
    blocks, not inside nested loops (a ``for`` over the samples of the batch)."""
    found: list[cst.SimpleStatementLine] = []
    pending: list[cst.CSTNode] = [loop.body]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.SimpleStatementLine):
            found.append(node)
        elif isinstance(node, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            pending.extend(node.body)
        elif isinstance(node, (cst.With, cst.Else)):
            pending.append(node.body)
        elif isinstance(node, cst.If):
            pending.append(node.body)
            if node.orelse is not None:
                pending.append(node.orelse)
    return found


def _is_len_of(call: cst.Call, names: set[str]) -> bool:
    return dotted(call.func) == "len" and len(call.args) == 1 and dotted(call.args[0].value) in names


class _MeansOverBatches(cst.CSTVisitor):
    """Divisions by a count of batches and averages of per-batch lists, with the statement
    holding each (where a report points). Local: it reads only the function (or module-level
    code) whose evaluation loops this rule just gathered."""

    def __init__(self, counts: _BatchCounts, facts: ScriptFacts) -> None:
        super().__init__()
        self.counts = counts
        self.facts = facts
        self.found: list[tuple[cst.CSTNode, cst.CSTNode | None, str]] = []
        self._statements: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            self._statements.append(node)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
            self._check_denominator(node, node.right)
        elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.DivideAssign):
            self._check_denominator(node, node.value)
        elif isinstance(node, cst.Call):
            averaged = self._averaged_list(node)
            if averaged is not None:
                self.found.append(
                    (node, self._anchor(), f"{expression_code(node.func)} of {averaged}, one value per batch")
                )
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self._statements and self._statements[-1] is original_node:
            self._statements.pop()

    def _anchor(self) -> cst.CSTNode | None:
        return self._statements[-1] if self._statements else None

    def _check_denominator(self, node: cst.CSTNode, denominator: cst.BaseExpression) -> None:
        counts = self.counts
        lengths = counts.loaders | counts.per_batch_lists
        if (
            any(_is_len_of(call, lengths) for call in calls_in(denominator))
            or variables_read(denominator) & counts.names
        ):
            self.found.append((node, self._anchor(), f"divided by {expression_code(denominator)}, a count of batches"))

    def _averaged_list(self, call: cst.Call) -> str | None:
        """The per-batch list ``np.mean(losses)``, ``torch.tensor(losses).mean()`` averages."""
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "mean" and not call.args:
            inner = func.value
            if (
                isinstance(inner, cst.Call)
                and inner.args
                and dotted(inner.args[0].value) in self.counts.per_batch_lists
            ):
                return dotted(inner.args[0].value)
            return None
        if (self.facts.qualified_name(func) or "") not in AVERAGING_FUNCTIONS or not call.args:
            return None
        argument = call.args[0].value
        if isinstance(argument, cst.Call) and argument.args:  # np.mean(np.array(losses))
            argument = argument.args[0].value
        name = dotted(argument)
        return name if name in self.counts.per_batch_lists else None


def _multiplied(value: cst.BaseExpression) -> bool:
    return any(
        isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) for node in nodes_in(value)
    )


def _is_batch_mean_loss(call: cst.Call, criteria: set[str], facts: ScriptFacts) -> bool:
    if dotted(call.func) in criteria:
        return True
    qualified = facts.callee_name(call.func) or ""
    name = qualified.rpartition(".")[2]
    return (
        qualified.startswith("torch.nn.functional.")
        and (
            name.endswith("_loss")
            or name in ("cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div")
        )
        and mean_reduced(call)
    )
