"""metrics (ACC113): per-sample outputs and targets gathered right after the forward."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.rewrites.metrics import MetricsCodemod
from tests.codemods.support import HEADER, apply, assert_rewrites, code, convert, convert_text

#: The evaluations left as written, one code per reason (once all ACC913).
MANUAL = frozenset(MetricsCodemod.aliases["ACC913"])

CASES = [
    pytest.param(
        """
        def test(model, test_loader, accelerator):
            model.eval()
            correct = 0
            with torch.no_grad():
                for data, target in test_loader:
                    output = model(data)
                    test_loss += F.nll_loss(output, target, reduction="sum").item()
                    pred = output.argmax(dim=1, keepdim=True)
                    correct += pred.eq(target.view_as(pred)).sum().item()
            test_loss /= len(test_loader.dataset)
        """,
        """
        def test(model, test_loader, accelerator):
            model.eval()
            correct = 0
            with torch.no_grad():
                for data, target in test_loader:
                    output = model(data)
                    output, target = accelerator.gather_for_metrics((output, target))
                    test_loss += F.nll_loss(output, target, reduction="sum").item()
                    pred = output.argmax(dim=1, keepdim=True)
                    correct += pred.eq(target.view_as(pred)).sum().item()
            test_loss /= len(test_loader.dataset)
        """,
        id="mnist-style-sum-and-count",
    ),
    pytest.param(
        """
        def evaluate(accelerator):
            model.eval()
            for batch in tqdm(test_loader):
                with torch.no_grad():
                    outputs = model(**batch)
                predictions = outputs.logits.argmax(dim=1)
                all_predictions += predictions.cpu().tolist()
                all_labels += batch["labels"].cpu().tolist()
        """,
        """
        def evaluate(accelerator):
            model.eval()
            for batch in tqdm(test_loader):
                with torch.no_grad():
                    outputs = model(**batch)
                    logits, labels = accelerator.gather_for_metrics((outputs.logits, batch["labels"]))
                predictions = logits.argmax(dim=1)
                all_predictions += predictions.cpu().tolist()
                all_labels += labels.cpu().tolist()
        """,
        id="hf-style-logits-and-label-key",
    ),
    pytest.param(
        """
        def evaluate(accelerator, metric):
            model.eval()
            for step, batch in enumerate(test_loader):
                with torch.inference_mode():
                    outputs = model(batch["x"])
                metric.add_batch(predictions=outputs.argmax(-1), references=batch["y"])
        """,
        """
        def evaluate(accelerator, metric):
            model.eval()
            for step, batch in enumerate(test_loader):
                with torch.inference_mode():
                    outputs = model(batch["x"])
                    outputs, y = accelerator.gather_for_metrics((outputs, batch["y"]))
                metric.add_batch(predictions=outputs.argmax(-1), references=y)
        """,
        id="metric-add-batch-enumerate",
    ),
    pytest.param(
        """
        def test(epoch, accelerator):
            model.eval()
            with torch.no_grad():
                for i, (data, _) in enumerate(test_loader):
                    recon, mu, logvar = model(data)
                    test_loss += loss_function(recon, data, mu, logvar).item()
                    if i == 0:
                        grid = torch.cat([data[:8], recon.view(args.batch_size, 1, 28, 28)[:8]])
        """,
        """
        def test(epoch, accelerator):
            model.eval()
            with torch.no_grad():
                for i, (data, _) in enumerate(test_loader):
                    recon, mu, logvar = model(data)
                    recon, data, mu, logvar = accelerator.gather_for_metrics((recon, data, mu, logvar))
                    test_loss += loss_function(recon, data, mu, logvar).item()
                    if i == 0:
                        grid = torch.cat([data[:8], recon.view(-1, 1, 28, 28)[:8]])
        """,
        id="vae-tuple-output-and-batch-sized-view",
    ),
    pytest.param(
        # DCGAN-style: b_size is a Python int, read again from the gathered batch (issue 26)
        """
        def evaluate(accelerator):
            with torch.no_grad():
                for data in test_loader:
                    real = data[0]
                    b_size = real.size(0)
                    score = model(real)
                    accepted += (score > 0.5).sum().item()
                    for j in range(b_size):
                        brightest = max(brightest, real[j].max().item())
                    seen += b_size
        """,
        """
        def evaluate(accelerator):
            with torch.no_grad():
                for data in test_loader:
                    real = data[0]
                    b_size = real.size(0)
                    score = model(real)
                    score, real = accelerator.gather_for_metrics((score, real))
                    b_size = real.size(0)
                    accepted += (score > 0.5).sum().item()
                    for j in range(b_size):
                        brightest = max(brightest, real[j].max().item())
                    seen += b_size
        """,
        id="row-count-read-again-after-the-gather",
    ),
    pytest.param(
        # the counted tensor is not read after the forward: gathered for the count
        """
        def evaluate(accelerator):
            with torch.inference_mode():
                for x, y in test_loader:
                    n = len(y)
                    out = model(x)
                    hits += (out.argmax(1) == 0).sum().item()
                    total += n
        """,
        """
        def evaluate(accelerator):
            with torch.inference_mode():
                for x, y in test_loader:
                    n = len(y)
                    out = model(x)
                    out, y = accelerator.gather_for_metrics((out, y))
                    n = len(y)
                    hits += (out.argmax(1) == 0).sum().item()
                    total += n
        """,
        id="counted-tensor-gathered-for-its-count",
    ),
    pytest.param(
        # a list of lengths made from the batch: computed again from the gathered lengths
        """
        def evaluate(accelerator):
            with torch.set_grad_enabled(False):
                for x, lengths in test_loader:
                    decode_lengths = (lengths - 1).tolist()
                    scores = model(x)
                    for i, n in enumerate(decode_lengths):
                        words += n
                        hits += (scores[i, :n].argmax(-1) == 0).sum().item()
        """,
        """
        def evaluate(accelerator):
            with torch.set_grad_enabled(False):
                for x, lengths in test_loader:
                    decode_lengths = (lengths - 1).tolist()
                    scores = model(x)
                    scores, lengths = accelerator.gather_for_metrics((scores, lengths))
                    decode_lengths = (lengths - 1).tolist()
                    for i, n in enumerate(decode_lengths):
                        words += n
                        hits += (scores[i, :n].argmax(-1) == 0).sum().item()
        """,
        id="list-of-lengths-computed-again",
    ),
    pytest.param(
        # a loop over the loaders' batch size visits every gathered row
        """
        def evaluate(accelerator):
            model.eval()
            with torch.no_grad():
                for x, y in test_loader:
                    out = model(x)
                    for j in range(args.batch_size):
                        hits += int(out[j].argmax() == y[j])
        """,
        """
        def evaluate(accelerator):
            model.eval()
            with torch.no_grad():
                for x, y in test_loader:
                    out = model(x)
                    out, y = accelerator.gather_for_metrics((out, y))
                    for j in range(len(out)):
                        hits += int(out[j].argmax() == y[j])
        """,
        id="range-of-batch-size-over-the-gathered-rows",
    ),
    pytest.param(
        """
        def test(model, test_loader, accelerator):
            length_of_data = correct = 0
            model.eval()
            for x, y in test_loader:
                length_of_data = length_of_data + x.size(0)
                out = model(x)
                correct = correct + (out.argmax(1) == y).sum().item()
        """,
        """
        def test(model, test_loader, accelerator):
            length_of_data = correct = 0
            model.eval()
            for x, y in test_loader:
                out = model(x)
                out, y, x = accelerator.gather_for_metrics((out, y, x))
                length_of_data = length_of_data + x.size(0)
                correct = correct + (out.argmax(1) == y).sum().item()
        """,
        id="row-count-summed-written-out-before-the-forward",
    ),
    pytest.param(
        """
        def test(model, test_loader, accelerator):
            length_of_data = correct = 0
            model.eval()
            for x, y in test_loader:
                batch_size = x.size(0)
                length_of_data += batch_size
                out = model(x)
                correct += (out.argmax(1) == y).sum().item()
        """,
        """
        def test(model, test_loader, accelerator):
            length_of_data = correct = 0
            model.eval()
            for x, y in test_loader:
                batch_size = x.size(0)
                out = model(x)
                out, y, x = accelerator.gather_for_metrics((out, y, x))
                batch_size = x.size(0)
                length_of_data += batch_size
                correct += (out.argmax(1) == y).sum().item()
        """,
        id="size-bound-from-the-batch-summed-before-the-forward",
    ),
]


@pytest.mark.parametrize("before, after", CASES)
def test_gathers_after_the_forward(before: str, after: str) -> None:
    changes = assert_rewrites(MetricsCodemod(), before, after)
    assert [c.code for c in changes if c.fixed] == ["ACC113"]


NOT_EVALUATION = [
    pytest.param(
        """
        def train(accelerator):
            model.train()
            for data, target in train_loader:
                output = model(data)
                loss = F.nll_loss(output, target)
                accelerator.backward(loss)
        """,
        id="training-loop",
    ),
    pytest.param(
        """
        def test(accelerator):
            model.eval()
            for data, target in test_loader:
                output = model(data)
                output, target = accelerator.gather_for_metrics((output, target))
                correct += output.argmax(1).eq(target).sum().item()
        """,
        id="already-gathered",
    ),
    pytest.param(
        """
        def test(accelerator):
            for data, target in some_list:
                with torch.no_grad():
                    output = model(data)
                correct += output.argmax(1).eq(target).sum().item()
        """,
        id="not-a-loader",
    ),
]


@pytest.mark.parametrize("source", NOT_EVALUATION)
def test_leaves_other_loops_alone(source: str) -> None:
    output, changes = apply(MetricsCodemod(), code(source))
    assert output == code(source)
    assert changes == []


REPORTED = [
    pytest.param(
        """
        def test(accelerator):
            model.eval()
            for x, y in test_loader:
                total += sum(model(x).argmax(1) == y for x in x.split(2)).item()
        """,
        "nested in a larger expression",
        id="forward-inside-a-generator",
    ),
    pytest.param(
        """
        def test(accelerator):
            model.eval()
            for x, y in test_loader:
                n = x.size(0)
                if flip:
                    preds = model(x.flip(-1))
                else:
                    preds = model(x)
                correct += (preds.argmax(1) == y).sum().item()
        """,
        "the forward sits in a branch of an if/else inside the loop: its output is not gathered",
        id="forward-in-a-branch",
    ),
    pytest.param(
        """
        def test(accelerator):
            model.eval()
            for x, y in test_loader:
                with torch.no_grad():
                    if flip:
                        correct += (model(x.flip(-1)).argmax(1) == y).sum().item()
                    elif half:
                        correct += (model(x.half()).argmax(1) == y).sum().item()
        """,
        "the forward sits in a branch of an if/else inside the loop",
        id="forward-in-an-elif-chain-under-with",
    ),
    pytest.param(
        """
        def test(accelerator):
            model.eval()
            for x, y in test_loader:
                try:
                    preds = model(x)
                except RuntimeError:
                    continue
                correct += (preds.argmax(1) == y).sum().item()
        """,
        "the forward sits in a try block inside the loop",
        id="forward-in-a-try-block",
    ),
    pytest.param(
        """
        def test(accelerator):
            model.eval()
            for x, y in test_loader:
                with torch.no_grad():
                    correct += (model(x).argmax(1) == y).sum().item() if flip else 0
        """,
        "nested in a larger expression",
        id="forward-in-a-conditional-expression",
    ),
    pytest.param(
        """
        def test(accelerator):
            model.eval()
            for batch in test_loader:
                with torch.no_grad():
                    outputs = model(**batch)
                eval_loss += outputs.loss.item()
                preds += outputs.logits.argmax(-1).tolist()
        """,
        "outputs.loss is one value per batch",
        id="batch-mean-loss",
    ),
    pytest.param(
        """
        def test():
            model.eval()
            with torch.no_grad():
                for data, target in test_loader:
                    output = model(data)
                    correct += output.argmax(1).eq(target).sum().item()
        """,
        "accelerator is not reachable",
        id="no-accelerator-here",
    ),
]


def test_a_batch_scalar_among_the_outputs_is_reported_not_gathered() -> None:
    """``loss, logits = model(**batch)``: gathering the batch-mean ``loss`` would give N values
    and break its ``.item()``; the per-sample outputs are still gathered."""
    before = """
        def evaluate(accelerator):
            model.eval()
            for batch in test_loader:
                with torch.no_grad():
                    loss, logits = model(**batch)
                n_correct += (logits.argmax(-1) == batch["labels"]).sum().item()
                loss_sum += loss.item()
                err_sum += err.item()
    """
    after = before.replace(
        "loss, logits = model(**batch)\n",
        "loss, logits = model(**batch)\n"
        '                    logits, labels = accelerator.gather_for_metrics((logits, batch["labels"]))\n',
    ).replace('== batch["labels"]', "== labels")
    changes = assert_rewrites(MetricsCodemod(), before, after)
    assert sorted((c.code, c.fixed) for c in changes) == [("ACC113", True), ("ACC949", False)]
    assert "loss is one value per batch" in next(c.message for c in changes if not c.fixed)


def test_an_output_read_with_item_is_a_batch_scalar() -> None:
    before = """
        def evaluate(accelerator):
            model.eval()
            for x, y in test_loader:
                with torch.no_grad():
                    mean_error, preds = model(x)
                total += (preds == y).sum().item()
                error_sum += mean_error.item()
    """
    after = before.replace(
        "mean_error, preds = model(x)\n",
        "mean_error, preds = model(x)\n                    preds, y = accelerator.gather_for_metrics((preds, y))\n",
    )
    changes = assert_rewrites(MetricsCodemod(), before, after)
    assert ["mean_error is one value per batch" in c.message for c in changes if not c.fixed] == [True]


def test_the_main_block_reaches_the_accelerator_it_creates() -> None:
    """A script trained inside ``if __name__ == "__main__":`` (the LBFGS fixture): its evaluation
    loop runs after the block creates the accelerator, so it is gathered; a loop above the
    creation is not."""
    before = """
        if __name__ == "__main__":
            with torch.no_grad():
                for x, y in test_loader:
                    first = model(x)
                    total += first.sum().item()
            accelerator = Accelerator()
            with torch.no_grad():
                for x, y in test_loader:
                    prediction = model(x)
                    sse += ((prediction - y) ** 2).sum().item()
    """
    after = before.replace(
        "prediction = model(x)\n",
        "prediction = model(x)\n                    prediction, y = accelerator.gather_for_metrics((prediction, y))\n",
    )
    changes = assert_rewrites(MetricsCodemod(), before, after)
    assert sorted((c.code, c.fixed, c.line) for c in changes) == [("ACC113", True, 8), ("ACC939", False, 3)]


@pytest.mark.parametrize("source, message", REPORTED)
def test_reports_what_it_cannot_gather(source: str, message: str) -> None:
    _, changes = apply(MetricsCodemod(), code(source))
    warnings = [c for c in changes if not c.fixed]
    assert len(warnings) == 1 and warnings[0].code in MANUAL, warnings
    assert message in warnings[0].message
    assert warnings[0].line > 1  # points into the loop, not at the top of the file


def test_fresh_names_do_not_shadow_the_script() -> None:
    source = code(
        """
        def test(accelerator):
            logits = None
            model.eval()
            for batch in test_loader:
                with torch.no_grad():
                    outputs = model(**batch)
                preds += outputs.logits.argmax(-1).tolist()
        """
    )
    output, _ = apply(MetricsCodemod(), source)
    assert "gathered_logits = accelerator.gather_for_metrics(outputs.logits)" in output
    assert "preds += gathered_logits.argmax(-1).tolist()" in output


def test_forward_inside_a_reduction_gets_its_own_line() -> None:
    before = """
    def validate(model, test_loader, accelerator):
        model.eval()
        with torch.no_grad():
            for x, y in test_loader:
                # count the hits
                correct += (model(x).argmax(1) == y).sum().item()
        return correct
    """
    after = """
    def validate(model, test_loader, accelerator):
        model.eval()
        with torch.no_grad():
            for x, y in test_loader:
                # count the hits
                output = model(x)
                output, y = accelerator.gather_for_metrics((output, y))
                correct += (output.argmax(1) == y).sum().item()
        return correct
    """
    changes = assert_rewrites(MetricsCodemod(), before, after)
    assert [c.code for c in changes] == ["ACC113"]


def test_chained_models_are_one_forward_hoisted_whole() -> None:
    source = code(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        encoder, decoder = nn.Linear(4, 8), nn.Linear(8, 2)
        optimizer = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()])
        loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
        for x, y in loader:
            nn.functional.cross_entropy(decoder(encoder(x)), y).backward()
            optimizer.step()
        encoder.eval()
        decoder.eval()
        correct = 0
        with torch.no_grad():
            for x, y in loader:
                correct += (decoder(encoder(x)).argmax(1) == y).sum().item()
        print(correct)
        """
    )
    output, changes = convert_text(source)
    assert "output = decoder(encoder(x))" in output
    assert "output, y = accelerator.gather_for_metrics((output, y))" in output
    assert "correct += (output.argmax(1) == y).sum().item()" in output
    assert not MANUAL & {change.code for change in changes}


