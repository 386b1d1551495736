"""ACC114 checkpoint: save once, from the unwrapped model; load and call custom methods through it.

After ``prepare`` the model is wrapped (DistributedDataParallel), so its ``state_dict()`` keys carry
a ``module.`` prefix, ``torch.save(model, f)`` pickles the wrapper, every rank writes the same file,
and custom methods (``model.decode(z)``, ``model.init_hidden(bs)``) are not on the wrapper at all.
This pass routes ``torch.save`` through ``accelerator.save`` (writes on the main process only) after a
barrier, and takes state dicts, ``load_state_dict`` and custom attributes from
``accelerator.unwrap_model(model)``. nn.Module's own methods (``train``, ``eval``, ``parameters``,
``zero_grad``, ``to``...) work on the wrapper and are left alone; ``module`` is not one of them: on
the wrapper it is the model itself, so a layer the model's class keeps as ``self.module`` (a
residual block around it) is read from the unwrapped model too. A checkpoint that keeps the whole
model in a dict (``state = {'epoch': epoch, 'model': model}`` ... ``torch.save(state, filename)``,
as SSD and the CIFAR trainers save it) keeps the unwrapped one: pickled with its wrapper, the model
would load only where a process group runs, not in the inference script. A prepared optimizer or
scheduler saved whole (``torch.save(optimizer, path)``, or as a value of a saved dict) is saved as the
object it wraps (``optimizer.optimizer``, ``scheduler.scheduler``; Accelerate's wrappers name it the
same): pickled with its wrapper it would load only with the converter installed, and the file's
bytes would differ from the original's. Their ``state_dict()`` saves stay as written. In a script that saves, every
``torch.load`` line waits for the other ranks first, so no rank reads a file still being written.
Where no barrier can go before a load (``if os.path.isfile(path): model.load_state_dict(torch.load(path))``
in a ``test()`` run after training, a load in a ``try``, a function without the accelerator), the
ranks wait after each save such a load may read later instead (once, after the last of saves in a
row), with the accelerator of the saving function: otherwise the other ranks look for the file
before the main process wrote it (and test another model, or fail). Which loads may read what a
save wrote is the program model's :mod:`~codemods.model.file_flow`: further down the function, in
a function it calls later, or after the call of the saving function in any of its callers
(MorvanZhou's ``save()`` then ``restore_net()`` at the top level), and across the modules of a
program: a call of another module's function that saves to the path it is given
(``save_checkpoint(model, "model.pt")``) is a save there, and so is a read for a call of one that
loads it where no barrier can go before the load (``test_saved("net.pt", loader)`` loading under
``if os.path.isfile(path):``); the ranks wait after that call, or after the save. A load of a path
no save can have written (another literal, another f-string pattern) leaves the save without a barrier. Loading in the function that calls
``prepare`` is only rewritten after the ``prepare`` line: before it the model is not wrapped yet.
A copy of the model made after ``prepare`` (``ema = copy.deepcopy(model)``, ``AveragedModel(model)``)
copies the unwrapped model, so the copy and its checkpoints keep the original's keys. A model
traced after ``prepare`` (``torch.onnx.export``, ``torch.jit.trace``, TensorBoard's
``writer.add_graph(model, images)``) is traced unwrapped: the tracer cannot follow DDP's
process-group calls.

A custom method that computes the loss by running the model (``loss = model.compute_loss(batch)``,
calling ``self(x)`` inside) must not go through ``unwrap_model`` in training: DDP averages
gradients only for what runs inside its forward, so the ranks' copies would drift apart without an
error. With the runtime it becomes ``accelerator.as_forward(model).compute_loss(batch)`` (the method
runs as the wrapper's forward); Accelerate has no such call, so with ``--target accelerate`` it is
reported (ACC921). So are the parts of a model that its ``forward`` runs when training calls them
one by one (simple-faster-rcnn-pytorch's trainer runs ``self.faster_rcnn.extractor(imgs)``, then
``.rpn`` and ``.head`` on the features, never the model itself): each becomes
``accelerator.as_forward(model).extractor(imgs)``, in a loop that runs the backward or in a
training step (a method or function running it, and the methods it calls on its instance).

A ``torch.save`` or a model's own saving method where the accelerator is not reachable is left
as written and reported (ACC914): every rank runs it, and each writes the file.

A prepared model that the function creating the accelerator returns to code that saves it (``model
= main()`` then ``torch.save(model.state_dict(), path)`` in the ``__main__`` block, which has no
accelerator) is returned as ``accelerator.unwrap_model(model)``, and that save runs on the main
process (``PartialState().is_main_process``) with every rank waiting for it
(:mod:`.returned_model`). A caller that trains the returned model further keeps the wrapper, and its
save stays reported (ACC914).
"""

