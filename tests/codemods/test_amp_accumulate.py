"""amp (ACC111) and accumulate (ACC112): the training step after the core passes."""

from __future__ import annotations

import pytest

from codemods.rules.accumulate import AccumulateCodemod
from codemods.rules.amp import AmpCodemod
from tests.codemods.support import apply, assert_rewrites, code, make_facts

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
    changes = assert_rewrites(AmpCodemod(), before, after, make_facts())
    assert changes and all(c.code == "ACC111" and c.fixed for c in changes)


def test_amp_leaves_a_scaler_it_cannot_replace() -> None:
    source = code(
        """
        def main():
            accelerator = Accelerator()
            scaler = torch.cuda.amp.GradScaler()
            scaler.scale(loss).backward()
            torch.save({"scaler": scaler.state_dict()}, "ckpt.pt")
        """
    )
    output, changes = apply(AmpCodemod(), source, make_facts())
    assert output == source
    assert [(c.code, c.line, c.fixed) for c in changes] == [("ACC911", 5, False)]


ACCUMULATE_CASES = [
    pytest.param(
        """
        def main():
            args = parser.parse_args()
            accelerator = Accelerator()
            for i, (data, target) in enumerate(train_loader):
                output = model(data)
                loss = F.nll_loss(output, target)
                loss = loss / args.accum_steps
                accelerator.backward(loss)
                if (i + 1) % args.accum_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
        """,
        """
        def main():
            args = parser.parse_args()
            accelerator = Accelerator(gradient_accumulation_steps=args.accum_steps)
            for i, (data, target) in enumerate(train_loader):
                with accelerator.accumulate(model):
                    output = model(data)
                    loss = F.nll_loss(output, target)
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
        """,
        id="divide-then-step-every-k",
    ),
    pytest.param(
        """
        ACCUM = 4
        accelerator = Accelerator()
        for step, batch in enumerate(train_loader):
            loss = model(**batch).loss
            loss /= ACCUM
            accelerator.backward(loss)
            if (step + 1) % ACCUM == 0 or step == len(train_loader) - 1:
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                completed_steps += 1
        """,
        """
        ACCUM = 4
        accelerator = Accelerator(gradient_accumulation_steps=ACCUM)
        for step, batch in enumerate(train_loader):
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                    completed_steps += 1
        """,
        id="module-level-guard-also-counts",
    ),
]


@pytest.mark.parametrize("before, after", ACCUMULATE_CASES)
def test_accumulate(before: str, after: str) -> None:
    changes = assert_rewrites(AccumulateCodemod(), before, after, make_facts())
    assert [c.code for c in changes] == ["ACC112"]


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(
            """
            def main():
                accelerator = Accelerator()
                accum = compute_accumulation()
                for i, (data, target) in enumerate(train_loader):
                    loss = model(data, target) / accum
                    accelerator.backward(loss)
                    if (i + 1) % accum == 0:
                        optimizer.step()
                        optimizer.zero_grad()
            """,
            id="k-computed-after-the-accelerator",
        ),
        pytest.param(
            """
            def main():
                accelerator = Accelerator()
                for i, (data, target) in enumerate(train_loader):
                    loss = model(data, target)
                    accelerator.backward(loss)
                    if (i + 1) % args.accum == 0:
                        optimizer.step()
                        optimizer.zero_grad()
            """,
            id="no-loss-division",
        ),
    ],
)
def test_accumulate_reports_what_it_cannot_recognise(source: str) -> None:
    output, changes = apply(AccumulateCodemod(), code(source), make_facts())
    assert output == code(source)
    assert [(c.code, c.fixed) for c in changes] == [("ACC912", False)]
    loop_line = next(i for i, line in enumerate(code(source).splitlines(), 1) if line.lstrip().startswith("for "))
    assert changes[0].line == loop_line