def test_a_batch_mean_loss_summed_over_batches_is_reported_after_the_gather() -> None:
    body = """\
def evaluate(model, loader):
    criterion = nn.BCELoss()
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            outputs = model(x).squeeze()
            total += criterion(outputs, y).item()
            total += nn.functional.mse_loss(outputs, y, reduction="sum").item()
    return total / len(loader.dataset)


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8)), batch_size=2)
    model = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x).squeeze(), y).backward()
        optimizer.step()
    print(evaluate(model, loader))
"""
    code, lines = convert(body)
    assert "output, y = accelerator.gather_for_metrics((output, y))" in lines
    # One report: the mean-reduced criterion; the reduction="sum" one adds per-sample losses.
    assert lines.count("#ACC942") == 1


SEQUENCE_MODEL = """\
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = {layer}

    def forward(self, x):
        return self.rnn(x)[0]


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.encoder(x))


def main():
    parser = argparse.ArgumentParser()
    args = parser.parse_args()
    loader = DataLoader(TensorDataset(torch.randn(8, 5, 4), torch.zeros(8, 5).long()), batch_size=2)
    model = Tagger().to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            output = model(x)
            correct += (output.argmax(-1) == y).sum().item()
    print(correct)
"""


@pytest.mark.parametrize(
    "layer, reason",
    [
        ("nn.LSTM(4, 8)", "nn.LSTM built without batch_first=True"),
        ("nn.GRU(4, 8, batch_first=False)", "nn.GRU built without batch_first=True"),
        ("nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 8), 1)", "nn.TransformerEncoderLayer built"),
        ("nn.RNN(4, 8, batch_first=args.batch_first)", "nn.RNN built without batch_first=True"),
    ],
)
def test_a_sequence_first_model_is_reported_not_gathered(layer: str, reason: str) -> None:
    """The model builds (through a class of the file) a layer taking (sequence, batch, ...):
    joining its outputs along dim 0 would mix sequence positions of different processes."""
    output, changes = convert_text(HEADER + SEQUENCE_MODEL.format(layer=layer))
    assert "gather_for_metrics" not in output
    reported = [c.message for c in changes if c.code == "ACC922"]
    assert len(reported) == 1 and reason in reported[0]
    assert "ACC113" not in {c.code for c in changes}


