"""The verdicts of ``accel-convert verify``: what the traces of three runs say about a conversion.

The runs (see converter.verify) are the original script on one process, the converted script on one
process, and the converted script on N processes. Each wrote, per rank, the records of
``docs/verify.md`` (losses, optimizer steps, printed lines, files written and read, passes over
loaders, CUDA devices asked for, the exit). This module only reads those records: every verdict is a
pure function of them, so the unit tests feed it hand-made records.

One process (the conversion changes nothing a single process does):
``runs`` both runs end with exit 0; ``losses`` the same loss at every backward; ``stdout`` the same
lines, timing aside; ``files`` the same files with the same bytes; ``parameters`` the same parameters
after the last optimizer step.

N processes (the conversion shares the work and nothing else changes):
``no-hang``, ``no-crash``; ``in-sync`` every rank's parameters equal after every step; ``prints-once``
each line the original prints printed once (by one rank); ``files-once`` every file the original
writes written, by one rank, and no other; ``reads-complete`` no rank reads a file the run writes
before it is complete; ``evaluation-counts`` every evaluation pass counts what the one-process run
counts; ``own-device`` every rank on the CUDA device of its own local rank. A program the converter
deliberately left as written (it says why) is judged on N processes by ``no-hang`` and ``no-crash``
only, and ``left-as-written`` holds with the converter's reason: the ranks run copies by design.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from accel_convert.codemods.engine.accelerator_code import RETRY_ANNOUNCEMENT

Record = dict[str, Any]

#: At most this many pieces of evidence are shown per verdict (the rest are counted).
EVIDENCE_SHOWN = 8
#: Losses are equal when within this relative distance: the same float operations in the same order
#: give the same bits, but the runtime's wrappers may sum in another order (a few ulps).
LOSS_REL_TOL = 1e-5

#: The ACC9xx warnings of the conversion that can explain a failed verdict (attached to it).
RELATED_CODES: dict[str, tuple[str, ...]] = {
    "runs": ("ACC901", "ACC903", "ACC904", "ACC933", "ACC937"),
    "losses": ("ACC901", "ACC911", "ACC912", "ACC923", "ACC937"),
    "stdout": ("ACC937",),
    "files": ("ACC914", "ACC916", "ACC936", "ACC937"),
    "parameters": ("ACC911", "ACC912", "ACC920", "ACC921", "ACC925", "ACC926", "ACC937"),
    "no-hang": ("ACC902", "ACC918", "ACC927"),
    "no-crash": ("ACC904", "ACC914", "ACC916", "ACC924", "ACC933", "ACC937"),
    "in-sync": ("ACC911", "ACC912", "ACC920", "ACC921", "ACC923", "ACC925", "ACC926", "ACC929", "ACC930"),
    "prints-once": ("ACC919", "ACC954"),
    "files-once": ("ACC914", "ACC916", "ACC936"),
    "reads-complete": ("ACC914", "ACC916"),
    "evaluation-counts": (
        "ACC919",
        "ACC922",
        "ACC928",
        "ACC931",
        "ACC938",
        "ACC939",
        *(f"ACC9{number}" for number in range(40, 56)),
    ),
    "own-device": ("ACC924", "ACC932"),
}


@dataclass
class RunTrace:
    """What one run left: its records per rank, how it ended, and the files it wrote."""

    name: str
    records: dict[int, list[Record]]
    returncode: int = 0
    timed_out: bool = False
    #: Each rank's Python stacks, dumped when the run was stopped for running past the timeout.
    stacks: dict[int, str] = field(default_factory=dict)
    #: Files new or changed in the run's working folder after it (relative path → sha256).
    files: dict[str, str] = field(default_factory=dict)
    #: The end of what the run printed on stderr (shown when it crashed).
    stderr_tail: str = ""

    def of(self, kind: str, rank: int | None = None) -> list[Record]:
        """The records of ``kind`` (of one rank, or of every rank in rank order)."""
        ranks = [rank] if rank is not None else sorted(self.records)
        return [record for r in ranks for record in self.records.get(r, []) if record.get("kind") == kind]

    def ranks(self) -> list[int]:
        return sorted(self.records)


@dataclass
class Verdict:
    """One property of the conversion, and whether the runs showed it."""

    key: str
    title: str
    holds: bool
    evidence: list[str] = field(default_factory=list)
    #: ``file:line`` in the user's code where the failure shows, when known.
    site: str | None = None
    #: The conversion's warnings (``--output-format json`` objects) that can explain a failure.
    findings: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "holds": self.holds,
            "evidence": self.evidence,
            "site": self.site,
            "findings": self.findings,
        }


def verdict(key: str, title: str, problems: Sequence[str], fine: str, site: str | None = None) -> Verdict:
    """Holds when there is no problem; the evidence is the problems (or what was checked)."""
    shown = list(problems[:EVIDENCE_SHOWN])
    if len(problems) > EVIDENCE_SHOWN:
        shown.append(f"... and {len(problems) - EVIDENCE_SHOWN} more")
    return Verdict(key, title, not problems, shown or [fine], site if problems else None)


# Masks ------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[ T]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?|\b\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?\b"
)
_DURATION = re.compile(
    r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*(?:it/s|s/it|samples/s|ms|us|µs|sec(?:onds?)?|s|min(?:utes?)?|h)\b"
)
_TIMING_WORDS = re.compile(
    r"\b(?:time|elapsed|took|duration|eta|speed|throughput)\b|\b(?:ms|s|sec)/(?:batch|step|iter|it|epoch)\b"
    r"|\b(?:it|batches|samples|steps)/s(?:ec)?\b",
    re.IGNORECASE,
)


_PADDING_BEFORE_MASK = re.compile(r"[ \t]+#")


def mask_timing(line: str) -> str:
    """A printed line with its timings masked: durations, rates, timestamps; every number of a line
    that talks about time (``epoch took 3.2``)."""
    if _TIMING_WORDS.search(line):
        masked = _NUMBER.sub("#", _TIMESTAMP.sub("#", line))
    else:
        masked = _DURATION.sub("#", _TIMESTAMP.sub("#", line))
    # A timing padded to a width (``ms/batch {:5.2f}``) takes another number of spaces each run.
    return _PADDING_BEFORE_MASK.sub(" #", masked)


#: A device with its index (``cuda:1``): each rank prints its own, where the original printed
#: ``cuda`` or ``cuda:0``.
_INDEXED_DEVICE = re.compile(r"\b(cuda|xpu|npu|hpu|mps):\d+\b")


#: The function that made a printed tensor: under DDP the model's outputs come from its own
#: (``_DDPSinkBackward``) where one process shows the last layer's.
_GRAD_FN = re.compile(r"grad_fn=<\w+>")


#: A quoted value in a printed line (``Predicted: "lathe"``): what a model trained on N processes
#: predicts is a value like its losses.
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")


def mask_numbers(line: str) -> str:
    """A printed line with every number and quoted value masked and its spaces collapsed: N
    processes print other losses, counts and predictions, of other widths in padded columns, each
    its own device index, and tensors that DDP's autograd function made."""
    line = _QUOTED.sub('"#"', _GRAD_FN.sub("grad_fn=<#>", _INDEXED_DEVICE.sub(r"\1", line)))
    return " ".join(_NUMBER.sub("#", _TIMESTAMP.sub("#", line)).split())


