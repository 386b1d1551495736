"""amp (ACC111): hand-written mixed precision goes to the accelerator."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.rewrites.amp import AmpCodemod, MixedPrecision, mixed_precision
from tests.codemods.support import apply, assert_rewrites, code, convert, convert_text, make_facts

AMP_CASES = [
    pytest.param(
        """
        def train(model, train_loader, optimizer, scaler, use_amp, accelerator):
            for data, target in train_loader:
                optimizer.zero_grad()
                if use_amp:
                    with torch.autocast(device_type="cuda", dtype=torch.float16):
                        output = model(data)
                        loss = F.cross_entropy(output, target)
                    accelerator.backward(scaler.scale(loss))
                    scaler.unscale_(optimizer)
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    output = model(data)
                    loss = F.cross_entropy(output, target)
                    accelerator.backward(loss)
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()


        def main():
            args = parser.parse_args()
            accelerator = Accelerator(cpu=args.cpu)
            use_amp = args.amp
            scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
            train(model, train_loader, optimizer, scaler, use_amp, accelerator)
        """,
        """
        def train(model, train_loader, optimizer, use_amp, accelerator):
            for data, target in train_loader:
                optimizer.zero_grad()
                output = model(data)
                loss = F.cross_entropy(output, target)
                accelerator.backward(loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()


        def main():
            args = parser.parse_args()
            accelerator = Accelerator(cpu=args.cpu, mixed_precision="fp16" if args.amp else "no")
            use_amp = args.amp
            train(model, train_loader, optimizer, use_amp, accelerator)
        """,
        id="use-amp-branches-collapse-flag-kept",
    ),
    pytest.param(
        """
        def main(args):
            accelerator = Accelerator()
            scaler = GradScaler()
            for data, target in train_loader:
                with autocast():
                    loss = model(data, target)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        """,
        """
        def main(args):
            accelerator = Accelerator(mixed_precision="fp16")
            for data, target in train_loader:
                loss = model(data, target)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        """,
        id="always-on-fp16-before-the-backward-pass",
    ),
    pytest.param(
        """
        def main(args):
            accelerator = Accelerator()
            for batch in train_loader:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16), torch.no_grad():
                    teacher_logits = teacher(batch)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                    loss = model(batch, teacher_logits)
                accelerator.backward(loss)
        """,
        """
        def main(args):
            accelerator = Accelerator(mixed_precision="bf16" if args.bf16 else "no")
            for batch in train_loader:
                with torch.no_grad():
                    teacher_logits = teacher(batch)
                loss = model(batch, teacher_logits)
                accelerator.backward(loss)
        """,
        id="bf16-switch-and-shared-with",
    ),
    pytest.param(
        """
        def main(args):
            accelerator = Accelerator()
            for x in train_loader:
                with torch.autocast("cuda"):
                    h = model(x)
                    with torch.autocast("cuda", enabled=False):
                        norm = h.float().pow(2).sum()
                accelerator.backward(norm)
        """,
        """
        def main(args):
            accelerator = Accelerator(mixed_precision="fp16")
            for x in train_loader:
                h = model(x)
                with torch.autocast("cuda", enabled=False):
                    norm = h.float().pow(2).sum()
                accelerator.backward(norm)
        """,
        id="full-precision-island-kept",
    ),
]


@pytest.mark.parametrize("before, after", AMP_CASES)
def test_amp(before: str, after: str) -> None:
    changes = assert_rewrites(AmpCodemod(), before, after)
    assert changes and all(c.code == "ACC111" and c.fixed for c in changes)


def test_amp_leaves_a_scaler_it_cannot_replace() -> None:
    # Facts built by hand (no recorded positions): reported at the use's own position.
    source = code(
        """
        def main():
            accelerator = Accelerator()
            scaler = torch.cuda.amp.GradScaler()
            scaler.scale(loss).backward()
            torch.save({"scaler": scaler.state_dict()}, "ckpt.pt")
        """
    )
    # Facts built by hand carry the rule's own facts too: here nothing recorded.
    no_machinery = {mixed_precision.name: MixedPrecision(frozenset(), frozenset())}
    output, changes = apply(AmpCodemod(), source, make_facts(rule_results=no_machinery))
    assert output == source
    assert [(c.code, c.line, c.fixed) for c in changes] == [("ACC911", 5, False)]


def test_a_scaler_saved_and_loaded_is_reported_at_each_use() -> None:
    """A resume script's ``scaler.load_state_dict(...)`` and ``"scaler": scaler.state_dict()`` in the
    checkpoint dict: each use is reported at its own statement (both were at line 1, the file's
    top, as the analysis records no position for a bare name)."""
    source = code(
        """
        import torch

        def main(loader, model, optimizer, resume):
            scaler = torch.cuda.amp.GradScaler()
            if resume:
                scaler.load_state_dict(torch.load(resume)["scaler"])
            for x in loader:
                with torch.autocast("cuda"):
                    loss = model(x).sum()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            torch.save({
                "scaler": scaler.state_dict(),
            }, "ckpt.pt")
        """
    )
    _, changes = convert_text(source)
    assert sorted((c.code, c.line) for c in changes if c.code == "ACC911") == [("ACC911", 6), ("ACC911", 13)]


def test_a_cpu_grad_scaler_alone_is_replaced() -> None:
    """``torch.cpu.amp.GradScaler`` with no autocast in sight: the analysis must know the scaler
    (one table of scaler names, engine/torch_names.py) or the AMP rule never runs on it and
    ``scaler.scale(loss).backward()`` stays, unreported."""
    body = """\
        def main():
            loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
            model = nn.Linear(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler = torch.cpu.amp.GradScaler()
            for (x,) in loader:
                loss = model(x).sum()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        """
    code, lines = convert(body)
    assert "scaler" not in code, code
    assert "accelerator.backward(loss)" in lines and "optimizer.step()" in lines
    assert 'accelerator = Accelerator(mixed_precision="fp16")' in lines
    assert "#ACC111" in lines


def test_the_analysis_points_the_amp_rule_at_every_scaler_and_autocast() -> None:
    """The rule reads only the statements the analysis found AMP machinery in (``amp_lines``):
    GradScaler and autocast calls by any alias, a decorator included, and every statement
    naming a scaler."""
    source = (
        "import torch\n"  # 1
        "from torch.cuda.amp import GradScaler as GS\n"  # 2
        "class Net(torch.nn.Module):\n"  # 3
        "    @torch.autocast('cuda')\n"  # 4
        "    def forward(self, x):\n"  # 5
        "        return x\n"  # 6
        "def main(model):\n"  # 7
        "    x = 1\n"  # 8
        "    self.scaler = GS()\n"  # 9
        "    keep = {\n"  # 10
        "        's': self.scaler.state_dict()}\n"  # 11
    )
    facts = analyse(cst.parse_module(source), source)
    assert facts.of(mixed_precision).grad_scalers == {"self.scaler"}
    # Line 11: the call naming the scaler starts there, inside the statement of lines 10-11.
    assert facts.of(mixed_precision).amp_lines == {4, 9, 11}


def test_a_scaler_used_far_from_its_training_loop_is_still_reported() -> None:
    body = """\
        def main():
            loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
            model = nn.Linear(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler = torch.cuda.amp.GradScaler()
            for (x,) in loader:
                with torch.autocast("cuda"):
                    loss = model(x).sum()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            for epoch in range(2):
                if epoch:
                    state = {"epoch": epoch,
                             "scale": scaler.get_scale()}
        """
    code, lines = convert(body)
    assert "scaler.scale(loss)" in code and 'torch.autocast("cuda")' in code
    assert "#ACC911" in lines


def test_an_autocast_decorator_is_read_where_its_method_is_not() -> None:
    """The rule reads only statements holding AMP machinery; a decorator lies above its
    ``def``'s lines, so decorated definitions are always entered (here it decides bf16)."""
    body = """\
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 1)

            @torch.autocast("cuda", dtype=torch.bfloat16)
            def forward(self, x):
                return self.fc(x)


        def main():
            loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler = torch.cuda.amp.GradScaler()
            for (x,) in loader:
                loss = model(x).sum()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        """
    code, lines = convert(body)
    assert 'accelerator = Accelerator(mixed_precision="bf16")' in lines, code


def test_an_autocast_decorated_forward_with_oom_retry_converts_and_converts_to_itself() -> None:
    # The retried function the OOM rule creates is walked by a later pass that declines to enter
    # it: the walk's scope must stay balanced (it once failed with "pop from empty list").
    from pathlib import Path

    from accel_convert.converter.pipeline import convert_source

    source = (Path(__file__).parent / "data" / "amp_decorated_forward.py").read_bytes()
    conversion = convert_source(source, Options(oom_retry=True), path="amp_decorated_forward.py")
    output = conversion.output.decode()
    assert "@find_executable_batch_size(starting_batch_size=8)" in output
    assert 'Accelerator(mixed_precision="fp16"' in output


SWITCHED_AMP = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

cfg = {{"use_amp": False, "fp16": True}}
use_amp = cfg["use_amp"]
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8)
scaler = torch.cuda.amp.GradScaler(enabled={scaler_flag})
for x, y in loader:
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=use_amp):
        loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


