"""batch-to-numpy (ACC118): batch tensors read with ``.numpy()`` are copied to the CPU first,
since a prepared loader puts every batch tensor on the accelerator's device."""

from __future__ import annotations

import pytest

from tests.codemods.support import convert

LOOP = """\
def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=2)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    arr = torch.zeros(3)
    for batch in loader:
        inputs, labels = batch[0], batch[1]
        logits = model(inputs)
        nn.functional.cross_entropy(logits, labels).backward()
        optimizer.step()
        {read}
"""


@pytest.mark.parametrize(
    ("read", "converted"),
    [
        ("y = labels.numpy()", "y = labels.cpu().numpy()"),
        ("y = labels.data.numpy()", "y = labels.data.cpu().numpy()"),
        ("y = labels.detach().numpy()", "y = labels.detach().cpu().numpy()"),
        ("y = batch[1].numpy()", "y = batch[1].cpu().numpy()"),
    ],
    ids=["name", "data-attribute", "detached", "subscript-of-the-batch"],
)
def test_a_batch_tensor_read_as_numpy_is_copied_to_the_cpu(read: str, converted: str) -> None:
    code, lines = convert(LOOP.replace("{read}", read))
    assert converted in lines, code
    assert "#ACC118" in lines


@pytest.mark.parametrize(
    "read",
    [
        "y = labels.cpu().numpy()",
        "y = labels.detach().cpu().numpy()",
        "y = labels.to('cpu').numpy()",
        "y = arr.numpy()",
        "y = logits.detach().numpy()",
        "y = torch.softmax(labels, 0).numpy()",
    ],
    ids=["already-on-the-cpu", "detached-on-the-cpu", "moved", "not-a-batch", "a-model-output", "a-function-result"],
)
def test_other_numpy_reads_are_left_alone(read: str) -> None:
    code, lines = convert(LOOP.replace("{read}", read))
    assert read in lines, code
    assert "#ACC118" not in lines


COLLECTED = """\
import numpy as np


def predict(model, loader):
    probs, labels = [], []
    with torch.no_grad():
        for inputs, targets in loader:
            probs.append(torch.sigmoid(model(inputs)).cpu())
            labels.append({append})
    return {joined}


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for inputs, targets in loader:
        nn.functional.mse_loss(model(inputs), targets.float()).backward()
        optimizer.step()
    predict(model, loader)
"""


@pytest.mark.parametrize(
    "joined",
    ["torch.cat(labels).numpy()", "np.concatenate(labels)", "np.array(labels)", "torch.stack(labels, 0).numpy()"],
    ids=["torch-cat-numpy", "np-concatenate", "np-array", "torch-stack-numpy"],
)
def test_batch_tensors_collected_into_an_array_are_copied_to_the_cpu(joined: str) -> None:
    code, lines = convert(COLLECTED.replace("{append}", "targets").replace("{joined}", joined))
    assert "labels.append(targets.cpu())" in lines, code
    assert "#ACC118" in lines


@pytest.mark.parametrize(
    ("append", "joined"),
    [
        ("targets", "torch.cat(labels)"),  # stays a tensor: wherever the original put it
        ("targets.cpu()", "np.concatenate(labels)"),  # already copied
        ("targets", "[t.tolist() for t in labels]"),  # .tolist() reads device tensors too
    ],
    ids=["kept-a-tensor", "already-on-the-cpu", "read-as-lists"],
)
def test_collected_batch_tensors_not_made_arrays_are_left_alone(append: str, joined: str) -> None:
    code, lines = convert(COLLECTED.replace("{append}", append).replace("{joined}", joined))
    assert f"labels.append({append})" in lines, code
    assert "#ACC118" not in lines


@pytest.mark.parametrize(
    ("read", "converted"),
    [
        ("y = (predicted == labels).sum()", "y = (predicted == labels.cpu()).sum()"),
        ("y = (labels != predicted.view(-1)).sum()", "y = (labels.cpu() != predicted.view(-1)).sum()"),
        ("y = (logits.argmax(1).cpu() == labels).sum()", "y = (logits.argmax(1).cpu() == labels.cpu()).sum()"),
        ("y = predicted - batch[1]", "y = predicted - batch[1].cpu()"),
    ],
    ids=["name-bound-to-a-cpu-copy", "compared-on-the-left", "a-cpu-call", "binary-operation-with-a-subscript"],
)
def test_a_batch_tensor_meeting_a_cpu_copy_is_copied_to_the_cpu(read: str, converted: str) -> None:
    body = LOOP.replace("{read}", "_, predicted = torch.max(logits.cpu(), 1)\n        " + read)
    code, lines = convert(body)
    assert converted in lines, code
    assert "#ACC118" in lines


@pytest.mark.parametrize(
    "read",
    [
        "y = (predicted == labels.cpu()).sum()",  # already copied
        "y = (logits.argmax(1) == labels).sum()",  # both on the device
        "y = (predicted == labels.float()).sum()",  # a call's result: left to the call
    ],
    ids=["already-copied", "no-cpu-copy", "a-call-on-the-batch"],
)
def test_other_comparisons_with_batch_tensors_are_left_alone(read: str) -> None:
    body = LOOP.replace("{read}", "_, predicted = torch.max(logits.cpu(), 1)\n        " + read)
    code, lines = convert(body)
    assert read in lines, code
    assert "#ACC118" not in lines


@pytest.mark.parametrize(
    ("read", "converted"),
    [
        ("y = accuracy_score(labels, preds)", "y = accuracy_score(labels.cpu(), preds)"),
        ("y = np.bincount(labels, minlength=2)", "y = np.bincount(labels.cpu(), minlength=2)"),
        ("y = np.array(batch[1])", "y = np.array(batch[1].cpu())"),
    ],
    ids=["scikit-learn", "numpy", "numpy-of-a-subscript"],
)
def test_a_batch_tensor_handed_to_a_host_library_is_copied_to_the_cpu(read: str, converted: str) -> None:
    imports = "import numpy as np\nfrom sklearn.metrics import accuracy_score\n\n\n"
    body = imports + LOOP.replace("{read}", "preds = logits.argmax(1).cpu()\n        " + read)
    code, lines = convert(body)
    assert converted in lines, code
    assert "#ACC118" in lines


def test_torch_functions_given_batch_tensors_are_left_alone() -> None:
    body = LOOP.replace("{read}", "y = torch.bincount(labels, minlength=2)")
    code, lines = convert(body)
    assert "y = torch.bincount(labels, minlength=2)" in lines, code
    assert "#ACC118" not in lines


@pytest.mark.parametrize(
    "read",
    [
        "n = labels.shape[0]\n        y = np.random.randint(0, 8, n)",
        "b, = labels.shape\n        y = np.random.randint(0, 8, b)",
        "y = np.random.randint(0, 8, labels.shape[0])",
        "y = np.zeros(labels.shape)",
        "n = labels.size(0)\n        y = np.random.randint(0, 8, n)",
        "n = len(labels)\n        y = np.arange(n)",
        "x, n = batch[0], batch[0].shape[0]\n        y = np.random.randint(0, 8, n)",
    ],
    ids=["shape-index", "shape-unpacked", "shape-inline", "whole-shape", "size", "len", "paired-in-a-tuple"],
)
def test_sizes_of_batch_tensors_are_host_numbers_and_left_alone(read: str) -> None:
    # ``batch_size = imgs.shape[0]`` is a Python int: ``.cpu()`` on it raises AttributeError.
    body = "import numpy as np\n\n\n" + LOOP.replace("{read}", read)
    code, lines = convert(body)
    assert ".cpu()" not in code, code
    assert "#ACC118" not in lines