from collections.abc import Callable

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import callee_words, name_words
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.torch_names import MODEL_EXPORTS
from accel_convert.codemods.engine.walk import walk
from accel_convert.codemods.model.file_flow import file_flow
from accel_convert.codemods.model.locality import locality
from accel_convert.codemods.rewrites.checkpoint.codes import CHECKPOINT
from accel_convert.codemods.rewrites.checkpoint.copies_exports import model_copiers
from accel_convert.codemods.rewrites.checkpoint.helper_classes import SavesInHelperClasses, classes_given_models
from accel_convert.codemods.rewrites.checkpoint.loads import WaitBeforeLoads
from accel_convert.codemods.rewrites.checkpoint.rewriter import CheckpointRewriter
from accel_convert.codemods.rewrites.checkpoint.saves import SavedValues, WaitAfterSaves
from accel_convert.codemods.rewrites.checkpoint.unwrap import MODULE_OWN_ATTRIBUTES, training_method_calls
from accel_convert.codemods.rewrites.returned_model import handled_lines, returned_model, unwrapped_returns

# This module is the rule: its docstring, codes, examples and the order of its passes. Each part
# lives in a module of its own, whose docstring says what it owns:
#   saves.py           torch.save → accelerator.save after a barrier; waits after saves read later
#   loads.py           waits before loads; map_location to this process's device
#   unwrap.py          custom attributes and methods read through accelerator.unwrap_model
#   copies_exports.py  copies, traces (ONNX, jit, add_graph) and type() of the unwrapped model
#   helper_classes.py  saves in other classes no accelerator reaches (reported)
#   rewriter.py        the walk that sends each call and attribute to one of the above
#   codes.py           the rule's own code, shared by those modules


