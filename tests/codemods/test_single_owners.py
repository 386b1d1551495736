"""One owner per concept: no rule keeps a private copy of a question the engine answers.

Copies drift apart and disagree (a device stripped by one rule and not by another; names a
target binds counted two ways): that is where silent bugs come from. Each concept below has one
owner in ``codemods/engine/``; a function under ``rewrites/``, ``checks/`` or ``model/`` whose name says it
answers the same question is refused, as ``test_torch_names.py`` refuses copies of name tables
and ``test_evaluation_owner.py`` copies of "this loop evaluates".

Names are the first net; the second is structure: :data:`PATTERNS` describes what answering an
owner's question again looks like in the code (a ``"cuda"`` string literal compared, a loss's
``reduction=`` read, ...) and refuses it in every module of the codemods but the owner, ``engine/``
included, whatever the function is called. ``tests/test_duplicate_bodies.py`` refuses copied
function bodies across the whole package.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import accel_convert.codemods as codemods_package

CODEMODS = Path(codemods_package.__file__).parent


def rule_files(codemods: Path) -> list[Path]:
    """Every module of the rules under ``codemods``, the parts of a rule split into a package
    (``rewrites/device/``) included."""
    return sorted(path for folder in ("rewrites", "checks") for path in (codemods / folder).rglob("*.py"))


RULE_FILES = rule_files(CODEMODS)
#: The program model's providers ask the same owners (``codemods/model/``).
MODEL_FILES = sorted((CODEMODS / "model").rglob("*.py"))

#: concept → (its owner, a pattern of function names that would be a private copy).
OWNERS = {
    "a device / a move to one": (
        "engine/devices.py (names_device, is_move, peel_moves)",
        re.compile(
            r"^_*(is_device|names_device|device_arg|strip_device_moves|peel_device_moves|peel_moves|moves|moves_to_device|is_move)$"
        ),
    ),
    "a fixed GPU, the same on every process": (
        "engine/devices.py (is_gpu_string, names_fixed_gpu, mentions_cuda)",
        re.compile(
            r"^_*(fixed_gpu|is_fixed_gpu|names_fixed_gpu|names_a_gpu|names_gpu|is_gpu|is_gpu_string|is_cuda_string"
            r"|names_cuda|mentions_cuda)$"
        ),
    ),
    "the loader under a loop's wrappers (enumerate, tqdm, zip)": (
        "engine/iteration.py (iterated, batch_target, loop_batch_names, enumerate_index)",
        re.compile(
            r"^_*(iterated|loop_loader|loader_of_loop|loader_and_batch|unwrap_loader|unwrapped_loader|loop_iterable"
            r"|batch_target|loop_batch_names|loop_targets|enumerate_index)$"
        ),
    ),
    "what a moved, cast or switched value was constructed from": (
        "engine/devices.py (constructed, construction, peel_self_returning; peel_moves for moves alone)",
        re.compile(
            r"^_*(constructor|constructed|constructor_call|built_call|peel_modes|peel_self_returning|peel_casts)$"
        ),
    ),
    "a value that chooses the device": (
        "engine/devices.py (chooses_device, chooses_gpu, selects_device)",
        re.compile(
            r"^_*(chooses_device|chooses_gpu|chooses_a_device|picks_device|picks_gpu|selects_device|device_choice)$"
        ),
    ),
    "the argument a call passes for a parameter, and the reverse": (
        "engine/syntax.py (argument_for, parameter_filled, positional_parameter_names)",
        re.compile(
            r"^_*(argument|call_argument|argument_at|argument_for|passed_for|parameter_filled|param_filled"
            r"|positional_parameter_names|positional_names)$"
        ),
    ),
    "a call of backward": (
        "engine/syntax.py (is_backward)",
        re.compile(r"^_*(is_backward|calls_backward|is_backward_call)$"),
    ),
    "the names a target or function binds": (
        "engine/syntax.py (target_names, bound_by, names_bound, binds_locally)",
        re.compile(r"^_*(bound_names|bound_by|binds|has_local|binds_locally|target_names|names_bound)$"),
    ),
    "random draws and seeds": (
        "engine/random_draws.py (unseeded_draw, is_seeding_call, agreed_names)",
        re.compile(r"^_*(is_draw|unseeded_draw|is_seeding_call|is_seed|agreed_names)$"),
    ),
    "row counts of a batch": (
        "engine/syntax.py (rows_counted)",
        re.compile(r"^_*(rows_counted|row_count|batch_rows)$"),
    ),
    "the model a converted script's accelerator.unwrap_model(model) unwraps": (
        "engine/accelerator_code.py (seen_through_unwrap)",
        re.compile(r"^_*(seen_through_unwrap|unwrapped_argument|unwrapped_model|through_unwrap|unwrap_receiver)$"),
    ),
}


def test_the_rule_folders_are_where_this_test_looks() -> None:
    assert len(RULE_FILES) > 30, "the rule folders moved: this test would check nothing"
    assert len(MODEL_FILES) > 10, "the model folder moved: this test would not check it"
    # A rule split into a package (``rewrites/metrics/``) is read file by file too.
    assert any(path.parent.name not in ("rewrites", "checks") for path in RULE_FILES), "sub-packages are not read"


def copies_in(paths: list[Path], root: Path, pattern: re.Pattern[str]) -> list[str]:
    """Where ``paths`` define a function whose name matches ``pattern``."""
    offenders = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and pattern.match(node.name):
                offenders.append(f"{path.relative_to(root).as_posix()}:{node.lineno} defines {node.name}")
    return offenders


#: The engine's modules other than the owners: they ask the owners too.
ENGINE_FILES = sorted((CODEMODS / "engine").rglob("*.py"))
#: ``module:function`` names in ``engine/`` that match a pattern and are no copy, each with why.
ENGINE_NAMES_ALLOWED = {
    "engine/name_flow.py:_target_names": "the names a target of CPython's tree binds (the guard reads "
    "CPython's trees; syntax.target_names reads libcst's)",
    "engine/names.py:binds": "a scope's own record of what it binds (Scope.binds), which the owners read",
}


@pytest.mark.parametrize("concept", sorted(OWNERS))
def test_no_rule_defines_its_own_copy(concept: str) -> None:
    owner, pattern = OWNERS[concept]
    owner_module = owner.split(" (")[0]
    engine = [path for path in ENGINE_FILES if path.relative_to(CODEMODS).as_posix() != owner_module]
    offenders = [
        found
        for found in copies_in([*RULE_FILES, *MODEL_FILES, *engine], CODEMODS, pattern)
        if f"{found.split(':')[0]}:{found.rpartition(' defines ')[2]}" not in ENGINE_NAMES_ALLOWED
    ]
    assert offenders == [], f"{concept} is answered by {owner}; ask it instead: {offenders}"


def test_a_copy_inside_a_rule_package_is_found(tmp_path: Path) -> None:
    """A rule split into modules (``rewrites/device/moves.py``) is scanned like a one-file rule."""
    part = tmp_path / "rewrites" / "device" / "moves.py"
    part.parent.mkdir(parents=True)
    (part.parent / "__init__.py").write_text("", encoding="utf-8")
    part.write_text("def _is_move(node):\n    return False\n", encoding="utf-8")
    _, pattern = OWNERS["a device / a move to one"]
    assert copies_in(rule_files(tmp_path), tmp_path, pattern) == ["rewrites/device/moves.py:1 defines _is_move"]
    assert any(path.parent.name == "device" for path in RULE_FILES), "the device rule's parts are not scanned"


def test_a_copy_of_the_fixed_gpu_question_is_found(tmp_path: Path) -> None:
    """The device rule once answered "this names a fixed GPU" three ways (``_fixed_gpu``,
    ``_names_a_gpu``, ``names_cuda``); a fourth, in any part of a rule, is refused."""
    part = tmp_path / "rewrites" / "device" / "selection.py"
    part.parent.mkdir(parents=True)
    part.write_text("def _names_a_gpu(value):\n    return False\n", encoding="utf-8")
    _, pattern = OWNERS["a fixed GPU, the same on every process"]
    assert copies_in(rule_files(tmp_path), tmp_path, pattern) == ["rewrites/device/selection.py:1 defines _names_a_gpu"]


def test_a_copy_of_the_loader_under_a_loop_s_wrappers_is_found(tmp_path: Path) -> None:
    """``enumerate(tqdm(loader))`` was unwrapped in four places (the model's recorder, the loader
    dict rule, two in the metrics rule), each with its own set of wrappers; a fifth is refused."""
    part = tmp_path / "rewrites" / "loader_dict.py"
    part.parent.mkdir(parents=True)
    part.write_text("def _loader_and_batch(loop):\n    return loop.iter, loop.target\n", encoding="utf-8")
    _, pattern = OWNERS["the loader under a loop's wrappers (enumerate, tqdm, zip)"]
    assert copies_in(rule_files(tmp_path), tmp_path, pattern) == ["rewrites/loader_dict.py:1 defines _loader_and_batch"]


def test_a_copy_of_what_a_value_was_constructed_from_is_found(tmp_path: Path) -> None:
    """``Net().to(device).eval()`` → ``Net()`` was answered three ways, with three sets of methods
    (the metrics rule's ``constructor``, the model's ``constructed`` and ``peel_modes``); a
    fourth in a rule or a provider is refused."""
    part = tmp_path / "rewrites" / "metrics" / "nodes.py"
    part.parent.mkdir(parents=True)
    part.write_text("def constructor(value):\n    return None\n", encoding="utf-8")
    _, pattern = OWNERS["what a moved, cast or switched value was constructed from"]
    assert copies_in(rule_files(tmp_path), tmp_path, pattern) == ["rewrites/metrics/nodes.py:1 defines constructor"]


def test_a_copy_of_the_device_choice_is_found(tmp_path: Path) -> None:
    """The model named devices with its ``chooses_device`` while the device rule decided what
    selects or picks one itself (a selection at module level was not one when the rule's walk
    found it was); a provider of its own is refused like a rule's."""
    provider = tmp_path / "model" / "devices.py"
    provider.parent.mkdir(parents=True)
    provider.write_text("def chooses_device(a, value, scope):\n    return False\n", encoding="utf-8")
    _, pattern = OWNERS["a value that chooses the device"]
    assert copies_in([provider], tmp_path, pattern) == ["model/devices.py:1 defines chooses_device"]


