"""Fixture scripts through the whole conversion: each rule does its part in the order the
registry runs them, and a second conversion changes nothing.

(The golden files pin the full text; these tests say which lines matter and why.)
"""

from __future__ import annotations

import json

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.registry import all_rules
from tests.fixture_conversions import converted_fixture
from tests.launching import REPO_ROOT

CASES = REPO_ROOT / "fixtures" / "cases"

#: fixture → lines the converted script must contain (stripped), and codes it must report.
EXPECTED: dict[str, tuple[list[str], set[str]]] = {
    "vae_function_oom": (
        [
            "@find_executable_batch_size(starting_batch_size=args.batch_size)",
            "accelerator.free_memory()",
            "grid = recon.view(batch_size, 1, 28, 28)",
            "recon, images, mu, logvar = accelerator.gather_for_metrics((recon, images, mu, logvar))",
            "samples = accelerator.unwrap_model(model).decode(z).cpu()",
            "inner_training_loop()",
        ],
        {"ACC113", "ACC114", "ACC117"},
    ),
    "amp_flag_clip": (
        [
            'accelerator = Accelerator(mixed_precision="fp16" if args.amp else "no")',
            "accelerator.backward(loss)",
            "accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)",
            "optimizer.step()",
            "logits = model(x)",
        ],
        {"ACC111", "ACC113"},
    ),
    "accumulate_scheduler": (
        [
            "accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)",
            "with accelerator.accumulate(model):",
            "if accelerator.sync_gradients:",
            'logits, labels = accelerator.gather_for_metrics((outputs["logits"], batch["labels"]))',
            "correct += (predictions == labels).sum().item()",
        ],
        {"ACC112", "ACC113"},
    ),
    "dataparallel_module": (
        [
            "net = accelerator.unwrap_model(model)",
            "out, y = accelerator.gather_for_metrics((out, y))",
            "accelerator.save(net.state_dict(), path)",
            "os.remove(path)",
        ],
        {"ACC110", "ACC113", "ACC114", "ACC116"},
    ),
    "checkpoint_best": (
        [
            "best_mse, best_state = mse, copy.deepcopy(accelerator.unwrap_model(model).state_dict())",
            "accelerator.unwrap_model(model).load_state_dict(best_state)",
            "accelerator.save(accelerator.unwrap_model(model), args.output)",
            'accelerator.print("parameters:", accelerator.unwrap_model(model).num_parameters())',
        ],
        {"ACC113", "ACC114"},
    ),
    "results_files": (
        [
            "os.makedirs(args.run_dir, exist_ok=True)",
            "logits = accelerator.gather_for_metrics(logits)",
            'with open(log_file, "a") as f:',
        ],
        {"ACC113", "ACC116"},
    ),
    "metric_add_batch": (
        [
            'logits, labels = accelerator.gather_for_metrics((outputs["logits"], batch["labels"]))',
            "metric.add_batch(predictions=logits.argmax(dim=-1), references=labels)",
        ],
        {"ACC113"},
    ),
    "rnn_hidden": (
        [
            "accelerator.unwrap_model(model).rnn.flatten_parameters()",
            "hidden = accelerator.unwrap_model(model).init_hidden(tokens.size(0))",
            "logits, labels = accelerator.gather_for_metrics((logits, labels))",
        ],
        {"ACC113", "ACC114"},
    ),
    "oom_module_level": (
        [
            "def inner_training_loop(batch_size):",
            "noise = 0.3 * torch.randn(batch_size, 24, device=device)",
            "restored, signal = accelerator.gather_for_metrics((restored, signal))",
        ],
        {"ACC113", "ACC117"},
    ),
    "eval_sum_tqdm": (
        ["output, target = accelerator.gather_for_metrics((output, target))"],
        {"ACC113"},
    ),
}


def convert(name: str) -> tuple[str, set[str], Options]:
    config = json.loads((CASES / f"{name}.json").read_text())
    options = Options(oom_retry=config.get("oom_retry", False))
    outcome = convert_module(cst.parse_module((CASES / f"{name}.py").read_text()), options)
    return outcome.module.code, {c.code for c in outcome.changes}, options


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_conversion_rewrites_the_lines_that_matter(name: str) -> None:
    lines, codes = EXPECTED[name]
    output, reported, options = convert(name)
    stripped = {line.strip() for line in output.splitlines()}
    missing = [line for line in lines if line not in stripped]
    assert not missing, f"{name}: missing {missing}\n{output}"
    assert codes <= reported
    assert not {c for c in reported if c.startswith("ACC9") and c[3:5] == "91"}, reported
    again = convert_module(cst.parse_module(output), options)
    assert again.module.code == output
    assert not [c for c in again.changes if c.fixed]


ISSUE5_PASSES = {cls.name: cls for cls in all_rules() if cls.code[3:5] == "11"}


@pytest.mark.parametrize(
    "name, running",
    [
        # batch-to-numpy: ``pred.cpu()`` in the evaluation loop (a batch compared with it would read .cpu())
        ("eval_sum_tqdm", {"metrics", "checkpoint", "side-effects", "batch-to-numpy"}),
        ("amp_flag_clip", {"amp", "metrics", "checkpoint", "side-effects"}),
        ("accumulate_scheduler", {"accumulate", "metrics", "checkpoint", "side-effects"}),
        ("dataparallel_module", {"dataparallel", "metrics", "checkpoint", "side-effects"}),
    ],
)
def test_passes_run_only_where_the_analysis_sees_their_pattern(name: str, running: set[str]) -> None:
    """The cheap ``applies`` test keeps passes with nothing to do from walking the tree."""
    module = cst.parse_module((CASES / f"{name}.py").read_text())
    facts = analyse(module)
    applying = {n for n, cls in ISSUE5_PASSES.items() if cls().applies(facts, Options())}
    assert applying == running


@pytest.mark.parametrize(
    "options", [Options(), Options(oom_retry=True), Options(target="accelerate")], ids=["runtime", "oom", "accelerate"]
)
def test_every_change_is_reported_where_it_stands(options: Options) -> None:
    """No change of any fixture falls back to the start of the file: a rule that rebuilds
    statements with a plain libcst transformer must carry their positions over, or every rule
    after it reports them at 1:1 (the metrics rule's gather and the out-of-memory retry did)."""
    reported = 0
    for script in sorted(CASES.glob("*.py")):
        for change in converted_fixture(script, options).changes:
            reported += 1
            assert (change.line, change.column, change.end_line, change.end_column) != (1, 0, 1, 0), (
                script.name,
                change.code,
                change.message,
            )
    assert reported > 1000