def first(records: Iterable[Record], key: str) -> Any:
    return next((record.get(key) for record in records if record.get(key)), None)


# One process ------------------------------------------------------------------------------------


def one_process_verdicts(original: RunTrace, converted: RunTrace) -> list[Verdict]:
    """The converted script on one process behaves as the original."""
    return [
        runs_verdict(original, converted),
        losses_verdict(original, converted),
        stdout_verdict(original, converted),
        files_verdict(original, converted),
        parameters_verdict(original, converted),
    ]


def crash_problems(run: RunTrace) -> list[str]:
    """How a run failed: each rank's exception and site, or its exit code."""
    problems = []
    for rank in run.ranks() or [0]:
        exits = run.of("exit", rank)
        code = exits[-1].get("code") if exits else None
        exception = first(exits, "exception")
        if exception or (code not in (0, None)):
            where = first(exits, "site")
            problems.append(
                f"{run.name}, rank {rank}: {exception or f'exit code {code}'}" + (f" at {where}" if where else "")
            )
        elif not exits and not run.timed_out and run.records.get(rank) is not None and run.returncode != 0:
            problems.append(f"{run.name}, rank {rank}: ended without an exit record (killed?)")
    if not problems and run.returncode != 0 and not run.timed_out:
        tail = run.stderr_tail.strip().splitlines()[-1:] if run.stderr_tail.strip() else []
        problems.append(f"{run.name}: exit code {run.returncode}" + (f" ({tail[0]})" if tail else ""))
    return problems