def test_a_copy_of_the_argument_for_a_parameter_is_found(tmp_path: Path) -> None:
    """The metrics rule's ``_argument_at``, the AMP rule's ``_argument_for`` and the OOM rule's
    own walk each matched a call's arguments to parameters, and disagreed on ``*args``; a new
    one is refused."""
    part = tmp_path / "rewrites" / "metrics" / "ensembles.py"
    part.parent.mkdir(parents=True)
    part.write_text("def _argument_at(call, index, param):\n    return None\n", encoding="utf-8")
    _, pattern = OWNERS["the argument a call passes for a parameter, and the reverse"]
    assert copies_in(rule_files(tmp_path), tmp_path, pattern) == [
        "rewrites/metrics/ensembles.py:1 defines _argument_at"
    ]


#: The modules that may ask whether a call is spelled ``X.backward()`` (engine/syntax.is_backward).
#: Whether a backward trains is the loops owner's answer (model/loops.py: ``backward_trains``,
#: ``training_backwards``, a loop's ``has_backward``): the recorder only collects the spellings
#: for it, and the rewrites of the call itself (``backward``, AMP's ``scaler.scale(loss).backward()``,
#: the metrics loop asking whether a loop it would gather holds one) rewrite or skip the call they see.
#: The device owner asks where gradients are computed at all (any backward, training or an
#: input's gradient): a CPU device chosen there is the model's, never one kept for metrics.
BACKWARD_SPELLING_READERS = {
    "model/devices.py",
    "model/loops.py",
    "model/recorder.py",
    "rewrites/backward.py",
    "rewrites/amp.py",
    "rewrites/metrics/loop.py",
}