class CheckpointCodemod(Rule):
    code = CHECKPOINT
    name = "checkpoint"
    fixes = {
        "ACC914": (
            "Save from where the accelerator is reachable, on the main process only: pass ``accelerator`` to the function, then write ``accelerator.wait_for_everyone()`` and ``accelerator.save(accelerator.unwrap_model(model).state_dict(), path)`` (or guard the ``torch.save`` with ``if accelerator.is_main_process:``)."
        ),
        "ACC921": (
            "Compute the loss from the model's forward: call ``model(...)`` (move the loss computation into ``forward`` or compute it from ``model(x)``'s output), so DDP averages the gradients; or convert with ``--target runtime``, whose wrapper averages them for any method."
        ),
    }
    providers = (model_copiers, training_method_calls, file_flow, locality)
    extra_codes = {
        "ACC914": "checkpoint-unreachable: torch.save or a model's own method where the accelerator is not reachable: runs on every rank",
        "ACC921": (
            "method-outside-forward: a model method that runs the model computes the training loss; "
            "under Accelerate's DDP its gradients are not averaged (call the model, or use the runtime)"
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class AutoEncoder(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.encoder = nn.Linear(8, 2)
                        self.decoder = nn.Linear(2, 8)

                    def decode(self, z):
                        return self.decoder(z)

                    def forward(self, x):
                        return self.decode(self.encoder(x))


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8)
                    model = AutoEncoder()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for (data,) in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), data)
                        loss.backward()
                        optimizer.step()
                    torch.save(model.state_dict(), "autoencoder.pt")
                    sample = model.decode(torch.randn(4, 2))


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class AutoEncoder(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.encoder = nn.Linear(8, 2)
                        self.decoder = nn.Linear(2, 8)

                    def decode(self, z):
                        return self.decoder(z)

                    def forward(self, x):
                        return self.decode(self.encoder(x))


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8)
                    model = AutoEncoder()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for (data,) in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), data)
                        accelerator.backward(loss)
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), "autoencoder.pt")
                    sample = accelerator.unwrap_model(model).decode(torch.randn(4, 2))


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import os

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def test(path):
                    model = nn.Linear(8, 1)
                    if os.path.isfile(path):
                        model.load_state_dict(torch.load(path))
                    return model


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    torch.save(model.state_dict(), "model.pt")
                    test("model.pt")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import os

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def test(path, accelerator):
                    model = nn.Linear(8, 1)
                    if os.path.isfile(path):
                        accelerator.unwrap_model(model).load_state_dict(torch.load(path, map_location={"cuda:0": str(accelerator.device)}))
                    return model


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pt")
                    accelerator.wait_for_everyone()
                    test("model.pt", accelerator)


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            # MorvanZhou's save() then restore() at the top level: restore() reads the file save()
            # wrote, on every rank, with no accelerator to wait with; the ranks wait after the save.
            before="""
                import torch
                import torch.nn as nn

                x = torch.linspace(-1, 1, 100).unsqueeze(1)
                y = x.pow(2)


                def save():
                    net = nn.Linear(1, 1)
                    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
                    for step in range(100):
                        optimizer.zero_grad()
                        nn.functional.mse_loss(net(x), y).backward()
                        optimizer.step()
                    torch.save(net.state_dict(), "net_params.pkl")


                def restore():
                    copy = nn.Linear(1, 1)
                    copy.load_state_dict(torch.load("net_params.pkl"))
                    return copy


                save()
                restored = restore()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator

                x = torch.linspace(-1, 1, 100).unsqueeze(1)
                y = x.pow(2)


                def save():
                    accelerator = Accelerator()
                    net = nn.Linear(1, 1)
                    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
                    net, optimizer = accelerator.prepare(net, optimizer)
                    for step in range(100):
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(net(x), y))
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(net).state_dict(), "net_params.pkl")
                    accelerator.wait_for_everyone()


                def restore():
                    copy = nn.Linear(1, 1)
                    copy.load_state_dict(torch.load("net_params.pkl"))
                    return copy


                save()
                restored = restore()
            """,
        ),
        Example(
            # The same, reading another file (a path no save writes): no barrier after the save.
            before="""
                import torch
                import torch.nn as nn

                x = torch.linspace(-1, 1, 100).unsqueeze(1)
                y = x.pow(2)


                def save():
                    net = nn.Linear(1, 1)
                    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
                    for step in range(100):
                        optimizer.zero_grad()
                        nn.functional.mse_loss(net(x), y).backward()
                        optimizer.step()
                    torch.save(net.state_dict(), "net_params.pkl")


                def restore():
                    copy = nn.Linear(1, 1)
                    copy.load_state_dict(torch.load("pretrained.pkl"))
                    return copy


                save()
                restored = restore()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator

                x = torch.linspace(-1, 1, 100).unsqueeze(1)
                y = x.pow(2)


                def save():
                    accelerator = Accelerator()
                    net = nn.Linear(1, 1)
                    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
                    net, optimizer = accelerator.prepare(net, optimizer)
                    for step in range(100):
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(net(x), y))
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(net).state_dict(), "net_params.pkl")


                def restore():
                    copy = nn.Linear(1, 1)
                    copy.load_state_dict(torch.load("pretrained.pkl"))
                    return copy


                save()
                restored = restore()
            """,
        ),
        Example(
            # The whole model kept in the checkpoint dict, as SSD's save_checkpoint does.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for epoch in range(2):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        state = {"epoch": epoch, "model": model, "optimizer": optimizer}
                        torch.save(state, "checkpoint.pth.tar")


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
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for epoch in range(2):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                        state = {"epoch": epoch, "model": accelerator.unwrap_model(model), "optimizer": optimizer.optimizer}
                        accelerator.wait_for_everyone()
                        accelerator.save(state, "checkpoint.pth.tar")


                if __name__ == "__main__":
                    main()
            """,
        ),
        # The whole optimizer saved (not its state dict) is the one the prepared optimizer wraps:
        # pickled with the wrapper, the file would load only with accel-convert installed. Its
        # state_dict() save is left as written (the wrapper's is the wrapped optimizer's).
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    torch.save(optimizer.state_dict(), "optimizer_state.pt")
                    torch.save(optimizer, "optimizer.pt")


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
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(optimizer.state_dict(), "optimizer_state.pt")
                    accelerator.save(optimizer.optimizer, "optimizer.pt")


                if __name__ == "__main__":
                    main()
            """,
        ),
        # TensorBoard traces the model it is given: the wrapper's process-group calls cannot be traced.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset
                from torch.utils.tensorboard import SummaryWriter


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    writer = SummaryWriter("runs/exp")
                    writer.add_graph(model, torch.zeros(1, 8))
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset
                from torch.utils.tensorboard import SummaryWriter


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    writer = SummaryWriter("runs/exp") if accelerator.is_main_process else None
                    if accelerator.is_main_process:
                        writer.add_graph(accelerator.unwrap_model(model), torch.zeros(1, 8))
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            code="ACC914",
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def save_checkpoint(state, filename):
                    torch.save(state, filename)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    return model


                if __name__ == "__main__":
                    model = main()
                    save_checkpoint(model.state_dict(), "model.pt")
            """,
            message="torch.save where the accelerator is not reachable: every rank writes this file",
        ),
        Example(
            code="ACC921",
            target="accelerate",
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Regressor(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.net = nn.Linear(8, 1)

                    def forward(self, x):
                        return self.net(x)

                    def compute_loss(self, data, target):
                        return nn.functional.mse_loss(self(data), target)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = Regressor()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        model.compute_loss(data, target).backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            message=(
                "model.compute_loss runs the model outside forward(): DDP will not average its gradients; "
                "compute the loss from model(...) or convert with --target runtime"
            ),
        ),
        # nn.Module's own methods (train, eval, parameters) work on the DDP wrapper, and a script
        # that saves and loads nothing: no unwrap_model, no barrier.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    print("parameters:", sum(p.numel() for p in model.parameters()))
                    model.train()
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    model.eval()


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
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    accelerator.print("parameters:", sum(p.numel() for p in model.parameters()))
                    model.train()
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    model.eval()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def save_checkpoint(state, filename):
                    torch.save(state, filename)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    save_checkpoint(model.state_dict(), "model.pt")


                if __name__ == "__main__":
                    main()
            """,
            code="ACC914",
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
                        self.net = nn.Linear(8, 1)

                    def forward(self, x):
                        return self.net(x)

                    def compute_loss(self, output, target):
                        return nn.functional.mse_loss(output, target)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = Regressor()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        model.compute_loss(model(data), target).backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            code="ACC921",
            target="accelerate",
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.uses_torch and bool(facts.models or "torch" in facts.imports.values())

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        # Lines reading a model attribute nn.Module does not have (unwrapped), or saving/loading.
        words = (
            callee_words(facts, ("torch.save", "torch.load", *MODEL_EXPORTS))
            | name_words(facts.of(model_copiers))
            | ({"type"} if "type" in facts.called else set())
            | ({"add_graph"} if facts.trackers else set())
            | {
                path
                for path in facts.word_lines
                if path.rpartition(".")[0] in facts.models and path.rpartition(".")[2] not in MODULE_OWN_ATTRIBUTES
            }
        )
        saved = SavedValues(facts, facts.lines_mentioning(callee_words(facts, ("torch.save",))))
        walk(module, saved)
        words |= saved.found  # ``state = {'model': model, ...}``, saved further down
        rewriter = CheckpointRewriter(
            facts, module, facts.lines_mentioning(words), options.target == "runtime", saved.found
        )
        new_module, returned = _returned_model_saved_by_caller(module.visit(rewriter), facts, options)
        handed = classes_given_models(module, facts)
        reported: list[Change] = []
        # Every other class the rewriter does not enter (a callback saving ``trainer.model``):
        # its saves run on every rank of a distributed run too.
        helpers = {line.name.value for line in module.body if isinstance(line, cst.ClassDef)}
        # A dataset's saves (processed tensors cached by its download) run where it is built,
        # under ``main_process_first`` (the downloads rule, ACC115): the others then find the files.
        helpers -= facts.training_classes | facts.model_classes | facts.training_bases | facts.dataset_classes
        if not (facts.has_accelerator or facts.home_kind == "library"):
            helpers = set()
        if handed or helpers:
            lines = facts.lines_mentioning(callee_words(facts, ("torch.save",)))
            saves = SavesInHelperClasses(facts, lines, handed, helpers - handed)
            module.visit(saves)
            reported = saves.changes(module)
        saved_elsewhere = facts.program is not None and facts.program.saved_elsewhere
        waited: list[Change] = []
        unguarded: list[tuple[str, int]] = []
        loads = facts.lines_mentioning(callee_words(facts, ("torch.load",)))
        if (rewriter.saves or saved_elsewhere) and loads:
            # Loads only where the rewriter does not go (a dataset's cache, a ``Predictor``
            # class without the accelerator) get no barrier before them; those where none can
            # go still make the ranks wait after the save they may read.
            waits = WaitBeforeLoads(facts, loads, report=not rewriter.saves, place=bool(rewriter.loads))
            new_module = new_module.visit(waits)
            unguarded = waits.unguarded
            waited = waits.changes(module)
        new_module, after = _wait_after_writes(new_module, module, facts, rewriter.saves, unguarded)
        return new_module, returned([*rewriter.changes(module), *waited, *after, *reported])


