"""checkpoint (ACC114), dataparallel (ACC110) and side_effects (ACC116): what touches the model's
wrapper and the file system."""

from __future__ import annotations

import libcst as cst
import pytest

from codemods import Options, convert_module
from codemods.rules.checkpoint import CheckpointCodemod
from codemods.rules.dataparallel import DataParallelCodemod
from codemods.rules.side_effects import SideEffectsCodemod
from tests.codemods.support import apply, assert_rewrites, code, make_facts

CHECKPOINT_CASES = [
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            model, optimizer = accelerator.prepare(model, optimizer)
            if args.save_model:
                torch.save(model.state_dict(), "mnist_cnn.pt")
        """,
        """
        def main():
            accelerator = Accelerator()
            model, optimizer = accelerator.prepare(model, optimizer)
            if args.save_model:
                accelerator.wait_for_everyone()
                accelerator.save(accelerator.unwrap_model(model).state_dict(), "mnist_cnn.pt")
        """,
        id="state-dict",
    ),
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            model = accelerator.prepare(model)
            # the whole model
            torch.save(model, "model.pt")
        """,
        """
        def main():
            accelerator = Accelerator()
            model = accelerator.prepare(model)
            # the whole model
            accelerator.wait_for_everyone()
            accelerator.save(accelerator.unwrap_model(model), "model.pt")
        """,
        id="pickled-model-keeps-comment-above",
    ),
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            model.load_state_dict(torch.load("init.pt"))
            model, optimizer = accelerator.prepare(model, optimizer)
            best_state = copy.deepcopy(model.state_dict())
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}, path)
            model.load_state_dict(best_state)
        """,
        """
        def main():
            accelerator = Accelerator()
            accelerator.wait_for_everyone()
            model.load_state_dict(torch.load("init.pt"))
            model, optimizer = accelerator.prepare(model, optimizer)
            best_state = copy.deepcopy(accelerator.unwrap_model(model).state_dict())
            accelerator.wait_for_everyone()
            accelerator.save({"model": accelerator.unwrap_model(model).state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}, path)
            accelerator.unwrap_model(model).load_state_dict(best_state)
        """,
        id="checkpoint-dict-deepcopy-load-after-prepare-unwrapped-loads-wait",
    ),
    pytest.param(
        """
        def generate(model, accelerator):
            model.eval()
            hidden = model.init_hidden(1)
            model.rnn.flatten_parameters()
            sample = model.decode(z).cpu()
            model.fc = None
            return sample, model.parameters()
        """,
        """
        def generate(model, accelerator):
            model.eval()
            hidden = accelerator.unwrap_model(model).init_hidden(1)
            accelerator.unwrap_model(model).rnn.flatten_parameters()
            sample = accelerator.unwrap_model(model).decode(z).cpu()
            model.fc = None
            return sample, model.parameters()
        """,
        id="custom-methods-not-module-methods",
    ),
]


@pytest.mark.parametrize("before, after", CHECKPOINT_CASES)
def test_checkpoint(before: str, after: str) -> None:
    changes = assert_rewrites(CheckpointCodemod(), before, after, make_facts())
    assert changes and all(c.code == "ACC114" and c.fixed for c in changes)


def test_checkpoint_reports_saves_without_the_accelerator() -> None:
    source = code(
        """
        def save_checkpoint(state, filename):
            torch.save(state, filename)
        """
    )
    output, changes = apply(CheckpointCodemod(), source, make_facts())
    assert output == source
    assert [(c.code, c.line, c.fixed) for c in changes] == [("ACC914", 2, False)]


def test_checkpoint_uses_accessible_functions_from_the_analysis() -> None:
    """A function the training code calls gets the accelerator from the helpers pass."""
    source = code(
        """
        def sample(z):
            return model.decode(z)
        """
    )
    facts = make_facts(accessible_functions={"sample"})
    output, _ = apply(CheckpointCodemod(), source, facts)
    assert "return accelerator.unwrap_model(model).decode(z)" in output


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
    changes = assert_rewrites(DataParallelCodemod(), before, after, make_facts())
    assert changes and all(c.code == "ACC110" for c in changes)


def test_existing_ddp_is_reported_and_untouched() -> None:
    source = code(
        """
        import torch.multiprocessing as mp
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        def worker(rank, world_size):
            model = DDP(Net().to(rank), device_ids=[rank])
            model = nn.DataParallel(model)

        mp.spawn(worker, args=(2,), nprocs=2)
        """
    )
    outcome = convert_module(cst.parse_module(source), Options())
    assert outcome.module.code == source
    assert [(c.code, c.line, c.fixed) for c in outcome.changes] == [("ACC903", 6, False), ("ACC903", 9, False)]
    assert all(c.message.endswith("nothing converted") for c in outcome.changes)


def test_a_distributed_sampler_is_reported_and_the_rest_converted() -> None:
    source = code(
        """
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        def main():
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(data, sampler=DistributedSampler(data))
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
        """
    )
    outcome = convert_module(cst.parse_module(source), Options())
    reported = [(c.code, c.line, c.message) for c in outcome.changes if not c.fixed]
    assert reported == [("ACC903", 7, "DistributedSampler already distributes this script: left as it is, the rest converted")]
    assert "accelerator.backward(loss)" in outcome.module.code
    assert "DistributedSampler(data)" in outcome.module.code


SIDE_EFFECT_CASES = [
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            # outputs go here
            os.makedirs(args.out_dir, exist_ok=True)
            for epoch in range(3):
                save_image(sample, f"{args.out_dir}/sample_{epoch}.png")
                plt.savefig("loss.png")
        """,
        """
        def main():
            accelerator = Accelerator()
            # outputs go here
            if accelerator.is_main_process:
                os.makedirs(args.out_dir, exist_ok=True)
            accelerator.wait_for_everyone()
            for epoch in range(3):
                if accelerator.is_main_process:
                    save_image(sample, f"{args.out_dir}/sample_{epoch}.png")
                    plt.savefig("loss.png")
        """,
        id="folder-then-images",
    ),
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            with open("results.json", "w") as f:
                json.dump(results, f)
            with open("vocab.txt") as f:
                words = f.read().split()
            json.dump(history, open("history.json", mode="a"))
            os.remove("tmp.pt")
        """,
        """
        def main():
            accelerator = Accelerator()
            if accelerator.is_main_process:
                with open("results.json", "w") as f:
                    json.dump(results, f)
            with open("vocab.txt") as f:
                words = f.read().split()
            if accelerator.is_main_process:
                json.dump(history, open("history.json", mode="a"))
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                os.remove("tmp.pt")
        """,
        id="writes-guarded-reads-not-delete-waits",
    ),
    pytest.param(
        """
        import os
        args = parser.parse_args()
        os.makedirs("early", exist_ok=True)
        accelerator = Accelerator()
        shutil.rmtree("old_run")
        """,
        """
        import os
        args = parser.parse_args()
        os.makedirs("early", exist_ok=True)
        accelerator = Accelerator()
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            shutil.rmtree("old_run")
        """,
        id="module-level-only-after-the-accelerator-delete-waits",
    ),
]


@pytest.mark.parametrize("before, after", SIDE_EFFECT_CASES)
def test_side_effects(before: str, after: str) -> None:
    changes = assert_rewrites(SideEffectsCodemod(), before, after, make_facts())
    assert changes and all(c.code == "ACC116" for c in changes)


def test_side_effects_without_the_accelerator_are_reported() -> None:
    source = code(
        """
        def plot(losses, path):
            plt.plot(losses)
            plt.savefig(path)
        """
    )
    output, changes = apply(SideEffectsCodemod(), source, make_facts())
    assert output == source
    assert [(c.code, c.line, c.fixed) for c in changes] == [("ACC916", 3, False)]