def test_one_switch_spelled_two_ways_keeps_the_switch() -> None:
    # ``use_amp = cfg["use_amp"]``: the scaler's ``cfg["use_amp"]`` and the autocast's ``use_amp``
    # are one switch. Unconditional fp16 would turn AMP on where the user turned it off.
    source = code(SWITCHED_AMP.format(scaler_flag='cfg["use_amp"]'))
    output, _ = convert_text(source)
    assert "GradScaler" not in output and "autocast" not in output
    assert 'accelerator = Accelerator(mixed_precision="fp16" if cfg["use_amp"] else "no")' in output


def test_two_different_switches_are_reported_and_left() -> None:
    source = code(SWITCHED_AMP.format(scaler_flag='cfg["fp16"]'))
    output, changes = apply(AmpCodemod(), source, None, None, preamble="")
    assert output == source
    assert {(change.code, change.fixed) for change in changes} == {("ACC911", False)}
    assert 'different flags (cfg["fp16"], use_amp)' in changes[0].message


def test_a_switch_on_the_device_type_reads_cuda_availability_where_the_accelerator_is_created() -> None:
    # ``use_amp = args.amp and device.type == "cuda"`` is set after the accelerator exists, and
    # ``device`` only then: fp16 exactly when asked for and CUDA is there, never always.
    source = code(
        """
        import argparse

        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--amp", action="store_true")
            args = parser.parse_args()
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            use_amp = args.amp and device.type == "cuda"
            model = nn.Linear(4, 2).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8)
            scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                with torch.autocast(device_type="cuda", enabled=use_amp):
                    loss = nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        """
    )
    output, _ = convert_text(source)
    assert 'Accelerator(mixed_precision="fp16" if args.amp and torch.cuda.is_available() else "no")' in output