def crash_site(run: RunTrace) -> str | None:
    return first(run.of("exit"), "site")


def runs_verdict(original: RunTrace, converted: RunTrace) -> Verdict:
    problems = []
    for run in (original, converted):
        if run.timed_out:
            problems.append(f"{run.name}: ran past the timeout")
        problems.extend(crash_problems(run))
    site = crash_site(converted) or crash_site(original)
    return verdict("runs", "both one-process runs finish", problems, "original and converted exit 0", site)


def losses_verdict(original: RunTrace, converted: RunTrace) -> Verdict:
    before = [record.get("value") for record in original.of("loss", 0)]
    after = [record.get("value") for record in converted.of("loss", 0)]
    problems = []
    if len(before) != len(after):
        problems.append(f"{len(after)} backward passes in the converted run, {len(before)} in the original")
    for index, (old, new) in enumerate(zip(before, after)):
        if not same_loss(old, new):
            problems.append(f"loss {index}: {new} converted, {old} original (the first that differs)")
            break
    return verdict("losses", "same loss at every step", problems, f"{len(before)} losses equal")


def same_loss(old: Any, new: Any) -> bool:
    if old is None or new is None:
        return old is new
    if math.isnan(old) and math.isnan(new):
        return True
    return math.isclose(old, new, rel_tol=LOSS_REL_TOL, abs_tol=1e-12)


#: A line the conversion prints on purpose: the out-of-memory retry announcing its batch size.
_ADDED_BY_CONVERSION = re.compile(re.escape(RETRY_ANNOUNCEMENT).replace(re.escape("{}"), r"\d+") + r"\n?")


def printed_lines(run: RunTrace, rank: int, original: RunTrace | None = None) -> list[str]:
    """What ``rank`` of ``run`` printed; with ``original`` (``run`` is a conversion of it),
    without the lines the conversion adds on purpose that the original does not print."""
    texts = [record.get("text", "") for record in run.of("print", rank)]
    if original is None:
        return texts
    printed = {record.get("text", "") for record in original.of("print", 0)}
    return [text for text in texts if text in printed or not _ADDED_BY_CONVERSION.fullmatch(text)]


#: The first device of a kind, named with its index: on one process ``cuda:0`` is ``cuda`` (the
#: original's ``torch.device("cuda:0")``, the converted script's ``accelerator.device``).
_FIRST_DEVICE = re.compile(r"\b(cuda|xpu|npu|hpu|mps):0\b")


def one_process_line(line: str) -> str:
    """A line printed on one process, timings masked and the first device named without index."""
    return _FIRST_DEVICE.sub(r"\1", mask_timing(line))


def stdout_verdict(original: RunTrace, converted: RunTrace) -> Verdict:
    before = [one_process_line(text) for text in printed_lines(original, 0)]
    after = [one_process_line(text) for text in printed_lines(converted, 0, original)]
    problems = []
    for index in range(max(len(before), len(after))):
        old = before[index] if index < len(before) else None
        new = after[index] if index < len(after) else None
        if old != new:
            problems.append(f"line {index + 1}: original {old!r}, converted {new!r}")
    return verdict("stdout", "same printed lines (timings masked)", problems[:3], f"{len(before)} lines equal")


_DIGITS = re.compile(r"\d+")


def named_by_the_run(missing: Iterable[str], extra: Iterable[str]) -> dict[str, str]:
    """Files of one run paired with files of the other whose paths differ only in their numbers
    (a TensorBoard event file is named by its time, host and pid:
    ``events.out.tfevents.1796472955.vm.5331.0``): missing path → the other run's. Their bytes hold
    the same times, so only their presence compares."""
    by_pattern: dict[str, list[str]] = {}
    for path in sorted(extra):
        by_pattern.setdefault(_DIGITS.sub("#", path), []).append(path)
    pairs = {}
    for path in sorted(missing):
        candidates = by_pattern.get(_DIGITS.sub("#", path))
        if candidates:
            pairs[path] = candidates.pop(0)
    return pairs


