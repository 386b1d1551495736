"""dataparallel (ACC110): nn.DataParallel goes, model.module is unwrapped."""

from __future__ import annotations

import pytest

from accel_convert.codemods.rewrites.dataparallel import DataParallelCodemod
from tests.codemods.support import assert_rewrites

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