def test_a_batch_first_model_is_still_gathered() -> None:
    code, lines = convert(SEQUENCE_MODEL.format(layer="nn.LSTM(4, 8, batch_first=True)"))
    assert "output, y = accelerator.gather_for_metrics((output, y))" in lines
    assert "#ACC922" not in lines


def test_batches_padded_sequence_first_are_reported_not_gathered() -> None:
    body = SEQUENCE_MODEL.format(layer="nn.LSTM(4, 8, batch_first=True)").replace(
        "batch_size=2)", "batch_size=2, collate_fn=pad_collate)"
    )
    body = (
        "from torch.nn.utils.rnn import pad_sequence\n\n\n"
        "def pad_collate(items):\n"
        "    return pad_sequence([x for x, _ in items]), pad_sequence([y for _, y in items])\n\n\n" + body
    )
    code, lines = convert(body)
    assert "gather_for_metrics" not in code
    assert lines.count("#ACC922") == 1


TORCHMETRICS = """\
import torchmetrics
from torchmetrics import MetricCollection
from torchmetrics.wrappers import ClasswiseWrapper


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8).long()), batch_size=2)
    model = nn.Linear(4, 3).to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    metric = {metric}
    for x, y in loader:
        optimizer.zero_grad()
        output = model(x)
        nn.functional.cross_entropy(output, y).backward()
        optimizer.step()
{in_training}
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            output = model(x)
            metric.update(output, y)
            store.update(output, y)
    print(metric.compute())
"""