def test_only_the_loops_owner_decides_that_a_backward_trains() -> None:
    """A backward that trains nothing (gradients for an input, a helper object's ``.backward()``)
    is training nowhere: no provider decides it from the spelling alone (home.py did, issue 41)."""
    readers = {
        path.relative_to(CODEMODS).as_posix()
        for path in [*RULE_FILES, *MODEL_FILES]
        if re.search(r"\bis_backward\b", path.read_text(encoding="utf-8"))
    }
    assert readers, "is_backward is read nowhere: this test would check nothing"
    assert readers <= BACKWARD_SPELLING_READERS, f"ask the loops owner instead: {readers - BACKWARD_SPELLING_READERS}"


# Structure, not names: what a private copy of an owner's question looks like in the code, found
# wherever it is written (engine/ included), whatever its function is called.

#: All the modules of the codemods: the rules, the program model and the engine.
CODEMOD_FILES = sorted(CODEMODS.rglob("*.py"))


@dataclass(frozen=True)
class Pattern:
    """A string of the script's syntax (``node.value``, ``string.evaluated_value``: the attribute
    named ``reads``) compared with a constant ``constant`` matches (``==``, ``in``,
    ``.startswith``...), outside ``owner``; ``any_side``: with whatever the constant is compared;
    ``anywhere``: the constant written at all, compared or passed on
    (``is_accelerator_method(node, facts, "unwrap_model")``)."""

    owner: str
    constant: re.Pattern[str]
    reads: frozenset[str] = frozenset({"value", "evaluated_value"})
    any_side: bool = False
    anywhere: bool = False