TRAINER_AMP = """
import argparse

import torch
import torch.nn as nn
from torch.cuda.amp import GradScaler, autocast
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, optimizer, args):
        self.model = model
        self.optimizer = optimizer
        self.args = args

    def fit(self, loader):
        scaler = GradScaler(enabled=self.args.{option})
        for x, y in loader:
            with autocast(enabled=self.args.{option}):
                loss = nn.functional.cross_entropy(self.model(x), y)
            self.optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(self.optimizer)
            scaler.update()


def main():
    parser = argparse.ArgumentParser()
    {define}
    args = parser.parse_args()
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8)
    Trainer(model, optimizer, args).fit(loader)
"""


def test_a_training_class_switch_is_read_from_the_options_it_was_given() -> None:
    source = code(TRAINER_AMP.format(option="fp16", define='parser.add_argument("--fp16", action="store_true")'))
    output, _ = convert_text(source)
    assert 'Accelerator(mixed_precision="fp16" if args.fp16 else "no")' in output


def test_a_switch_not_readable_where_the_accelerator_is_created_is_reported() -> None:
    # ``self.opts.fp16``: nothing named ``opts`` where the accelerator is created. Always-on
    # fp16 would be wrong when the switch is off: reported, the AMP code left.
    source = code(
        TRAINER_AMP.format(option="fp16", define='parser.add_argument("--fp16", action="store_true")')
        .replace("self.args.fp16", "self.opts.fp16")
        .replace("self.args = args", "self.opts = args")
    )
    output, changes = convert_text(source)
    assert "GradScaler(enabled=self.opts.fp16)" in output
    assert "mixed_precision" not in output
    assert any(change.code == "ACC911" and "not readable" in change.message for change in changes)


UNET_AMP_SHAPE = """\
def evaluate(net, loader, device, amp):
    net.eval()
    with torch.autocast(device.type, enabled=amp):
        for x, y in loader:
            out = net(x)


def train_model(model, device, epochs=1, amp=False):
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=0.1)
    grad_scaler = torch.cuda.amp.GradScaler(enabled=amp)
    for epoch in range(epochs):
        for x, y in loader:
            with torch.autocast(device.type, enabled=amp):
                loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            grad_scaler.scale(loss).backward()
            grad_scaler.step(optimizer)
            grad_scaler.update()
        evaluate(model, loader, device, amp)


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true")
    return parser.parse_args()


if __name__ == "__main__":
    args = get_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Linear(4, 1)
    model.to(device=device)
    try:
        train_model(model=model, device=device, amp=args.amp)
    except torch.cuda.OutOfMemoryError:
        train_model(model=model, device=device, amp=args.amp)
"""


def test_a_switch_passed_as_a_parameter_is_read_from_what_every_caller_passes() -> None:
    """The U-Net shape: ``GradScaler(enabled=amp)`` in ``train_model(..., amp=False)``, called
    (twice) with ``amp=args.amp`` from the ``__main__`` block that creates the accelerator, and
    handed on to ``evaluate(..., amp)``: the accelerator gets that switch (before: ACC911)."""
    converted, lines = convert(UNET_AMP_SHAPE)
    assert 'accelerator = Accelerator(mixed_precision="fp16" if args.amp else "no")' in lines
    assert "GradScaler" not in converted and "autocast" not in converted
    assert "#ACC911" not in lines
    # Callers that disagree leave no single switch to carry over: reported, nothing removed.
    disagreeing = UNET_AMP_SHAPE.replace(
        "    except torch.cuda.OutOfMemoryError:\n        train_model(model=model, device=device, amp=args.amp)",
        "    except torch.cuda.OutOfMemoryError:\n        train_model(model=model, device=device, amp=True)",
    )
    converted, lines = convert(disagreeing)
    assert "#ACC911" in lines and "GradScaler(enabled=amp)" in converted
