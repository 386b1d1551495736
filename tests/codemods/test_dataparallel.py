"""dataparallel (ACC110): nn.DataParallel goes, model.module is unwrapped."""

from __future__ import annotations

import pytest

from accel_convert.codemods.rewrites.dataparallel import DataParallelCodemod
from tests.codemods.support import apply, assert_rewrites

DATAPARALLEL_CASES = [
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            model = Net()
            if torch.cuda.device_count() > 1:
                model = nn.DataParallel(model)
            optimizer = make_optimizer(model)
        """,
        """
        def main():
            accelerator = Accelerator()
            model = Net()
            optimizer = make_optimizer(model)
        """,
        id="guarded-wrap-goes-with-its-if",
    ),
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            model = torch.nn.DataParallel(Net(), device_ids=[0, 1]).cuda()
            torch.save(model.module.state_dict(), "m.pt")
            n = model.module.fc.out_features
        """,
        """
        def main():
            accelerator = Accelerator()
            model = Net().cuda()
            torch.save(accelerator.unwrap_model(model).state_dict(), "m.pt")
            n = accelerator.unwrap_model(model).fc.out_features
        """,
        id="inline-wrap-and-module-attribute",
    ),
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            net = model.module if isinstance(model, nn.DataParallel) else model
            print(net.classifier.out_features)
        """,
        """
        def main():
            accelerator = Accelerator()
            net = accelerator.unwrap_model(model)
            print(net.classifier.out_features)
        """,
        id="isinstance-unwrap-idiom",
    ),
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            if args.multi_gpu:
                print("DataParallel on", torch.cuda.device_count(), "GPUs")
                model = nn.DataParallel(model).to(device)
            else:
                model = nn.DataParallel(model)
        """,
        """
        def main():
            accelerator = Accelerator()
            if args.multi_gpu:
                print("DataParallel on", torch.cuda.device_count(), "GPUs")
        """,
        id="else-branch-emptied",
    ),
]


@pytest.mark.parametrize("before, after", DATAPARALLEL_CASES)
def test_dataparallel(before: str, after: str) -> None:
    changes = assert_rewrites(DataParallelCodemod(), before, after)
    assert changes and all(c.code == "ACC110" for c in changes)


def test_a_block_that_keeps_statements_is_never_taken_for_an_emptied_one() -> None:
    # Each emptied ``if`` goes, and its emptied block is freed with it; the next ``if``'s block,
    # rebuilt without its DataParallel line, is then often allocated where that block was. A pass
    # that remembered emptied blocks by their address alone removed that ``if`` and its print.
    wrapped_twice = "".join(
        f"if use_dp:\n    model = nn.DataParallel(model)\nif use_dp:\n    model = nn.DataParallel(model)\n"
        f"    print('kept {index}')\n"
        for index in range(40)
    )
    source = f"import torch.nn as nn\n\nmodel = nn.Linear(4, 2)\nuse_dp = True\n{wrapped_twice}"
    output, _ = apply(DataParallelCodemod(), source, preamble="")
    assert len([line for line in output.splitlines() if "print('kept" in line]) == 40
    assert "DataParallel(" not in output