def files_verdict(original: RunTrace, converted: RunTrace) -> Verdict:
    problems = []
    renamed = named_by_the_run(set(original.files) - set(converted.files), set(converted.files) - set(original.files))
    for path in sorted(set(original.files) | set(converted.files)):
        if path in renamed or path in renamed.values():
            continue
        old, new = original.files.get(path), converted.files.get(path)
        if old is None:
            problems.append(f"{path}: written by the converted run only")
        elif new is None:
            problems.append(f"{path}: written by the original, not by the converted run")
        elif old != new:
            problems.append(f"{path}: other bytes (sha256 {new[:12]} converted, {old[:12]} original)")
    return verdict("files", "same files with the same bytes", problems, f"{len(original.files)} files equal")


def parameters_verdict(original: RunTrace, converted: RunTrace) -> Verdict:
    before, after = original.of("step", 0), converted.of("step", 0)
    problems = []
    if len(before) != len(after):
        problems.append(f"{len(after)} optimizer steps in the converted run, {len(before)} in the original")
    elif before and before[-1].get("digest") != after[-1].get("digest"):
        problems.append(
            f"after the last step ({len(before)}): parameters differ "
            f"(norm {after[-1].get('norm')} converted, {before[-1].get('norm')} original)"
        )
    return verdict("parameters", "same parameters after the last step", problems, f"{len(before)} steps, same digest")


# N processes ------------------------------------------------------------------------------------


def n_process_verdicts(original: RunTrace, multi: RunTrace, nproc: int) -> list[Verdict]:
    """The converted script on ``nproc`` processes shares the work of the original."""
    verdicts = [
        hang_verdict(multi),
        crash_verdict(multi, nproc),
        sync_verdict(multi),
        prints_verdict(original, multi),
        files_once_verdict(original, multi),
        reads_verdict(original, multi),
        evaluation_verdict(original, multi),
        device_verdict(multi),
    ]
    explain_other_passes(verdicts, original, multi)
    return verdicts


#: What a run on N processes of a script the converter left as written is judged by: each rank
#: runs the whole script (or the script's own distribution), so sharing the work is not expected.
AS_WRITTEN_JUDGED = ("no-hang", "no-crash")


def as_written_verdicts(verdicts: Sequence[Verdict], reason: str, nproc: int) -> list[Verdict]:
    """The N-process verdicts of a program the converter deliberately left as written (``reason``,
    its report): whether every rank ends and exits 0, and the ``left-as-written`` verdict saying
    why the rest (in-sync, prints-once, files-once...) is not judged."""
    kept = [item for item in verdicts if item.key in AS_WRITTEN_JUDGED]
    not_judged = [item.key for item in verdicts if item.key not in AS_WRITTEN_JUDGED]
    evidence = (
        f"the {nproc}-process run is copies by design: each rank runs the script as written "
        f"(or its own distribution); not judged: {', '.join(not_judged)}"
    )
    return [*kept, Verdict("left-as-written", f"left as written: {reason}", True, [evidence])]


def training_passes(run: RunTrace, rank: int = 0) -> int:
    """Complete passes over a loader with gradients on (the epochs, roughly)."""
    return sum(1 for record in run.of("pass", rank) if is_training(record) and record.get("complete"))


#: The verdicts that count what is done per pass over the training data.
PER_PASS_VERDICTS = ("prints-once", "files-once", "evaluation-counts")


def explain_other_passes(verdicts: Sequence[Verdict], original: RunTrace, multi: RunTrace) -> None:
    """When the N-process run ended normally after another number of training passes than the
    original (a stop decided from the losses: early stopping, a target loss), say so in each
    failed verdict that counts what is done per pass: that is why its counts differ."""
    before, after = training_passes(original), training_passes(multi)
    ended = not multi.timed_out and all(code == 0 for code in exit_codes(multi))
    if not (before and after and before != after and ended):
        return
    why = (
        f"the original made {before} passes over its training data, rank 0 of the {multi.name} {after}: "
        "the script decides from its losses how long to train (early stopping, a target loss), and each "
        "step on N processes averages N batches, so the losses, and what is done per pass, differ; verify "
        "with a fixed number of epochs, or convert with --split-batches to keep the original's steps"
    )
    for item in verdicts:
        if item.key in PER_PASS_VERDICTS and not item.holds:
            item.evidence.append(why)


def exit_codes(run: RunTrace) -> list[int | None]:
    codes = []
    for rank in run.ranks():
        exits = run.of("exit", rank)
        codes.append(exits[-1].get("code") if exits else None)
    return codes