def torchmetrics_case(metric: str, in_training: str = "") -> tuple[str, list]:
    body = TORCHMETRICS.format(metric=metric, in_training=in_training)
    return convert_text(HEADER + body)


@pytest.mark.parametrize(
    "metric, converted",
    [
        (
            'torchmetrics.Accuracy(task="multiclass", num_classes=3)',
            'torchmetrics.Accuracy(task="multiclass", num_classes=3, sync_on_compute=False)',
        ),
        ("torchmetrics.SumMetric().to(device)", "torchmetrics.SumMetric(sync_on_compute=False).to(device)"),
        (
            "MetricCollection([torchmetrics.MeanSquaredError(), torchmetrics.CatMetric()])",
            "MetricCollection([torchmetrics.MeanSquaredError(sync_on_compute=False), "
            "torchmetrics.CatMetric(sync_on_compute=False)])",
        ),
    ],
)
def test_a_torchmetrics_metric_fed_gathered_values_does_not_sync_again(metric: str, converted: str) -> None:
    """After the gather each process's metric already holds every sample; torchmetrics'
    compute() would add the processes' states up again (sums and counts N times)."""
    output, changes = torchmetrics_case(metric)
    assert "output, y = accelerator.gather_for_metrics((output, y))" in output
    assert f"metric = {converted}" in output
    assert any(c.code == "ACC113" and "sync_on_compute=False" in c.message for c in changes)
    # ``store.update(...)`` gets gathered values too: it may be a metric built out of sight.
    assert [c.message.split(".")[0] for c in changes if c.code in MANUAL] == ["store"]


@pytest.mark.parametrize(
    "metric, in_training, why",
    [
        ("torchmetrics.SumMetric()", "        metric.update(output.detach(), y)", "also updated with this process"),
        (
            "ClasswiseWrapper(torchmetrics.Accuracy(task='multiclass', num_classes=3, average=None))",
            "",
            "may not take sync_on_compute",
        ),
    ],
)
def test_a_metric_that_cannot_be_told_not_to_sync_is_reported(metric: str, in_training: str, why: str) -> None:
    output, changes = torchmetrics_case(metric, in_training)
    assert "sync_on_compute" not in output
    reported = [c.message for c in changes if c.code in MANUAL and c.message.startswith("metric ")]
    assert len(reported) == 1 and why in reported[0]


# -- means over batches (ACC941) ----------------------------------------------------------------

#: A whole script whose evaluation (``{evaluation}``, the body of ``evaluate``) runs over a
#: prepared loader; ``{module_level}`` follows the training at module level.
MEAN_OVER_BATCHES = """\
import numpy as np

criterion = nn.CrossEntropyLoss()


def evaluate(model, loader):
    model.eval()
{evaluation}


train_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8).long()), batch_size=2)
test_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8).long()), batch_size=2)
model = nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in train_loader:
    optimizer.zero_grad()
    criterion(model(x), y).backward()
    optimizer.step()
print(evaluate(model, test_loader))
{module_level}
"""

#: The loop ``evaluate`` runs in most cases below: the loss named first, then added up.
SUMMED_LOSS_LOOP = """\
    test_loss = 0
    with torch.no_grad():
        for batch_idx, (inputs, targets) in enumerate(loader):
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            test_loss += loss.item()
"""


