"""What the other modules of a program tell the analysis of one module (see
:mod:`codemods.engine.program`).

A script converted alone learns every role from its own code. A module of a program (the entry
script, or ``engine.py`` that it imports) also gets *seeds*: facts about the names that cross
module boundaries, carried as names like every other fact:

* roles of parameters that callers in other modules fill (``model`` of
  ``train_one_epoch(model, ...)`` is a model there, and arrives prepared);
* imported functions, by absolute qualified name (``engine.train_one_epoch``), that return
  loaders, loop over loaders, run a backward, or now take the accelerator as a parameter;
* whether the module is a library: the entry script creates the one accelerator and passes it
  down; a library never creates one.

The providers of :mod:`codemods.model.program` (and ``library_home`` in
:mod:`codemods.model.home`) join the seeds to the analysis's own observations. Without seeds
(``None``) the analysis is the single-file one, unchanged.
"""

from __future__ import annotations

from accel_convert.records import record

#: The role sets a parameter can be seeded into: the ScriptFacts fields of the same name.
ROLES = ("models", "optimizers", "train_loaders", "schedulers", "device_names", "cuda_flags")


@record(frozen=True)
class ProgramSeeds:
    """Names one module learns from the rest of its program (every field a plain name or a
    qualified name, never a node)."""

    #: The module is imported by the entry script: the accelerator comes in as a parameter.
    library: bool = False
    #: False where no module of the program trains on its own (``ScriptFacts.trains_here``: a
    #: saliency script importing the class that computes the map): what a library is handed is
    #: not trained, so its backward stays plain (``model.loops._steps_something``).
    program_trains: bool = True
    #: Role (a ScriptFacts field, see ROLES) → parameter names (file-wide, as facts are) that
    #: callers in other modules fill with an object of that role.
    parameter_roles: tuple[tuple[str, frozenset[str]], ...] = ()
    #: Parameters that receive objects already passed through ``accelerator.prepare``.
    prepared: frozenset[str] = frozenset()
    #: Names this module passes to a parameter that holds a trained model in another module's
    #: function or class (``Trainer(model, loaders, cfg)`` whose ``__init__`` builds the
    #: optimizer over ``self.model``): models here too, so they are prepared where they are built,
    #: as in a single script.
    models_handed_over: frozenset[str] = frozenset()
    #: Library only: its module-level functions called only from code that holds the accelerator.
    accelerator_reaches: frozenset[str] = frozenset()
    #: Imported functions (absolute qualified names) that return data loaders.
    loader_factories: frozenset[str] = frozenset()
    #: Imported loader factories (absolute qualified names) returning a tuple of loaders of
    #: known length, with that length (``loaders = data.get_loaders(...)`` holds that many).
    loader_tuple_factories: tuple[tuple[str, int], ...] = ()
    #: Imported loader factories (absolute qualified names) → where the loaders are in what
    #: they return (``facts.loader_positions``): a call unpacked binds loaders at those places only.
    loader_positions: tuple[tuple[str, tuple[tuple[int, ...] | None, tuple[int, ...]]], ...] = ()
    #: Imported functions that loop over a loader (directly or through their calls).
    looping_functions: frozenset[str] = frozenset()
    #: Imported functions that run a backward (directly or through their calls).
    backward_functions: frozenset[str] = frozenset()
    #: Imported functions (and classes) that draw from a global generator before any seed,
    #: directly or through their calls (a config helper drawing the learning rate).
    drawing_functions: frozenset[str] = frozenset()
    #: Imported functions, classes and methods (qualified) whose call downloads a data set
    #: (``data.get_dataset``, ``data.Wrapped``, ``data.Source.get``): see ``facts.download_calls``.
    download_callables: frozenset[str] = frozenset()
    #: This module's functions and classes that other modules of the program call → whether every
    #: such call is made where each process does its own work (``transform(image)`` in a dataset's
    #: ``__getitem__``): what they draw is per process on purpose there (an augmentation).
    called_from_elsewhere: tuple[tuple[str, bool], ...] = ()
    #: This module's functions and methods (``"Trainer.make_dir"``) that another module of the
    #: program calls where some rank may not go (``if not os.path.isdir(d): utils.mkdir_p(d)``):
    #: nothing inside them is reached by every rank, so no barrier goes there
    #: (:attr:`codemods.model.locality.Locality.called_on_some_ranks`).
    called_on_some_ranks: frozenset[str] = frozenset()
    #: Parameters (file-wide names) that callers in other modules fill with a GPU index (``gpu_id=0``,
    #: ``args.gpu`` of an ``int`` option): the same GPU on every process where a call takes them as
    #: its device (``model.to(gpu_id)``, ``x.to(self.gpu_id)``).
    gpu_index_parameters: frozenset[str] = frozenset()
    #: Program-wide: functions and classes (qualified) with such a parameter that a call there
    #: takes as its device: their module follows the index to those calls, so the caller does not
    #: report it passed on (ACC924).
    gpu_index_callees: frozenset[str] = frozenset()
    #: Names (as this module reads them) imported from another module of the program whose
    #: module-level code binds them to a fixed GPU: ``cfg["gpu"]`` of ``from config import cfg``,
    #: ``config.cfg["gpu"]`` of ``import config``, where ``config.py`` binds ``cfg = {"gpu": 0}``.
    imported_gpu_indices: frozenset[str] = frozenset()
    #: Functions of the other modules (qualified) writing a checkpoint to the path one of their
    #: parameters holds, with its position and name (``utils.save_checkpoint``, ``path``): a call
    #: of one writes that file (on the main process once converted).
    path_writers: tuple[tuple[str, int, str], ...] = ()
    #: The same for functions reading one where no barrier may go before the read.
    path_readers: tuple[tuple[str, int, str], ...] = ()
    #: Functions of the other modules (qualified) returning a file they open for writing
    #: (``def open_log(path): return open(path, "w")``), with its mode: a call of one here opens
    #: that file (``codemods.model.file_flow.opened_handle_mode``).
    handle_openers: tuple[tuple[str, str], ...] = ()
    #: This module's handle openers (a function, or ``Class.method``) every module calling them keeps
    #: the file they open for writing alone: they open it on the main process only (``os.devnull``
    #: on the others; ``codemods.model.file_flow.kept_handles``).
    opened_on_main_process: frozenset[str] = frozenset()
    #: Functions of the other modules (qualified) whose evaluation over the loader one of their
    #: parameters holds writes a file per batch (position, name): a loader built here and passed
    #: there stays unprepared, so every file is written.
    per_batch_file_writers: tuple[tuple[str, int, str], ...] = ()
    #: Parameters (file-wide names) that callers in other modules fill with a loader they keep
    #: unprepared for such an evaluation: every batch arrives on every process, nothing to gather.
    unsharded_parameters: frozenset[str] = frozenset()
    #: (function or class of this module, parameter) that every call from another module fills
    #: with a model built in the call (``Trainer(config, Regressor(), loader)``): no caller holds
    #: it by a name to prepare, so a training class prepares the attribute keeping it.
    built_in_every_call: frozenset[tuple[str, str]] = frozenset()
    #: This module's functions that other modules of the program call → whether every such call
    #: is made evaluating (``compute_accuracy(model, loader)`` called under
    #: ``torch.set_grad_enabled(False)`` in the training script): their loops evaluate then.
    evaluated_from_elsewhere: tuple[tuple[str, bool], ...] = ()
    #: This module's functions and methods (``"DetectorTrainer.train_step"``) that other modules
    #: call only inside their training loops over a loader (``trainer.train_step(x, y)`` for each
    #: batch of the entry's ``train_loader``): what they train on are those loaders' batches.
    fed_from_elsewhere: frozenset[str] = frozenset()
    #: Imported functions that take the accelerator once converted → where the parameter sits
    #: among the positional ones (None: keyword-only).
    accelerator_parameters: tuple[tuple[str, int | None], ...] = ()
    #: Those of them whose accelerator parameter comes after every positional one (or is
    #: keyword-only): a value of one carries it, ``functools.partial(f, accelerator=accelerator)``
    #: (a positional argument of the call out of sight cannot fill it too).
    accelerator_bindable: frozenset[str] = frozenset()
    #: Another module of the program saves (``torch.save``, or ``accelerator.save`` in a module
    #: converted before this one): this module's ``torch.load`` lines wait for every rank first,
    #: as in a script that saves.
    saved_elsewhere: bool = False
    #: This module's classes whose instances code elsewhere in the program hands a prepared model
    #: (``early_stopping(val_loss, model)`` with ``early_stopping = EarlyStopping(...)``): what
    #: their methods save of it is reported (ACC914), since no accelerator reaches them.
    classes_given_models: frozenset[str] = frozenset()
    #: This module's classes that training classes of other modules derive from (pytorch-template's
    #: ``BaseTrainer`` in ``base/base_trainer.py``), never constructed anywhere in the program and
    #: with no subclass that is not a training class: their methods read ``self.accelerator``.
    training_bases: frozenset[str] = frozenset()
    #: This module's classes deriving from a class of another module whose methods train (run a
    #: backward or loop over a loader): training classes even when their own methods only define
    #: a step, and they keep the accelerator for the base's methods.
    training_base_subclasses: frozenset[str] = frozenset()
    #: This module's classes without an ``__init__`` of their own whose inherited one (of a
    #: training class, here or in another module) receives and keeps the accelerator: their
    #: methods read ``self.accelerator``.
    inherited_accelerator: frozenset[str] = frozenset()
    #: Names this module passes to a function or class of another module that steps them as a
    #: scheduler once per epoch (``Trainer(..., lr_scheduler=lr_scheduler)`` whose epoch loop
    #: calls ``self.lr_scheduler.step()``): not prepared, as in a single script.
    per_epoch_schedulers: frozenset[str] = frozenset()
    #: Names this module hands to another module's function or class that steps them
    #: (``Trainer(model, optimizer, ...)`` whose epoch runs ``self.optimizer.step()``), and
    #: attributes a subclass in another module steps: stepped objects here too (see
    #: ``ScriptFacts.stepped_objects``).
    stepped_elsewhere: frozenset[str] = frozenset()
    #: Names bound by relative imports (``from .utils import save``) → absolute qualified name.
    relative_imports: tuple[tuple[str, str], ...] = ()
    #: Names a ``from <program module> import *`` binds → absolute qualified name.
    star_imports: tuple[tuple[str, str], ...] = ()
    #: Names a ``from <program module> import *`` binds to what that module imports from
    #: libraries (``sys``, ``np``) → their qualified names (``sys``, ``numpy``).
    star_library_imports: tuple[tuple[str, str], ...] = ()
    #: Program-wide: a qualified name a function is re-exported under → where it is defined
    #: (``mylib.train`` → ``mylib.engine.train``).
    aliases: tuple[tuple[str, str], ...] = ()
    #: Program-wide: classes (qualified) whose ``forward`` returns Python values it made, with
    #: their positions among the outputs (``syntax.forward_python_outputs``): such outputs of a
    #: model built in another module cannot be gathered as tensors.
    python_outputs: tuple[tuple[str, frozenset[int]], ...] = ()
    #: Program-wide: functions and class methods (qualified) returning rows joined from the
    #: samples' own rows, with their positions among the outputs (``syntax.concatenated_rows``): a
    #: loader collating with one (``collate_fn=dataset.collate_fn``) has batch values whose rows are
    #: not samples.
    row_collates: tuple[tuple[str, frozenset[int]], ...] = ()
    #: Program-wide: classes (qualified) defining a ``backward`` method (a weight penalty adding
    #: to the gradients by hand, an autograd helper object): the ``backward()`` of an instance
    #: built in another module is that method, not a loss tensor's.
    backward_helper_classes: frozenset[str] = frozenset()
    #: Program-wide: classes (qualified) keeping a file open for writing (a CSV logger of
    #: ``utils/logger.py``): an instance built in another module is created on the main process only.
    file_logger_classes: frozenset[str] = frozenset()
    #: Parameters (file-wide names) that callers in other modules fill with a file logger (one
    #: built in the call, ``fit(loader, CSVLogger("log.csv"))``, or a name bound to one): created on
    #: the main process only there (None on the others), so they are trackers here, their calls
    #: run on the main process only.
    logger_parameters: frozenset[str] = frozenset()
    #: Program-wide: functions and classes (qualified; a class for its ``__init__`` and its
    #: methods) that a call elsewhere hands a file logger built in the call: such a call builds it
    #: on the main process only, as a call of this module's own function would.
    logger_callees: frozenset[str] = frozenset()
    #: Program-wide: classes (qualified) deriving from a ``torch.nn`` module, directly or through
    #: other classes of the program (``nets.mlp.Net``): an instance another module builds is a
    #: model there as one of its own classes would be (``final = Net()`` built after training).
    model_classes: frozenset[str] = frozenset()
    #: Program-wide: functions and static or class methods (qualified: ``models.build_model``,
    #: ``models.Net.create``) returning a new model of those classes, directly, through a local
    #: name, or through another such function: a call of one elsewhere builds a model there as
    #: a construction of the class would (``model = build_model(10)``).
    model_factories: frozenset[str] = frozenset()
    #: Program-wide: methods (qualified: ``model.Detector.get_optimizer``) returning a new
    #: optimizer (``facts.optimizer_methods``): those of model classes build an optimizer over
    #: their receiver where another module calls them (``self.detector.get_optimizer()``).
    optimizer_methods: frozenset[str] = frozenset()
    #: Program-wide: parts of model classes (qualified: ``model.FasterRCNN.extractor``) their
    #: ``forward`` runs (``facts.model_parts``): called on a model from another module
    #: (``self.faster_rcnn.extractor(imgs)`` in a trainer), they run it outside its forward.
    model_parts: frozenset[str] = frozenset()
    #: Program-wide: methods of model classes (qualified: ``model.FasterRCNN.predict``) that
    #: evaluate (``facts.evaluating_methods``): a loop over a loader calling one on a model
    #: (``faster_rcnn.predict(imgs, sizes)``) evaluates.
    evaluating_methods: frozenset[str] = frozenset()
    #: Program-wide: functions (qualified: ``test._create_validation_data_loader``) returning a
    #: loader whose ``collate_fn`` joins the samples' own rows (``facts.joined_rows_factories``),
    #: with those values' positions in a batch: what a call of one returns elsewhere is such a
    #: loader there.
    joined_rows_factories: tuple[tuple[str, frozenset[int]], ...] = ()
    #: Program-wide: classes (qualified) deriving from ``torch.utils.data.DataLoader``, directly or
    #: through other classes of the program (pytorch-template's ``MnistDataLoader`` over
    #: ``BaseDataLoader``): building one builds a loader, prepared as a ``DataLoader`` is.
    loader_classes: frozenset[str] = frozenset()
    #: Classes (qualified) of the other modules whose methods run a backward or loop over a
    #: loader (a ``Trainer`` of ``trainer.py``): a class here whose method builds one (an
    #: ``Experiment`` whose ``run()`` does ``trainer = Trainer(self.model, ...)``) is a training
    #: class too, handing the accelerator on.
    training_classes_elsewhere: frozenset[str] = frozenset()
    #: Program-wide: training bundles (qualified class, see ``ScriptFacts.bundle_classes``) → their
    #: (attribute, role) pairs: an instance another module builds (``exp = Experiment()``) and whose
    #: attributes it hands on (``train(exp.model, ...)``) has them prepared there.
    bundle_classes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    def roles(self) -> dict[str, frozenset[str]]:
        return dict(self.parameter_roles)

    def accelerator_parameter_index(self) -> dict[str, int | None]:
        return dict(self.accelerator_parameters)

    @property
    def imported_functions(self) -> frozenset[str]:
        """Every imported function the seeds say something about."""
        return (
            self.loader_factories
            | self.looping_functions
            | self.backward_functions
            | {name for name, _ in self.accelerator_parameters}
        )
