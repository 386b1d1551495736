"""A model the script's functions train as a module global (meliketoy's wide-resnet layout: the
loaders and ``net`` built at the top level, ``train(epoch)`` building its optimizer each epoch from
``net.parameters()``). The home is the module: the accelerator is created there, the model and
loaders are prepared there, and the function prepares the optimizer it builds. Before, the
accelerator was created inside ``train(epoch)`` (once per epoch), the model and loaders were never
prepared, and every process trained on all of the data, unsynchronised."""

from __future__ import annotations

import textwrap

from tests.codemods.support import converted_stably

HEADER = """\
import sys
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

x = torch.randn(64, 4)
y = (x.sum(1) > 0).long()
trainloader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
testloader = DataLoader(TensorDataset(x, y), batch_size=8)
"""

TRAIN_PER_EPOCH = """\


def train(epoch):
    net.train()
    optimizer = optim.SGD(net.parameters(), lr=0.1 / (epoch + 1))
    for inputs, targets in trainloader:
        inputs, targets = inputs.cuda(), targets.cuda()
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(inputs), targets).backward()
        optimizer.step()


for epoch in range(2):
    train(epoch)
"""

TEST_ONLY = """\
if len(sys.argv) > 2:
    net = torch.load("net.pt", weights_only=False).cuda()
    net.eval()
    correct = 0
    with torch.no_grad():
        for inputs, targets in testloader:
            correct += net(inputs.cuda()).argmax(1).eq(targets.cuda()).sum().item()
    print(correct)
    sys.exit(0)
"""

BOUND_EITHER_WAY = """\
if len(sys.argv) > 1:
    net = torch.load("net.pt", weights_only=False)
else:
    net = nn.Linear(4, 2)
net = net.cuda()
"""


def test_the_module_creates_the_accelerator_and_the_function_prepares_its_optimizer() -> None:
    text, codes = converted_stably(HEADER + "net = nn.Linear(4, 2).cuda()\n" + TRAIN_PER_EPOCH)
    lines = text.splitlines()
    assert "accelerator = Accelerator()" in lines
    assert "net, trainloader, testloader = accelerator.prepare(net, trainloader, testloader)" in lines
    assert "    optimizer = accelerator.prepare(optimizer)" in lines
    assert "    accelerator = Accelerator()" not in lines
    assert "ACC926" not in codes


def test_a_model_bound_again_after_a_prepared_test_branch_is_prepared_again() -> None:
    # The test-only branch prepares the model it loads; the model trained after it is bound
    # anew on both paths of an ``if``, and trained by ``train(epoch)`` reading it as a global.
    text, codes = converted_stably(HEADER + TEST_ONLY + BOUND_EITHER_WAY + TRAIN_PER_EPOCH)
    lines = text.splitlines()
    assert "    net = accelerator.prepare(net)" in lines  # the test-only branch's
    prepared = lines.index("net = accelerator.prepare(net)")  # the trained one's
    assert prepared > lines.index("else:")
    assert prepared < lines.index("def train(epoch):")
    assert "ACC926" not in codes


def test_with_the_optimizer_at_module_level_the_model_is_prepared_with_it() -> None:
    source = HEADER + TEST_ONLY + BOUND_EITHER_WAY + "optimizer = optim.SGD(net.parameters(), lr=0.1)\n"
    source += TRAIN_PER_EPOCH.replace("    optimizer = optim.SGD(net.parameters(), lr=0.1 / (epoch + 1))\n", "")
    text, codes = converted_stably(source)
    assert "net, optimizer = accelerator.prepare(net, optimizer)" in text.splitlines()
    assert "ACC926" not in codes


def test_a_function_building_its_own_model_stays_the_home() -> None:
    # ``train()`` binds the model it trains: nothing of the module's is trained there.
    source = HEADER + textwrap.dedent(
        """\


        def train(epoch):
            net = nn.Linear(4, 2).cuda()
            optimizer = optim.SGD(net.parameters(), lr=0.1)
            for inputs, targets in trainloader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(net(inputs.cuda()), targets.cuda()).backward()
                optimizer.step()


        train(0)
        """
    )
    text, _ = converted_stably(source)
    assert "    accelerator = Accelerator()" in text.splitlines()


def test_a_model_thrown_away_by_an_unpacking_is_not_reported() -> None:
    # ``_, name = get_network()`` keeps the name only: ``_`` is no model left unprepared.
    source = (
        HEADER
        + textwrap.dedent(
            """\


        def get_network():
            return nn.Linear(4, 2), "linear"


        _, file_name = get_network()
        net, file_name = get_network()
        net = net.cuda()
        """
        )
        + TRAIN_PER_EPOCH
    )
    _, codes = converted_stably(source)
    assert "ACC926" not in codes


def test_a_trainer_moving_the_model_it_built_prepares_it() -> None:
    # ``self.net = self.net.to(device)`` moves what ``__init__`` built: still built there.
    source = textwrap.dedent(
        """\
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class Trainer:
            def __init__(self, resume):
                self.device = torch.device("cuda")
                self.loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 2)), batch_size=8)
                if resume:
                    self.net = torch.load("net.pt", weights_only=False)
                else:
                    self.net = nn.Linear(4, 2)
                self.net = self.net.to(self.device)

            def train_epoch(self, epoch):
                optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1 / (epoch + 1))
                for x, y in self.loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(self.net(x.to(self.device)), y.to(self.device)).backward()
                    optimizer.step()


        if __name__ == "__main__":
            trainer = Trainer(False)
            for epoch in range(2):
                trainer.train_epoch(epoch)
        """
    )
    text, codes = converted_stably(source)
    assert "self.net, self.loader = self.accelerator.prepare(self.net, self.loader)" in text
    assert "ACC926" not in codes


def test_a_trainer_moving_the_model_it_received_leaves_it_to_the_caller() -> None:
    source = textwrap.dedent(
        """\
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class Trainer:
            def __init__(self, net, loader):
                self.net = net
                self.net = self.net.to("cuda")
                self.loader = loader

            def fit(self):
                optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
                for x, y in self.loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(self.net(x.cuda()), y.cuda()).backward()
                    optimizer.step()


        if __name__ == "__main__":
            net = nn.Linear(4, 2)
            loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 2)), batch_size=8)
            Trainer(net, loader).fit()
        """
    )
    text, _ = converted_stably(source)
    assert "self.accelerator.prepare(self.net" not in text
    assert "accelerator.prepare(net, loader)" in text or "net, loader = accelerator.prepare(net, loader)" in text


def test_a_whole_model_saved_under_a_choice_is_unwrapped_on_both_sides() -> None:
    source = HEADER + "use_cuda = torch.cuda.is_available()\nnet = nn.Linear(4, 2)\n"
    source += "if use_cuda:\n    net.cuda()\n    net = torch.nn.DataParallel(net)\n" + TRAIN_PER_EPOCH
    source += 'torch.save(net.module if use_cuda else net, "net.pt")\n'
    text, _ = converted_stably(source)
    saved = "accelerator.unwrap_model(net) if use_cuda else accelerator.unwrap_model(net),"
    assert saved in " ".join(text.split())