@pytest.mark.parametrize(
    "evaluation, module_level, expected",
    [
        pytest.param(
            SUMMED_LOSS_LOOP + "    return test_loss / (batch_idx + 1)",
            "",
            ["a batch-mean loss added up per batch", "divided by (batch_idx + 1), a count of batches"],
            id="kuangliu-enumerate-index",
        ),
        pytest.param(
            "    num_val_batches = len(loader)\n" + SUMMED_LOSS_LOOP + "    return test_loss / max(num_val_batches, 1)",
            "",
            ["a batch-mean loss added up per batch", "divided by max(num_val_batches, 1), a count of batches"],
            id="unet-alias-of-len-loader",
        ),
        pytest.param(
            """\
    accs = []
    with torch.no_grad():
        for inputs, targets in loader:
            outputs = model(inputs)
            accs.append((outputs.argmax(1) == targets).float().mean().item())
    return np.mean(accs), sum(accs) / len(accs)""",
            "",
            ["np.mean of accs, one value per batch", "divided by len(accs), a count of batches"],
            id="sentiment-np-mean-of-a-per-batch-list",
        ),
        pytest.param(
            """\
    steps = 0
    total = 0.0
    with torch.no_grad():
        for inputs, targets in loader:
            outputs = model(inputs)
            total += (outputs.argmax(1) == targets).float().mean().item()
            steps += 1
    return total / steps""",
            "",
            ["divided by steps, a count of batches"],
            id="hf-steps-counter",
        ),
        pytest.param(
            "    return 0",
            """\
model.eval()
total_accuracy = 0
for inputs, targets in test_loader:
    with torch.no_grad():
        outputs = model(inputs)
    total_accuracy += (outputs.argmax(1) == targets).float().mean().item()
print(total_accuracy / len(test_loader))""",
            ["divided by len(test_loader), a count of batches"],
            id="bert-module-level",
        ),
    ],
)
def test_a_mean_over_gathered_batches_is_reported(evaluation: str, module_level: str, expected: list[str]) -> None:
    """Each shape of a mean over batches found in published evaluation code: after the gather a
    per-batch value averages one batch of every process, so the mean is not the one-process one."""
    output, changes = convert_text(HEADER + MEAN_OVER_BATCHES.format(evaluation=evaluation, module_level=module_level))
    assert "accelerator.gather_for_metrics(" in output
    reported = [c.message for c in changes if c.code in MANUAL]
    assert len(reported) == len(expected), reported
    for fragment in expected:
        assert any(fragment in message for message in reported), (fragment, reported)


@pytest.mark.parametrize(
    "evaluation",
    [
        pytest.param(
            """\
    correct = 0
    with torch.no_grad():
        for inputs, targets in loader:
            outputs = model(inputs)
            correct += (outputs.argmax(1) == targets).sum().item()
    return correct / len(loader.dataset)""",
            id="per-sample-count-over-the-dataset",
        ),
        pytest.param(
            SUMMED_LOSS_LOOP.replace("loss.item()", "loss.item() * targets.size(0)")
            + "    return test_loss / len(loader.dataset)",
            id="batch-mean-loss-weighed-by-the-batch-size",
        ),
        pytest.param(
            """\
    preds = []
    with torch.no_grad():
        for step, (inputs, targets) in enumerate(loader):
            outputs = model(inputs)
            for row in outputs:
                preds.append(row.argmax().item())
            print(step / 2)
    return np.mean(preds)""",
            id="per-sample-list-and-an-unrelated-division",
        ),
    ],
)
def test_per_sample_means_are_not_reported(evaluation: str) -> None:
    output, changes = convert_text(HEADER + MEAN_OVER_BATCHES.format(evaluation=evaluation, module_level=""))
    assert "accelerator.gather_for_metrics(" in output
    assert [c.message for c in changes if c.code in MANUAL] == []


def test_an_attribute_named_like_the_batch_is_not_gathered() -> None:
    """The PyTorch CIFAR-10 tutorial: ``for data in testloader`` then ``outputs.data``. The name
    after the dot is no use of the batch ``data``: only the outputs and the labels are gathered."""
    before = """
        def test(accelerator):
            with torch.no_grad():
                for data in test_loader:
                    images, labels = data
                    outputs = model(images)
                    _, predicted = torch.max(outputs.data, 1)
                    correct += (predicted == labels).sum().item()
    """
    after = before.replace(
        "outputs = model(images)\n",
        "outputs = model(images)\n"
        "                    gathered_data, labels = accelerator.gather_for_metrics((outputs.data, labels))\n",
    ).replace("torch.max(outputs.data, 1)", "torch.max(gathered_data, 1)")
    assert_rewrites(MetricsCodemod(), before, after)


STREAMED_EVALUATION = """\
from torch.utils.data import IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        for i in range(8):
            yield torch.randn(4), i % 3
{length}

class NamedStream(Stream):
    pass


def evaluate(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct


def main():
    train_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8).long()), batch_size=2)
    test_set = {dataset}
    test_loader = DataLoader(dataset=test_set, batch_size=2)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    print(evaluate(model, loader=test_loader))
"""


@pytest.mark.parametrize(
    "dataset, length, reported",
    [
        pytest.param("Stream()", "", "Stream is an IterableDataset without __len__", id="stream"),
        pytest.param("NamedStream()", "", "NamedStream is an IterableDataset without __len__", id="subclass"),
        pytest.param("NamedStream()", "\n    def __len__(self):\n        return 8\n", None, id="sized-stream"),
        pytest.param("TensorDataset(torch.randn(8, 4), torch.zeros(8).long())", "", None, id="map-style"),
    ],
)
def test_evaluation_over_a_stream_without_length_is_reported(dataset: str, length: str, reported: str | None) -> None:
    """A stream has no length: the runtime pads its last batches with repeated samples and
    gather_for_metrics cannot drop them (no remainder to cut at). Still gathered, and reported
    unless the dataset class (or a base of the file) says its length."""
    output, changes = convert_text(HEADER + STREAMED_EVALUATION.format(dataset=dataset, length=length))
    assert "output, y = accelerator.gather_for_metrics((output, y))" in output
    messages = [c.message for c in changes if c.code in MANUAL]
    if reported is None:
        assert messages == []
    else:
        assert len(messages) == 1 and reported in messages[0] and "give " in messages[0]


DETECTION_EVALUATION = """\
def collate_fn(batch):
    return tuple(zip(*batch))


def evaluate(model, data_loader):
    model.eval()
    hits = 0
    with torch.no_grad():
        for images, targets in data_loader:
            outputs = model(images)
{rebuild}
            for out, tgt in zip(outputs, targets):
                hits += int(out["labels"][0] == tgt["labels"][0])
    return hits


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8).long()), batch_size=2, collate_fn=collate_fn)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8).long()), batch_size=2):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    print(evaluate(model, loader))
"""


def test_lists_of_per_image_objects_are_gathered_each_as_objects() -> None:
    """Detection batches (``collate_fn`` zips the samples) and outputs rebuilt per image are
    lists: gathered in one tuple, the object gather flattens them together (too many values to
    unpack); each list is gathered on its own as objects."""
    rebuild = '            outputs = [{k: v.to("cpu") for k, v in t.items()} for t in outputs]'
    output, changes = convert_text(HEADER + DETECTION_EVALUATION.format(rebuild=rebuild))
    assert "outputs = accelerator.gather_for_metrics(outputs, use_gather_object=True)" in output
    assert "targets = accelerator.gather_for_metrics(targets, use_gather_object=True)" in output
    assert not MANUAL & {c.code for c in changes}