#: concept → what answering it again looks like. Each has one owner; ask it instead.
PATTERNS = {
    "a GPU named by a string literal (is_gpu_string, names_gpu_type)": Pattern(
        "engine/devices.py", re.compile(r"^cuda(:\d*)?$"), reads=frozenset({"evaluated_value"})
    ),
    "a loss's reduction (batch_mean_reduced, only_batch_mean_reduced)": Pattern(
        "model/locality.py", re.compile(r"^reduction$")
    ),
    "the Accelerator class, by its name (is_accelerator_class, creates_accelerator)": Pattern(
        "model/plan.py", re.compile(r"^(.*\.)?Accelerator$"), any_side=True
    ),
    "a call of the accelerator's prepare (is_accelerator_method)": Pattern(
        "engine/accelerator_code.py", re.compile(r"^prepare$")
    ),
    "a call of backward (is_backward)": Pattern("engine/syntax.py", re.compile(r"^backward$")),
    # Three copies (the backward rule, the metrics rule, the loops provider) each took the first
    # argument of a call they recognised their own way; a method name is all a copy needs.
    "what the accelerator's unwrap_model unwraps (seen_through_unwrap)": Pattern(
        "engine/accelerator_code.py", re.compile(r"^unwrap_model$"), anywhere=True
    ),
}

#: (concept, module) → why the module may answer it itself.
PATTERN_EXCEPTIONS = {
    (
        "the Accelerator class, by its name (is_accelerator_class, creates_accelerator)",
        "engine/accelerator_creation.py",
    ): (
        "an Accelerator from a package the converter cannot see is told by the last part of its qualified "
        "name (unseen_accelerators): it is by definition none of the classes the plan knows"
    ),
}