def hang_verdict(multi: RunTrace) -> Verdict:
    problems = []
    if multi.timed_out:
        problems.append(f"{multi.name}: ran past the timeout and was stopped")
        for rank in sorted(multi.stacks):
            problems.append(
                f"rank {rank} stack (most recent call first):\n" + "\n".join(user_stack(multi.stacks[rank]))
            )
        if not multi.stacks:
            problems.append("no stack was dumped (the processes did not answer SIGUSR1)")
    return verdict("no-hang", "no hang", problems, "every rank finished in time", stack_site(multi))


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_LIBRARY = ("/site-packages/", "/dist-packages/", "/accel_convert/", "/lib/python3")
#: Frames shown per rank: the innermost (where it waits) and the user's own.
STACK_FRAMES_SHOWN = 10


def is_user_frame(line: str) -> bool:
    match = _FRAME.search(line)
    return match is not None and not any(part in match.group(1) for part in _LIBRARY)


def user_stack(dump: str) -> list[str]:
    """One rank's faulthandler dump cut to what tells where it waits: of each thread with a frame
    in the user's code (else the first thread), the innermost frame and the user's frames."""
    threads: list[list[str]] = []
    for line in dump.splitlines():
        if "(most recent call first)" in line or not threads:
            threads.append([])
        if _FRAME.search(line):
            threads[-1].append(line.strip())
    chosen = [frames for frames in threads if any(map(is_user_frame, frames))] or threads[:1]
    shown = []
    for frames in chosen:
        shown += [frame for index, frame in enumerate(frames) if index == 0 or is_user_frame(frame)]
    return shown[:STACK_FRAMES_SHOWN]


def stack_site(multi: RunTrace) -> str | None:
    """The innermost ``File "...", line N`` of a user file in the first stack (faulthandler's
    format: the innermost frame first)."""
    for rank in sorted(multi.stacks):
        for line in user_stack(multi.stacks[rank]):
            match = _FRAME.search(line)
            if match is not None and is_user_frame(line):
                return f"{match.group(1)}:{match.group(2)}"
    return None


def crash_verdict(multi: RunTrace, nproc: int) -> Verdict:
    problems = [] if multi.timed_out else crash_problems(multi)
    started = len(multi.ranks())
    if started < nproc and not multi.timed_out:
        problems.append(f"{started} of {nproc} ranks started")
    return verdict("no-crash", "no crash", problems, f"{nproc} ranks exit 0", crash_site(multi))


def sync_verdict(multi: RunTrace) -> Verdict:
    """Every rank's parameters after each optimizer step: one digest per step index."""
    steps: dict[int, dict[int, Record]] = {}
    for rank in multi.ranks():
        for record in multi.of("step", rank):
            steps.setdefault(record.get("index", 0), {})[rank] = record
    problems = []
    counts = {rank: len(multi.of("step", rank)) for rank in multi.ranks()}
    if len(set(counts.values())) > 1:
        problems.append("optimizer steps per rank: " + ", ".join(f"rank {r}: {n}" for r, n in counts.items()))
    for index in sorted(steps):
        digests = {rank: record.get("digest") for rank, record in steps[index].items()}
        if len(set(digests.values())) > 1:
            norms = ", ".join(f"rank {rank}: {record.get('norm')}" for rank, record in steps[index].items())
            problems.append(f"after step {index}: parameters differ between ranks (norms {norms})")
            break
    return verdict("in-sync", "parameters identical on every rank after every step", problems, f"{len(steps)} steps")


def prints_verdict(original: RunTrace, multi: RunTrace) -> Verdict:
    """Each line (numbers masked) printed by one rank, as often as at most the original prints it,
    and every line of the original printed at least once. Lines of one shape printed by several
    ranks are right when the ranks share out the original's very lines (StarGAN's ``Saved ... into
    results/3-images.jpg`` per batch, each process printing its own batches'): every line of that
    shape, numbers and all, is the original's, printed by one rank."""
    original_lines = printed_lines(original, 0)
    expected = Counter(mask_numbers(text) for text in original_lines)
    exact_by_rank = {rank: printed_lines(multi, rank, original) for rank in multi.ranks()}
    by_rank = {rank: Counter(mask_numbers(text) for text in lines) for rank, lines in exact_by_rank.items()}
    union = sum(by_rank.values(), Counter())
    printed_exactly = _exact_lines_by_shape(text for lines in exact_by_rank.values() for text in lines)
    original_exactly = _exact_lines_by_shape(original_lines)
    problems = []
    for line in union:
        ranks = [rank for rank, lines in by_rank.items() if line in lines]
        if len(ranks) > 1 and printed_exactly[line] == original_exactly[line]:
            continue
        if len(ranks) > 1 and line.strip():
            problems.append(f"{line!r}: printed by ranks {', '.join(map(str, ranks))}")
        elif union[line] > expected.get(line, 0) > 0:
            problems.append(f"{line!r}: printed {union[line]} times, {expected[line]} by the original")
    problems.extend(f"{line!r}: printed by the original, by no rank" for line in expected if line not in union)
    return verdict("prints-once", "each line the original prints printed once", problems, f"{len(union)} lines")