def test_a_list_batch_with_outputs_of_unknown_kind_is_reported_not_gathered() -> None:
    output, changes = convert_text(HEADER + DETECTION_EVALUATION.format(rebuild=""))
    assert "gather_for_metrics" not in output
    reported = [c.message for c in changes if c.code in MANUAL]
    assert len(reported) == 1 and "use_gather_object=True" in reported[0]


METRIC_LOGGER_LOOPS = """\
class MetricLogger:
    def __init__(self, delimiter="\\t"):
        self.delimiter = delimiter

    def log_every(self, iterable, print_freq, header=None):
        for i, obj in enumerate(iterable):
            yield obj
            if i % print_freq == 0:
                print(header, i)


def evaluate(model, data_loader, device):
    model.eval()
    metric_logger = MetricLogger(delimiter="  ")
    correct = 0
    seen = 0
    with torch.inference_mode():
        for image, target in metric_logger.log_every(data_loader, 10, "Test:"):
            image, target = image.to(device), target.to(device)
            output = model(image)
            correct += (output.argmax(1) == target).sum().item()
            seen += image.shape[0]
    print(correct, seen)


def main():
    device = torch.device("cuda")
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
    test_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)
    model = nn.Linear(4, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    metric_logger = MetricLogger()
    for i, (x, y) in enumerate(metric_logger.log_every(loader, 10, "Epoch")):
        x, y = x.to(device), y.to(device)
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    evaluate(model, test_loader, device)
"""


def test_loops_over_a_metric_logger_run_over_the_prepared_loader() -> None:
    """torchvision's reference scripts: ``metric_logger.log_every(data_loader, print_freq,
    header)`` yields the loader's batches. Before, the training loop was taken for data without a
    DataLoader (ACC901) and the evaluation was not gathered (each rank counted its own shard); the
    logger receives the accelerator, so its progress prints once. ``image.shape[0]`` counts the
    gathered images (a torch.Size is no tensor to gather)."""
    converted, lines = convert(METRIC_LOGGER_LOOPS)
    assert "#ACC901" not in lines
    assert "output, target, image = accelerator.gather_for_metrics((output, target, image))" in lines
    assert "self.accelerator.print(header, i)" in lines
    assert 'metric_logger = MetricLogger(delimiter="  ", accelerator=accelerator)' in lines
    assert "x, y = x.to(device), y.to(device)" not in lines


RECURRENT_HIDDEN = """\
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.rnn = nn.{layer}(8, 8, num_layers=2, batch_first=True)
        self.fc = nn.Linear(8, 2)

    def forward(self, tokens):
        out, {state} = self.rnn(self.embed(tokens))
        return self.fc(out[:, -1]), {returned}


def main():
    loader = DataLoader(TensorDataset(torch.randint(0, 10, (16, 5)), torch.randint(0, 2, (16,))), batch_size=4)
    test_loader = DataLoader(TensorDataset(torch.randint(0, 10, (8, 5)), torch.randint(0, 2, (8,))), batch_size=4)
    model = Encoder()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        logits, _ = model(x)
        nn.functional.cross_entropy(logits, y).backward()
        optimizer.step()
    model.eval()
    embeddings = []
    correct = 0
    with torch.no_grad():
        for x, y in test_loader:
            logits, {unpacked} = model(x)
            correct += (logits.argmax(1) == y).sum().item()
            embeddings.append({read})
    print(correct, torch.cat(embeddings).shape)
"""


@pytest.mark.parametrize(
    "layer, state, returned, unpacked, read",
    [
        ("GRU", "hidden", "hidden", "hidden", "hidden[-1]"),
        ("LSTM", "(hidden, cell)", "(hidden, cell)", "(hidden, _)", "hidden[-1]"),
    ],
)
def test_a_recurrent_hidden_state_read_by_the_evaluation_is_reported_not_gathered(
    layer: str, state: str, returned: str, unpacked: str, read: str
) -> None:
    """``(layers, batch, hidden)`` even with ``batch_first=True``: gathered along dim 0 it mixed
    layers across processes (128 of 200 embeddings on two processes). Reported (ACC922) and left."""
    body = RECURRENT_HIDDEN.format(layer=layer, state=state, returned=returned, unpacked=unpacked, read=read)
    converted, lines = convert(body)
    assert "#ACC922" in lines
    assert "gather_for_metrics" not in converted
    # Not read by the evaluation (only the logits): the logits are gathered as usual.
    unread = body.replace(f"            embeddings.append({read})\n", "")
    converted, lines = convert(unread)
    assert "#ACC922" not in lines
    assert "logits, y = accelerator.gather_for_metrics((logits, y))" in lines


ENSEMBLE = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


@torch.no_grad()
def evaluate(models, loader):
    correct = 0
    for x, y in loader:
        probs = {average}
        correct += ({predictions} == y).sum().item()
    print(correct)


def main():
    train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
    test_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
    models = [nn.Linear(4, 2) for _ in range(3)]
    for m in models:
        {training}
    evaluate(models, test_loader)
"""


def test_an_ensemble_of_prepared_models_is_gathered_per_sample() -> None:
    """``@torch.no_grad()`` makes it an evaluation; ``train`` prepares each member (each call its
    own ``prepare``), so the members' averaged probabilities, one row per sample, are gathered
    with the targets, as a single model's outputs are."""
    code, changes = convert_text(
        ENSEMBLE.format(
            average="torch.stack([m(x).softmax(-1) for m in models]).mean(0)",
            predictions="probs.argmax(-1)",
            training="train(m, train_loader)",
        )
    )
    assert "        probs, y = accelerator.gather_for_metrics((probs, y))\n" in code
    assert "model, optimizer = accelerator.prepare(model, optimizer)" in code
    assert not [change for change in changes if change.code in MANUAL]


ENSEMBLES_NOT_GATHERED = {
    # Stacked without the average: (members, batch, classes), the gather would join members.
    "members stacked, not averaged": ("torch.stack([m(x).softmax(-1) for m in models])", "probs.mean(0).argmax(-1)"),
    # Averaged over the classes: what remains is no longer one row per sample.
    "averaged over another dimension": ("torch.stack([m(x) for m in models]).mean(1)", "probs.argmax(-1)"),
}