def _strings(node: ast.AST) -> list[str]:
    """The string constants ``node`` is, or holds (``("to", "cuda")``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [
            element.value
            for element in node.elts
            if isinstance(element, ast.Constant) and isinstance(element.value, str)
        ]
    return []


def _compared(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(one side, the other) of each comparison ``node`` makes: ``a == b``, ``a in b``,
    ``a.startswith(b)``, ``a.endswith(b)``."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        return [pair for left, right in zip(sides, sides[1:]) for pair in ((left, right), (right, left))]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("startswith", "endswith")
        and node.args
    ):
        return [(node.func.value, node.args[0])]
    return []


def pattern_sites(source: str, pattern: Pattern) -> list[int]:
    """The lines of ``source`` comparing what ``pattern`` describes (``anywhere``: writing it)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.expr):  # strings and comparisons are expressions
            continue
        if pattern.anywhere and any(pattern.constant.match(text) for text in _strings(node)):
            found.append(node.lineno)
        for side, constant in _compared(node):
            reads_syntax = isinstance(side, ast.Attribute) and side.attr in pattern.reads
            if (reads_syntax or pattern.any_side) and any(pattern.constant.match(text) for text in _strings(constant)):
                found.append(node.lineno)
                break
    return sorted(set(found))


def test_the_codemods_are_all_read_for_patterns() -> None:
    modules = {path.relative_to(CODEMODS).as_posix() for path in CODEMOD_FILES}
    assert {"engine/devices.py", "engine/syntax.py", "model/roles.py", "rewrites/amp.py"} <= modules
    for concept, pattern in PATTERNS.items():
        assert pattern.owner in modules, concept


@pytest.mark.parametrize("concept", sorted(PATTERNS))
def test_no_module_answers_an_owner_s_question_itself(concept: str) -> None:
    pattern = PATTERNS[concept]
    offenders = [
        f"{module}:{line}"
        for path in CODEMOD_FILES
        if (module := path.relative_to(CODEMODS).as_posix()) != pattern.owner
        and (concept, module) not in PATTERN_EXCEPTIONS
        for line in pattern_sites(path.read_text(encoding="utf-8"), pattern)
    ]
    assert offenders == [], f"{concept} is answered by {pattern.owner}; ask it instead: {offenders}"


def test_every_pattern_exception_says_why_and_is_still_needed() -> None:
    for (concept, module), reason in PATTERN_EXCEPTIONS.items():
        assert len(reason) > 20, (concept, module)
        assert pattern_sites((CODEMODS / module).read_text(encoding="utf-8"), PATTERNS[concept]), (concept, module)


def test_a_pattern_is_found_whatever_the_function_is_called() -> None:
    """The copy ``amp.py`` held of the owner's "cuda" read, in a function named after nothing the
    owner's name patterns know; an unrelated comparison of the same constant is no copy."""
    copied = (
        "def _tested_flag(flag):\n"
        "    return flag.comparator.evaluated_value == 'cuda'\n"
        "def _other(node):\n"
        "    return node.attr.value in ('to', 'cuda') or 'cuda:0' in options.devices\n"
        "def _reduced(arg):\n"
        "    return arg.keyword.value == 'reduction'\n"
        "def _prepared(call):\n"
        "    return call.func.attr.value.startswith('prepare')\n"
        "def _accelerator(name):\n"
        "    return name.rpartition('.')[2] == 'Accelerator'\n"
        "def _receiver(node, facts):\n"
        "    return node.args[0].value if is_accelerator_method(node, facts, 'unwrap_model') else node\n"
    )
    found = {concept: pattern_sites(copied, pattern) for concept, pattern in PATTERNS.items()}
    assert found == {
        "a GPU named by a string literal (is_gpu_string, names_gpu_type)": [2],
        "a loss's reduction (batch_mean_reduced, only_batch_mean_reduced)": [6],
        "the Accelerator class, by its name (is_accelerator_class, creates_accelerator)": [10],
        "a call of the accelerator's prepare (is_accelerator_method)": [8],
        "a call of backward (is_backward)": [],
        "what the accelerator's unwrap_model unwraps (seen_through_unwrap)": [12],
    }