def _exact_lines_by_shape(lines: Iterable[str]) -> defaultdict[str, Counter[str]]:
    """Lines, numbers and all, counted under their shape (numbers masked)."""
    by_shape: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for text in lines:
        by_shape[mask_numbers(text)][text] += 1
    return by_shape


def written_paths(run: RunTrace) -> dict[str, set[int]]:
    """Each file the run left in its working folder, new or changed → the ranks whose write
    records name it. A file written and then renamed or removed (an atomic save's temporary file)
    is not an output."""
    writers: dict[str, set[int]] = {path: set() for path in run.files}
    for rank in run.ranks():
        for record in run.of("write", rank):
            if record.get("path") in writers:
                writers[record["path"]].add(rank)
    return writers


def steps_before_training_writes(run: RunTrace) -> dict[str, int]:
    """Files the main process wrote in the middle of training (an optimizer step before and after
    the write) → how many steps it had taken when it wrote each the last time."""
    taken = 0
    pending: dict[str, int] = {}
    written: dict[str, int] = {}
    for record in run.records.get(0, []):
        if record.get("kind") == "step":
            taken += 1
            written.update(pending)
            pending = {}
        elif record.get("kind") == "write" and taken:
            pending[record.get("path", "")] = taken
    return written


def beyond_the_steps_taken(original: RunTrace, steps: int, missing: list[str]) -> list[str]:
    """The missing files the original wrote during training after more optimizer steps than the
    N-process run takes in all (``steps``, its main process's): a step cadence (``if step % 100 ==
    0: save_image(...)``) that N processes reach less often, each step taking N batches
    (``--split-batches`` keeps the original's steps). What is written after training, or at a step
    the run reached, stays missing."""
    during = steps_before_training_writes(original)
    return [path for path in missing if during.get(path, 0) > steps]


def files_once_verdict(original: RunTrace, multi: RunTrace) -> Verdict:
    before, after = written_paths(original), written_paths(multi)
    missing = sorted(set(before) - set(after))
    extra = sorted(set(after) - set(before))
    renamed = named_by_the_run(missing, extra)
    missing = [path for path in missing if path not in renamed]
    extra = [path for path in extra if path not in renamed.values()]
    problems = []
    steps = len(multi.of("step", 0))
    cadence = beyond_the_steps_taken(original, steps, missing)
    missing = [path for path in missing if path not in cadence]
    if missing:
        problems.append(
            f"{len(before) - len(missing)} of the original's {len(before)} files written; missing: {missing[:5]}"
        )
    if extra:
        problems.append(f"written by the {multi.name}, not by the original: {extra[:5]}")
    for path, ranks in sorted(after.items()):
        if len(ranks) > 1:
            problems.append(f"{path}: written by ranks {', '.join(map(str, sorted(ranks)))} (one should)")
    found = verdict("files-once", "every file the original writes, written once", problems, f"{len(before)} files")
    if found.holds and cadence:
        found.evidence = [
            f"{len(before)} files; {len(cadence)} written during training after more steps than the "
            f"{multi.name} takes ({steps}: each step takes a batch on every process): {cadence[:5]}"
        ]
    return found


def reads_verdict(original: RunTrace, multi: RunTrace) -> Verdict:
    """A rank reads a file the run writes only once complete: it exists, and its bytes are those
    of a finished write of that path."""
    completed: dict[str, set[str]] = {}
    for record in multi.of("write"):
        completed.setdefault(record.get("path", ""), set()).add(record.get("sha256", ""))
    existed = {record.get("path") for record in original.of("read") if record.get("exists")}
    problems, site = [], None
    for record in multi.of("read"):
        path = record.get("path", "")
        if not record.get("exists") and (path in completed or path in existed):
            problems.append(f"rank {record.get('rank')} read {path} before it was written ({record.get('via')})")
        elif record.get("exists") and path in completed and record.get("sha256") not in completed[path]:
            problems.append(f"rank {record.get('rank')} read {path} before its write was complete")
        else:
            continue
        site = site or first(multi.of("exit", record.get("rank")), "site")
    return verdict("reads-complete", "no rank reads a file before it is complete", problems, "reads checked", site)