@pytest.mark.parametrize(("average", "predictions"), ENSEMBLES_NOT_GATHERED.values(), ids=ENSEMBLES_NOT_GATHERED.keys())
def test_an_ensemble_whose_rows_are_not_samples_is_reported_not_silently_per_rank(
    average: str, predictions: str
) -> None:
    code, changes = convert_text(
        ENSEMBLE.format(average=average, predictions=predictions, training="train(m, train_loader)")
    )
    assert "gather_for_metrics" not in code
    assert [change.line for change in changes if change.code in MANUAL] == [17]


def test_an_ensemble_of_models_nothing_prepares_is_reported_not_silently_per_rank() -> None:
    """Members only loaded, never handed to a function that prepares them: per process as they
    are, so the evaluation is left and reported."""
    code, changes = convert_text(
        ENSEMBLE.format(
            average="torch.stack([m(x).softmax(-1) for m in models]).mean(0)",
            predictions="probs.argmax(-1)",
            training="m.load_state_dict(torch.load('m.pt'))\n    train(nn.Linear(4, 2), train_loader)",
        )
    )
    assert "gather_for_metrics" not in code
    assert [change.line for change in changes if change.code in MANUAL] == [17]


COMPREHENSION_EVALUATION = """\
def loss_batch(model, xb, yb, opt=None):
    loss = nn.functional.cross_entropy(model(xb), yb)
    if opt is not None:
        loss.backward()
        opt.step()
        opt.zero_grad()
    return loss.item(), len(xb)


def fit(epochs, model, opt, train_dl, valid_dl):
    for epoch in range(epochs):
        model.train()
        losses = [loss_batch(model, xb, yb, opt) for xb, yb in train_dl]
        model.eval()
        with torch.no_grad():
            losses, nums = zip(*[loss_batch(model, xb, yb) for xb, yb in valid_dl])
        print(sum(l * n for l, n in zip(losses, nums)) / sum(nums))


def main():
    train_dl = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=2)
    valid_dl = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=2)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fit(2, model, opt, train_dl, valid_dl)
"""


def test_an_evaluation_in_a_comprehension_is_reported() -> None:
    """A comprehension cannot take a gather after its forward: the one over the validation
    loader (under no_grad, after model.eval()) is reported; the training one is not."""
    _, changes = convert_text(HEADER + COMPREHENSION_EVALUATION)
    reports = [change for change in changes if change.code in MANUAL]
    assert len(reports) == 1, reports
    assert "valid_dl" in reports[0].message
    assert (
        reports[0].line
        == HEADER.count("\n")
        + COMPREHENSION_EVALUATION.splitlines().index(
            "            losses, nums = zip(*[loss_batch(model, xb, yb) for xb, yb in valid_dl])"
        )
        + 1
    )


DECODING_SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


def sample_accuracy(model, loader, device):
    hits = 0
    for src, tgt in loader:
        src, tgt = src.to(device), tgt.to(device)
        pred = model.generate(src)
        hits += (pred == tgt).sum().item()
    return hits


device = torch.device("cuda")
model = nn.Linear(4, 4).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(train_set, batch_size=8)
val_loader = DataLoader(val_set, batch_size=8)
for x, y in train_loader:
    {training}
print(sample_accuracy(model, val_loader, device))
"""


def test_a_decoding_loop_without_no_grad_or_eval_mode_is_reported_as_evaluation() -> None:
    """``model.generate`` over the prepared loader with neither ``no_grad`` nor ``model.eval()``:
    still an evaluation (its counts cover one process's shard), reported like any decoding."""
    code, changes = convert_text(
        DECODING_SCRIPT.format(training="optimizer.zero_grad()\n    model(x).sum().backward()\n    optimizer.step()")
    )
    assert "gather_for_metrics" not in code
    assert [change.line for change in changes if change.code in MANUAL] == [10]


def test_a_decoding_loop_that_only_writes_samples_is_not_reported() -> None:
    code, changes = convert_text(
        DECODING_SCRIPT.format(
            training="optimizer.zero_grad()\n    model(x).sum().backward()\n    optimizer.step()"
        ).replace("hits += (pred == tgt).sum().item()", "print(pred)")
    )
    assert not [change for change in changes if change.code in MANUAL]


def test_a_loop_that_generates_and_runs_a_backward_is_no_evaluation() -> None:
    """A backward in the loop makes it training (self-training on decoded targets): not reported."""
    code, changes = convert_text(
        DECODING_SCRIPT.format(
            training="optimizer.zero_grad()\n    model(x).sum().backward()\n    optimizer.step()"
        ).replace("hits += (pred == tgt).sum().item()", "model(pred).sum().backward()")
    )
    assert not [change for change in changes if change.code in MANUAL]


TEST_TIME_AUGMENTATION = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


def test(model, loader, device):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = {logits}
            correct += (logits.argmax(1) == y).sum().item()
    return correct


device = torch.device("cuda")
model = nn.Linear(4, 4).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(train_set, batch_size=8)
val_loader = DataLoader(val_set, batch_size=8)
for x, y in train_loader:
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()
print(test(model, val_loader, device))
"""


@pytest.mark.parametrize(
    "logits",
    [
        "(model(x) + model(torch.flip(x, dims=[-1]))) / 2",
        "0.5 * model(x) + 0.5 * model(x.flip(-1))",
        "(model(x).softmax(1) + torch.softmax(model(x.flip(-1)), dim=1)) / 2",
    ],
)
def test_averaged_forwards_of_test_time_augmentation_are_gathered(logits: str) -> None:
    code, changes = convert_text(TEST_TIME_AUGMENTATION.format(logits=logits))
    assert (
        f"            logits = {logits}\n            logits, y = accelerator.gather_for_metrics((logits, y))\n" in code
    )
    assert not [change for change in changes if change.code in MANUAL]


@pytest.mark.parametrize(
    "logits",
    ["(model(x) + model(x)) / x.size(0)", "(model(x).softmax(0) + model(x.flip(-1)).softmax(0)) / 2"],
    ids=["divided-by-a-batch-value", "softmax-over-the-batch"],
)
def test_forwards_joined_with_a_batch_value_are_not_taken_for_one_forward(logits: str) -> None:
    """Not forwards (row-wise) and numbers only: left and reported as before."""
    code, changes = convert_text(TEST_TIME_AUGMENTATION.format(logits=logits))
    assert "gather_for_metrics" not in code
    assert [change.code for change in changes if change.code in MANUAL] == ["ACC943"]


@pytest.mark.parametrize("size", ["n = x.size(0)", "n = len(x)", "n = x.shape[0]"])
def test_a_row_count_read_before_the_forward_is_counted_again_after_the_gather(size: str) -> None:
    # ``n`` is a Python int: gathering it would hand back a list; read again from the gathered
    # rows, ``total += n`` counts every process's samples.
    source = code(
        f"""
        def test(accelerator):
            with torch.no_grad():
                for x, y in test_loader:
                    {size}
                    out = model(x)
                    correct += (out.argmax(1) == y).sum().item()
                    total += n
        """
    )
    converted, changes = apply(MetricsCodemod(), source)
    assert "out, y, x = accelerator.gather_for_metrics((out, y, x))" in converted, converted
    assert converted.index("gather_for_metrics") < converted.rindex(size), converted
    assert [c for c in changes if not c.fixed] == []


def test_a_size_unpacked_from_the_shape_is_not_gathered_and_its_sum_is_reported() -> None:
    source = code(
        """
        def test(accelerator):
            with torch.no_grad():
                for x, y in test_loader:
                    n, _ = x.shape
                    out = model(x)
                    correct += (out.argmax(1) == y).sum().item()
                    total += n
        """
    )
    converted, changes = apply(MetricsCodemod(), source)
    assert "out, y = accelerator.gather_for_metrics((out, y))" in converted, converted
    warnings = [c for c in changes if not c.fixed]
    assert [c.code for c in warnings] == ["ACC950"], warnings
    assert "n is the size of this process's batch" in warnings[0].message


def test_a_count_summed_before_the_forward_moves_below_the_gather() -> None:
    before = """
        def evaluate(accelerator):
            with torch.no_grad():
                for x, y in test_loader:
                    total += y.size(0)
                    out = model(x)
                    correct += (out.argmax(1) == y).sum().item()
        """
    after = """
        def evaluate(accelerator):
            with torch.no_grad():
                for x, y in test_loader:
                    out = model(x)
                    out, y = accelerator.gather_for_metrics((out, y))
                    total += y.size(0)
                    correct += (out.argmax(1) == y).sum().item()
        """
    assert_rewrites(MetricsCodemod(), before, after)


_CAPTIONS = """
class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(4, 30)

    def forward(self, feats, caplens):
        decode_lengths = (caplens - 1).tolist()
        return self.out(feats).view(-1, 5, 6), decode_lengths


def validate(loader, model, epochs):
    model.eval()
    BIND_OUTSIDE
    for epoch in range(epochs):
        BIND_INSIDE
        with torch.no_grad():
            for i, (feats, caps, caplens) in enumerate(loader):
                scores, decode_lengths = model(feats, caplens)
                for j in range(caps.shape[0]):
                    references.append([w for w in caps[j].tolist() if w != 0])
                preds = scores.argmax(2).tolist()
                hypotheses.extend([p[:n] for p, n in zip(preds, decode_lengths)])
                READ_IN_LOOP
        print(corpus_score(references, hypotheses))


def main():
    model = Decoder()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 6, (8, 5)), torch.full((8,), 5)))
    val_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 6, (8, 5)), torch.full((8,), 5)))
    for feats, caps, caplens in train_loader:
        optimizer.zero_grad()
        scores, _ = model(feats, caplens)
        nn.functional.cross_entropy(scores.flatten(0, 1), caps.flatten()).backward()
        optimizer.step()
    validate(val_loader, model, 2)