#: libcst node classes whose reading is one owner's question: a module naming the class outside
#: its owner answers the question again. (name → (owner, the question)).
NODE_CLASS_OWNERS = {
    "AddAssign": (
        "model/locality.py",
        "a running sum, ``total += value`` (adds_up, counted_by_one): in a loop over this process's shard a "
        "value accumulated per rank; the metrics, loader-dict and ACC919 rules each read it themselves (issue 43)",
    ),
}


#: Tables of names whose reading is one owner's question: only the owner and the table's own
#: module name them (name → (owner, where it is defined, the question)).
OWNED_TABLES = {
    "MEAN_LOSSES": (
        "model/locality.py",
        "engine/torch_names.py",
        "a loss that is the plain mean of its rows, so recomputable on gathered rows (mean_over_rows): the "
        "loader-dict rule read the table itself, stricter than the owner's batch means (issue 43)",
    ),
}


@pytest.mark.parametrize("name", sorted(OWNED_TABLES))
def test_no_module_reads_an_owned_table(name: str) -> None:
    owner, defined, question = OWNED_TABLES[name]
    assert node_class_sites((CODEMODS / owner).read_text(encoding="utf-8"), name), "the owner no longer reads it"
    offenders = [
        f"{module}:{line}"
        for path in CODEMOD_FILES
        if (module := path.relative_to(CODEMODS).as_posix()) not in (owner, defined)
        for line in node_class_sites(path.read_text(encoding="utf-8"), name)
    ]
    assert offenders == [], f"{question} is answered by {owner}; ask it instead: {offenders}"


def test_a_read_of_an_owned_table_is_found() -> None:
    """loader-dict's own ``qualified_name(call.func) in MEAN_LOSSES``, whatever the function is
    called; another table is no copy."""
    copied = (
        "def _is_mean_loss_call(self, call):\n"
        "    return self.qualified(call.func) in MEAN_LOSSES\n"
        "def _other(name):\n"
        "    return name in DATA_LOADERS\n"
    )
    assert node_class_sites(copied, "MEAN_LOSSES") == [2]


def node_class_sites(source: str, name: str) -> list[int]:
    """The lines of ``source`` naming libcst's node class ``name`` (``cst.AddAssign``, or the
    class imported by its own name)."""
    return sorted(
        {
            node.lineno
            for node in ast.walk(ast.parse(source))
            if (isinstance(node, ast.Attribute) and node.attr == name)
            or (isinstance(node, ast.Name) and node.id == name)
        }
    )


@pytest.mark.parametrize("name", sorted(NODE_CLASS_OWNERS))
def test_no_module_reads_an_owned_node_class(name: str) -> None:
    owner, question = NODE_CLASS_OWNERS[name]
    assert (CODEMODS / owner).is_file() and node_class_sites((CODEMODS / owner).read_text(encoding="utf-8"), name)
    offenders = [
        f"{module}:{line}"
        for path in CODEMOD_FILES
        if (module := path.relative_to(CODEMODS).as_posix()) != owner
        for line in node_class_sites(path.read_text(encoding="utf-8"), name)
    ]
    assert offenders == [], f"{question} is answered by {owner}; ask it instead: {offenders}"


def test_a_node_class_read_is_found() -> None:
    """``batch_values.py``'s own ``isinstance(first.operator, cst.AddAssign)``, whatever the
    function is called; another operator is no copy."""
    copied = (
        "def _rows_summed(first):\n"
        "    return isinstance(first, cst.AugAssign) and isinstance(first.operator, cst.AddAssign)\n"
        "def _other(node):\n"
        "    return isinstance(node.operator, cst.SubtractAssign)\n"
    )
    assert node_class_sites(copied, "AddAssign") == [2]