def is_training(record: Record) -> bool:
    """A pass over a loader with gradients on during which a backward or an optimizer step ran
    (a trace without ``trained``: with gradients on). Any other pass is an evaluation: gradients
    off, or on with ``torch.no_grad()`` entered inside the loop."""
    return bool(record.get("grad")) and record.get("trained", True) is not False


def evaluation_passes(run: RunTrace, rank: int) -> list[Record]:
    return [record for record in run.of("pass", rank) if not is_training(record)]


def mid_pass_events(run: RunTrace, rank: int = 0) -> list[tuple[Record, int]]:
    """The evaluation passes and file writes of ``rank`` made in the middle of a pass over its
    training data (after an optimizer step of a training pass not yet ended: a step cadence,
    ``if step % 100 == 0``), each with the optimizer steps taken before it. An evaluation right
    after a training pass ended (once per epoch) is not one."""
    taken = in_pass = 0
    events = []
    for record in run.records.get(rank, []):
        kind = record.get("kind")
        if kind == "step":
            taken, in_pass = taken + 1, in_pass + 1
        elif kind == "pass" and is_training(record):
            in_pass = 0
        elif in_pass and (kind == "write" or kind == "pass"):
            events.append((record, taken))
    return events


def evaluation_passes_due(original: RunTrace, steps: int) -> list[Record]:
    """The original's evaluation passes less those of a step cadence made after more optimizer
    steps than ``steps`` (what a rank of the N-process run took: each of its steps takes a batch on
    every process, so it reaches a step cadence less often)."""
    beyond = {id(record) for record, taken in mid_pass_events(original) if taken > steps}
    return [record for record in evaluation_passes(original, 0) if id(record) not in beyond]


@dataclass(frozen=True)
class UnreachedCadence:
    """The N-process run took fewer optimizer steps than the step at which the original first
    evaluated or wrote a file in the middle of a training pass: what the original does there (and
    what the script does after it, a variable it set) never ran on N processes. The budget, not
    the conversion, can explain a failure then."""

    #: Optimizer steps the original had taken at its first such evaluation or write.
    step: int
    #: What it did there: ``evaluated (loader at train.py:40)``, ``wrote best.pt``.
    what: str
    #: Optimizer steps the N-process run's main process took in all.
    taken: int
    #: The budget (``--samples``) cut the training data: a larger one gives every rank more steps.
    budget_cut: bool = True

    def explanation(self, nproc: int) -> str:
        found = (
            f"the original {self.what} after optimizer step {self.step}, in the middle of a pass over its "
            f"training data; each rank of the {nproc}-process run took {self.taken} steps in all (each step "
            f"takes a batch on every process), so that step cadence was never reached there"
        )
        if self.budget_cut:
            return f"{found}: the budget can explain this, not the conversion"
        return f"{found}, with the whole training data (the budget cut none of it): so it is on {nproc} processes"


def unreached_cadence(original: RunTrace, multi: RunTrace, budget: int) -> UnreachedCadence | None:
    """The original's first mid-pass evaluation or write at a step the N-process run never
    reached, when that run's main process went through its share of the training data (a training
    pass ended) with at least one step: its data ended its steps, not an early failure. ``budget``:
    the samples every loader's dataset was cut to."""
    taken = len(multi.of("step", 0))
    trained = any(is_training(record) and record.get("complete") for record in multi.of("pass", 0))
    if not taken or not trained:
        return None
    for record, step in mid_pass_events(original):
        if step > taken:
            what = f"wrote {record.get('path')}" if record.get("kind") == "write" else "evaluated"
            if record.get("kind") == "pass" and record.get("loader"):
                what += f" (the loader made at {record.get('loader')})"
            return UnreachedCadence(step, what, taken, cut_by_budget(original, budget))
    return None