def _wait_after_writes(
    new_module: cst.Module, module: cst.Module, facts: ScriptFacts, saves: bool, unguarded: list[tuple[str, int]]
) -> tuple[cst.Module, list[Change]]:
    """A load no barrier could go before (under ``if os.path.isfile(path):``, in a ``try``, in a
    function without the accelerator; or in a function of another module this one calls): the
    ranks wait after each write that such a load may read later in the run (a save here, or a
    call of another module's function that saves)."""
    flow = facts.of(file_flow)
    unguarded = [*unguarded, *flow.reads_through_calls]
    if not (saves or flow.writes_through_calls) or not unguarded:
        return new_module, []
    lines = facts.lines_mentioning(callee_words(facts, ("torch.save",))) | flow.writes_through_calls
    waiting = WaitAfterSaves(facts, lines, unguarded)
    return new_module.visit(waiting), waiting.changes(module)


def _returned_model_saved_by_caller(
    module: cst.Module, facts: ScriptFacts, options: Options
) -> tuple[cst.Module, Callable[[list[Change]], list[Change]]]:
    """The prepared model the creating function returns, unwrapped there, and its caller's saves
    on the main process (:mod:`.returned_model`); what it makes sound is no longer reported."""
    found = returned_model(module, facts)
    handled = handled_lines(found, facts)
    converted, made = unwrapped_returns(module, found, facts, options)

    def with_returned(changes: list[Change]) -> list[Change]:
        kept = [change for change in changes if not (change.code == "ACC914" and change.line in handled)]
        return sorted([*kept, *made], key=lambda change: (change.line, change.column)) if made else changes

    return converted, with_returned