"""


def _captions(outside: str = "pass", inside: str = "references, hypotheses = [], []", read: str = "pass") -> str:
    return _CAPTIONS.replace("BIND_OUTSIDE", outside).replace("BIND_INSIDE", inside).replace("READ_IN_LOOP", read)


def test_lists_kept_per_sample_are_gathered_as_objects_after_the_loop() -> None:
    """sgrvinod's captioning ``validate()``: the forward returns ``decode_lengths``, a Python list
    (no gather after the forward can join it), and the loop keeps the references and hypotheses
    per image. The loop runs over each process's real samples and the two lists are gathered after
    it, joined in process order (references[i] stays hypotheses[i]'s pair); before, ACC946."""
    converted, lines = convert(_captions())
    loop = "for i, (feats, caps, caplens) in enumerate(accelerator.without_padding(loader)):"
    assert loop in lines, converted
    gathers = [
        "references = accelerator.gather_object(references)",
        "hypotheses = accelerator.gather_object(hypotheses)",
    ]
    at = lines.index(gathers[0])
    assert lines[at : at + 2] == gathers and lines[at + 2].startswith("accelerator.print(corpus_score"), converted
    assert "#ACC946" not in lines and "#ACC113" in lines
    assert convert_text(converted)[0] == converted  # converted again: the same


@pytest.mark.parametrize(
    "where",
    [
        pytest.param({"read": "print(len(hypotheses))"}, id="read-in-the-loop"),
        pytest.param({"outside": "references, hypotheses = [], []", "inside": "pass"}, id="kept-across-epochs"),
        pytest.param({"read": "references.append(i)"}, id="grown-with-the-batch-index"),
        pytest.param({"read": "break"}, id="stops-early"),
    ],
)
def test_lists_that_cannot_be_followed_keep_the_report(where: dict[str, str]) -> None:
    """Lists read while the loop runs (each process's share so far), bound once for several
    evaluations (gathered after each, they would grow by every process's lists again), grown with
    the batch index (each process counts its own batches), or a loop that stops early: nothing is
    gathered, and the Python value is reported as before."""
    converted, lines = convert(_captions(**where))
    assert "#ACC946" in lines and "gather_object" not in converted and "without_padding" not in converted


def test_lists_on_the_accelerate_target_are_reported_with_why() -> None:
    """Accelerate has no way to drop the padded repeats of the last round from Python lists: the
    loop is left as written and the report says what the runtime would gather."""
    outcome = convert_module(cst.parse_module(HEADER + textwrap.dedent(_captions())), Options(target="accelerate"))
    assert "gather_object" not in outcome.module.code and "without_padding" not in outcome.module.code
    reported = [c.message for c in outcome.changes if c.code == "ACC946"]
    assert len(reported) == 1 and "references, hypotheses could be gathered after the loop" in reported[0]


def test_a_loop_growing_a_list_held_elsewhere_keeps_the_report() -> None:
    """``self.history.append(...)`` beside the kept lists: a list the rule cannot follow, so
    nothing is gathered after the loop."""
    converted, lines = convert(_captions(read="model.history.append(preds)"))
    assert "#ACC946" in lines and "gather_object" not in converted