def cut_by_budget(original: RunTrace, budget: int) -> bool:
    """Whether the original's first training pass was cut by the budget: it yielded so many
    samples that one batch more would have passed the budget (a smaller dataset is whole)."""
    in_pass = 0
    for record in original.records.get(0, []):
        if record.get("kind") == "step":
            in_pass += 1
        elif record.get("kind") == "pass" and is_training(record) and record.get("complete"):
            samples = int(record.get("samples") or 0)
            return samples + samples / max(in_pass, 1) > budget
    return False


def explain_unreached_cadence(verdicts: Sequence[Verdict], cadence: UnreachedCadence, nproc: int, advice: str) -> None:
    """Add to each failed verdict why the budget can explain it, and what to do."""
    for item in verdicts:
        if not item.holds:
            item.evidence.append(f"{cadence.explanation(nproc)}: {advice}")


def evaluation_verdict(original: RunTrace, multi: RunTrace) -> Verdict:
    """The i-th evaluation pass of each rank counts (gathered, else its own share) what the
    original's i-th counted; a pass whose ranks split the batches without repeating any
    (``join_uneven_inputs(..., even_batches=False)``: each process writes its own batches' files)
    and gathers nothing counts it with the other ranks' passes. Python numbers handed to a gather
    are flagged (one per process, not per sample)."""
    problems: list[str] = []
    #: Evaluation index → (the original's count, the ranks' counts together) of the uneven passes.
    split: dict[int, tuple[object, int]] = {}
    for rank in multi.ranks():
        expected = evaluation_passes_due(original, len(multi.of("step", rank)))
        passes = evaluation_passes(multi, rank)
        for index, (old, new) in enumerate(zip(expected, passes)):
            if new.get("uneven") and new.get("gathered") is None:
                _, together = split.get(index, (None, 0))
                split[index] = (old.get("samples"), together + int(new.get("samples") or 0))
                continue
            counted = new.get("gathered") if new.get("gathered") is not None else new.get("samples")
            if counted != old.get("samples"):
                how = "gathered" if new.get("gathered") is not None else "its own share, nothing gathered"
                problems.append(
                    f"rank {rank}, evaluation {index} ({new.get('loader')}): counts {counted} samples ({how}), "
                    f"the original {old.get('samples')}"
                )
            python_values = sorted(
                {name for name in new.get("gather_inputs") or () if name in ("int", "float", "bool")}
            )
            if python_values:
                problems.append(
                    f"rank {rank}, evaluation {index} ({new.get('loader')}): a gather of a Python "
                    f"{'/'.join(python_values)} (one value per process, not per sample)"
                )
        if len(passes) != len(expected):
            problems.append(f"rank {rank}: {len(passes)} evaluation passes, the original {len(expected)}")
            if len(expected) < len(evaluation_passes(original, 0)):
                problems[-1] += f" within the {len(multi.of('step', rank))} optimizer steps this rank took"
    for index, (wanted, together) in sorted(split.items()):
        if together != wanted:
            problems.append(
                f"evaluation {index}: the ranks count {together} samples together (each its own batches), "
                f"the original {wanted}"
            )
    site = first(evaluation_passes(multi, 0), "loader") if problems else None
    return verdict(
        "evaluation-counts",
        "every evaluation counts what one process counts",
        problems,
        f"{len(evaluation_passes(original, 0))} passes",
        site,
    )


def device_verdict(multi: RunTrace) -> Verdict:
    problems, site = [], None
    for rank in multi.ranks():
        starts = multi.of("start", rank)
        local_rank = starts[0].get("local_rank", rank) if starts else rank
        for record in multi.of("device", rank):
            requested = str(record.get("requested", ""))
            index = cuda_index(requested)
            if index is not None and index != local_rank:
                problems.append(
                    f"rank {rank} (local rank {local_rank}) put a {record.get('what')} on {requested} "
                    f"at {record.get('site')}"
                )
                site = site or record.get("site")
    return verdict("own-device", "every rank uses its own device", problems, "devices checked", site)


def cuda_index(requested: str) -> int | None:
    match = re.fullmatch(r"cuda(?::(\d+))?", requested)
    if match is None:
        return None
    return int(match.group(1) or 0)


# Findings ---------------------------------------------------------------------------------------


def attach_findings(verdicts: Sequence[Verdict], findings: Sequence[dict[str, Any]]) -> None:
    """Give each failed verdict the conversion's warnings that can explain it."""
    for item in verdicts:
        if item.holds:
            continue
        codes = RELATED_CODES.get(item.key, ())
        item.findings = [finding for finding in findings if finding.get("code") in codes]
