"""Every table of library names the converter recognises, in one place.

Rules and the analysis match calls by qualified name (``torch.cuda.amp.GradScaler`` however the
script imported it), against the tables below. Each table has exactly one definition, here
(``tests/codemods/test_torch_names.py`` checks that no other module defines one), so a name added
for one rule is seen by the analysis that decides whether the rule runs.
"""

from __future__ import annotations

DATA_LOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
#: Keywords of callables that run in other processes (a ``DataLoader``'s workers): what they
#: are handed is called there, where no accelerator is.
WORKER_CALLBACKS: dict[str, frozenset[str]] = dict.fromkeys(DATA_LOADERS, frozenset({"collate_fn", "worker_init_fn"}))
#: Functions that average a list: given a list of per-batch values, a mean over batches.
AVERAGING_FUNCTIONS = frozenset(
    {"numpy.mean", "numpy.average", "numpy.nanmean", "statistics.mean", "statistics.fmean", "torch.mean"}
)
#: Base classes of datasets read as a stream (no index, and a length only if the class gives one).
ITERABLE_DATASETS = frozenset({"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"})
ACCELERATORS = frozenset(
    {
        "accelerate.Accelerator",
        "accelerate.accelerator.Accelerator",
        "accel_convert.runtime.Accelerator",
        "accel_convert.runtime.accelerator.Accelerator",
    }
)
#: ``torch.cuda.is_available``: a value deciding on it chooses between a GPU and the CPU.
CUDA_AVAILABILITY = "torch.cuda.is_available"
#: Questions about the machine's devices, with no side effect (what ``use_cuda = ...`` flags ask).
DEVICE_AVAILABILITY = frozenset(
    {
        "torch.cuda.is_available",
        "torch.backends.mps.is_available",
        "torch.accelerator.is_available",
        "torch.xpu.is_available",
        "torch.cuda.device_count",
    }
)
NO_GRAD_CONTEXTS = frozenset(
    {
        "torch.no_grad",
        "torch.inference_mode",
        "torch.autograd.no_grad",
        "torch.autograd.grad_mode.no_grad",
        "torch.autograd.grad_mode.inference_mode",
    }
)
#: Context managers (and decorators) that turn gradients on or off by their argument:
#: ``torch.set_grad_enabled(False)`` evaluates.
GRAD_SWITCHES = frozenset(
    {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled"}
)
#: Methods that yield the batches of the loader given as their first argument, printing progress
#: as they go: torchvision's reference scripts (and DETR, DeiT, MAE after them) loop over
#: ``metric_logger.log_every(data_loader, print_freq, header)``.
LOADER_PASS_THROUGH_METHODS = frozenset({"log_every"})
PROGRESS_BARS = frozenset(
    {
        "tqdm.tqdm",
        "tqdm.auto.tqdm",
        "tqdm.notebook.tqdm",
        "tqdm.std.tqdm",
        "tqdm.rich.tqdm",
        "tqdm.trange",
        "tqdm.auto.trange",
        "tqdm.notebook.trange",
    }
)
#: Writes to the console besides ``print``: a progress line written by hand, a message printed
#: above tqdm's bars, a notebook's ``display(...)`` (kept when a notebook is exported to a
#: script), ``pprint``, rich's ``print``. Like ``print``, they run on the main process only.
#: ``notebook_launcher`` as a converted notebook imports it: it runs the function it is given in
#: forked workers, and the notebook's top level stays the kernel's one process.
NOTEBOOK_LAUNCHERS = frozenset(
    {
        "accelerate.notebook_launcher",
        "accelerate.launchers.notebook_launcher",
        "accel_convert.runtime.notebook_launcher",
        "accel_convert.runtime.notebook.notebook_launcher",
    }
)
CONSOLE_WRITES = frozenset(
    {
        "sys.stdout.write",
        "IPython.display.display",
        "IPython.core.display.display",
        "IPython.core.display_functions.display",
        "pprint.pprint",
        "rich.print",
        *(f"{bar}.write" for bar in PROGRESS_BARS if "trange" not in bar),
    }
)
GRAD_SCALERS = frozenset(
    {"torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.GradScaler", "torch.cpu.amp.GradScaler"}
)
AUTOCASTS = frozenset({"torch.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast", "torch.cpu.amp.autocast"})
#: Calls whose first parameter is a device *type*, a string, → that parameter's keyword:
#: ``torch.autocast("cuda")`` raises ``ValueError`` for a ``torch.device``, and ``GradScaler``
#: compares its ``device`` with ``"cuda"`` (a ``torch.device`` skips its CUDA check and fails
#: ``update(new_scale)``). ``device_type=`` is a device type in every call that takes it.
DEVICE_TYPE_PARAMETERS = {
    "torch.autocast": "device_type",
    "torch.amp.autocast": "device_type",
    "torch.get_autocast_dtype": "device_type",
    "torch.is_autocast_enabled": "device_type",
    "torch.amp.is_autocast_available": "device_type",
    "torch.amp.GradScaler": "device",
    "torch.GradScaler": "device",
}
DEVICE_TYPE_KEYWORD = "device_type"
#: Calls that make a device object.
DEVICE_CONSTRUCTORS = frozenset({"torch.device", "torch.accelerator.current_accelerator"})
#: The legacy typed CUDA constructors (``Tensor = torch.cuda.FloatTensor if cuda else ...`` of the
#: GAN tutorials): ``Tensor(n, m)`` allocates on the current GPU.
LEGACY_CUDA_TENSOR_TYPES = frozenset(
    f"torch.cuda.{kind}Tensor"
    for kind in ("Float", "Double", "Half", "BFloat16", "Byte", "Char", "Short", "Int", "Long", "Bool")
)
#: Tensor and module methods that move to a device: ``x.to(device)``, ``model.cuda()``, ``.cpu()``.
DEVICE_MOVE_METHODS = frozenset({"to", "cuda", "cpu"})
#: Module and tensor methods that return what they are called on, cast or switched to a mode:
#: ``model.eval()``, ``x.half()``, ``teacher.requires_grad_(False)``.
SELF_RETURNING_METHODS = frozenset({"train", "eval", "float", "double", "half", "requires_grad_"})
#: The device types a script compares its device string with (``device == "cuda"``).
DEVICE_TYPES = frozenset({"cuda", "cpu", "mps", "xpu"})
#: ``torch.nn.Parameter``: a tensor built as one is a parameter trained by hand (a temperature),
#: not an input an optimizer optimises (``model.roles``).
PARAMETER_CONSTRUCTORS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})

#: Qualified name of a clipping function → the accelerator's method that replaces it.
CLIPPERS = {
    "torch.nn.utils.clip_grad_norm_": "clip_grad_norm_",
    "torch.nn.utils.clip_grad_norm": "clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_norm_": "clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_norm": "clip_grad_norm_",
    "torch.nn.utils.clip_grad_value_": "clip_grad_value_",
    "torch.nn.utils.clip_grad.clip_grad_value_": "clip_grad_value_",
}

DATA_PARALLEL = frozenset(
    {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel"}
)
#: ``nn.parallel.data_parallel(module, inputs)``: DataParallel as a function call.
DATA_PARALLEL_FUNCTIONS = frozenset({"torch.nn.parallel.data_parallel"})
DISTRIBUTED_DATA_PARALLEL = frozenset(
    {"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"}
)
PROCESS_SPAWNERS = frozenset({"torch.multiprocessing.spawn"})
#: ``mp.Process(target=train)`` (Hogwild: workers sharing one model in memory).
WORKER_PROCESSES = frozenset({"torch.multiprocessing.Process", "multiprocessing.Process"})
PROCESS_GROUP_STARTS = frozenset({"torch.distributed.init_process_group"})
DISTRIBUTED_SAMPLERS = frozenset(
    {"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"}
)


def _feature(name: str, *tables: frozenset[str]) -> dict[str, str]:
    return {qualified: name for table in tables for qualified in table}


#: Qualified name → the feature it shows the script already has (``ScriptFacts.existing_features``).
FEATURES: dict[str, str] = {
    **_feature(
        "DataParallel", frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel"}), DATA_PARALLEL_FUNCTIONS
    ),
    **_feature("DistributedDataParallel", DISTRIBUTED_DATA_PARALLEL),
    **_feature("mp.spawn", PROCESS_SPAWNERS),
    **_feature("mp.Process", WORKER_PROCESSES),
    **_feature("init_process_group", PROCESS_GROUP_STARTS),
    **_feature("DistributedSampler", DISTRIBUTED_SAMPLERS),
    **_feature("GradScaler", GRAD_SCALERS),
    **_feature("autocast", AUTOCASTS),
}
#: Features of a script that distributes itself: it is reported (ACC903), never rewritten.
SELF_DISTRIBUTING = frozenset({"DistributedDataParallel", "mp.spawn", "mp.Process", "init_process_group"})


#: The optimizers transformers ships (its other capitalised names are models, configs, tokenizers).
TRANSFORMERS_OPTIMIZERS = frozenset({"AdamW", "Adafactor"})


def is_optimizer(qualified: str) -> bool:
    """``torch.optim.SGD``, ``transformers.AdamW``, ``bitsandbytes.optim.Adam8bit``..."""
    head, _, last = qualified.rpartition(".")
    # torch.optim also holds schedulers and SWA's AveragedModel (a model copy) and SWALR (a scheduler).
    if not last[:1].isupper() or "lr_scheduler" in head or head == "torch.optim.swa_utils":
        return False
    if head in {"transformers", "transformers.optimization"}:
        # transformers exports every model, config and tokenizer class at its top level too.
        return last in TRANSFORMERS_OPTIMIZERS
    return head == "torch.optim" or head.startswith(("torch.optim.", "bitsandbytes.optim"))


def is_model_constructor(qualified: str) -> bool:
    """``torchvision.models.resnet18``, ``torchvision.models.detection.fasterrcnn_resnet50_fpn``:
    a library function or class that builds a whole model."""
    return qualified.startswith("torchvision.models.")


def is_scheduler(qualified: str) -> bool:
    head, _, last = qualified.rpartition(".")
    if qualified == "torch.optim.swa_utils.SWALR":
        return True
    if head.startswith("torch.optim.lr_scheduler"):
        return last[:1].isupper()
    return head in {"transformers", "transformers.optimization"} and last.startswith("get_") and ("schedule" in last)


#: Calls that distribute the work by hand; the converter leaves them and reports them (ACC903).
HAND_DISTRIBUTION = (
    DISTRIBUTED_DATA_PARALLEL
    | PROCESS_SPAWNERS
    | WORKER_PROCESSES
    | PROCESS_GROUP_STARTS
    | DISTRIBUTED_SAMPLERS
    | DATA_PARALLEL_FUNCTIONS
)

#: Calls that make a folder or file private to the calling process (a new name each call).
#: Functions that create folders: on the main process, then every rank waits for them.
FOLDER_FUNCTIONS = frozenset({"os.makedirs", "os.mkdir"})
#: The network fetches that write what they fetch into a file themselves (``urlretrieve(url,
#: path)``): writes like any other, on the main process while the others wait (each process
#: fetching into the same file would rewrite it while another reads it).
FILE_FETCHES = frozenset(
    {
        "urllib.request.urlretrieve",
        "torch.hub.download_url_to_file",
        "wget.download",
        "gdown.download",
    }
)
#: Functions that write to or change the file system.
WRITING_FUNCTIONS = FILE_FETCHES | frozenset(
    {
        "torchvision.utils.save_image",
        "matplotlib.pyplot.savefig",
        "matplotlib.pyplot.imsave",
        "os.rename",
        "os.replace",
        "shutil.copy",
        "shutil.copy2",
        "shutil.copyfile",
        "shutil.move",
        "numpy.save",
        "numpy.savez",
        "numpy.savez_compressed",
        "numpy.savetxt",
        "torch.onnx.export",
        "torch.jit.save",
    }
)
#: Calls that fetch a file over the network: a function of the script making one is a download.
NETWORK_FETCHES = FILE_FETCHES | frozenset({"urllib.request.urlopen", "requests.get"})
#: ``requests``' exception classes (all derive from ``RequestException(IOError)``).
_REQUESTS_ERRORS = (
    "RequestException",
    "ConnectionError",
    "HTTPError",
    "Timeout",
    "ConnectTimeout",
    "ReadTimeout",
    "TooManyRedirects",
    "SSLError",
    "ProxyError",
    "ChunkedEncodingError",
    "ContentDecodingError",
    "RetryError",
    "InvalidURL",
    "InvalidSchema",
    "MissingSchema",
    "InvalidHeader",
    "InvalidJSONError",
    "JSONDecodeError",
    "URLRequired",
    "StreamConsumedError",
)
#: Exception classes of other libraries (and the standard library's modules) that subclass
#: ``OSError``, by qualified name: an ``except`` naming one catches an ``OSError`` (what a network
#: fetch, the downloads above, raises when the connection fails, times out or is refused).
#: ``requests``' classes (``class RequestException(IOError)``) by their own module and by the
#: names ``requests`` re-exports; ``urllib.error``'s, the ``socket``, ``ssl``, ``http.client`` and
#: ``shutil`` errors deriving from ``OSError`` (``socket.timeout`` is ``TimeoutError``).
LIBRARY_OS_ERRORS = frozenset(
    {
        # requests' names where they are defined and where ``requests`` re-exports them (a name
        # it does not re-export is never written, so listing it there too matches nothing).
        *(f"{module}.{name}" for module in ("requests.exceptions", "requests") for name in _REQUESTS_ERRORS),
        "urllib.error.URLError",
        "urllib.error.HTTPError",
        "urllib.error.ContentTooShortError",
        "socket.error",
        "socket.timeout",
        "socket.gaierror",
        "socket.herror",
        "ssl.SSLError",
        "ssl.SSLCertVerificationError",
        "ssl.SSLEOFError",
        "ssl.SSLZeroReturnError",
        "ssl.SSLSyscallError",
        "http.client.RemoteDisconnected",
        "shutil.Error",
        "shutil.SameFileError",
    }
)
#: Calls that trace or export a model: they must see the model itself, not its DDP wrapper.
MODEL_EXPORTS = frozenset({"torch.onnx.export", "torch.jit.trace", "torch.jit.script"})
#: Calls that copy the model they are given (exponential moving averages, weight averaging):
#: the copy lives where the model was at that moment.
MODEL_COPIES = frozenset(
    {
        "copy.deepcopy",
        "torch.optim.swa_utils.AveragedModel",
        "timm.utils.ModelEma",
        "timm.utils.ModelEmaV2",
        "timm.utils.ModelEmaV3",
        "timm.utils.model_ema.ModelEma",
        "timm.utils.model_ema.ModelEmaV2",
        "timm.utils.model_ema.ModelEmaV3",
    }
)
#: Experiment trackers' module-level calls: each would start a run, log or upload once per rank.
TRACKER_FUNCTIONS = frozenset(
    {
        "wandb.init",
        "wandb.log",
        "wandb.finish",
        "wandb.watch",
        "wandb.save",
        "wandb.alert",
        "wandb.log_artifact",
        "wandb.define_metric",
        # Before ``wandb.init`` (kept to the main process) these raise on the other ranks.
        "wandb.config.update",
        "wandb.config.setdefaults",
        "wandb.summary.update",
        "wandb.unwatch",
        "wandb.log_model",
        "mlflow.set_experiment",
        "mlflow.log_metric",
        "mlflow.log_metrics",
        "mlflow.log_param",
        "mlflow.log_params",
        "mlflow.log_artifact",
        "mlflow.log_artifacts",
        "mlflow.log_dict",
        "mlflow.log_figure",
        "mlflow.set_tag",
        "mlflow.set_tags",
        "mlflow.end_run",
        "mlflow.pytorch.log_model",
        # tensorboard_logger's default logger: ``configure(logdir)`` starts an event file.
        "tensorboard_logger.configure",
        "tensorboard_logger.log_value",
        "tensorboard_logger.log_histogram",
        "tensorboard_logger.log_images",
    }
)
#: The run state a tracker's module keeps (``config = wandb.config``, ``wandb.config.lr``,
#: ``wandb.run.name``): read before ``wandb.init``, on a rank that never called it, it raises.
TRACKER_RUN_STATE = frozenset({"wandb.config", "wandb.run"})
#: Calls that set that state up rather than log into it: they stay on every rank with ``wandb.init``
#: wherever every rank reads it.
TRACKER_SETUP = frozenset({"wandb.init", "wandb.config.update", "wandb.config.setdefaults"})
#: Calls returning a tracker object whose methods log (``writer.add_scalar``, ``run.log``).
TRACKER_CONSTRUCTORS = frozenset(
    {
        "torch.utils.tensorboard.SummaryWriter",
        "torch.utils.tensorboard.writer.SummaryWriter",
        "tensorboardX.SummaryWriter",
        "wandb.init",
        "tensorboard_logger.Logger",
        "visdom.Visdom",
        "comet_ml.Experiment",
        "neptune.init_run",
        "aim.Run",
    }
)
#: Functions joining the parts of a path given (``os.path.join(workdir, "last.pt")``).
PATH_JOINS = frozenset({"os.path.join", "posixpath.join", "ntpath.join"})
#: Constructors of a path from the parts given (``Path(workdir)``, ``Path(workdir, "vocab.txt")``,
#: ``os.path.join(workdir, "last.pt")``).
PATH_CONSTRUCTORS = frozenset({"pathlib.Path", "pathlib.PurePath", *PATH_JOINS})
#: Endless counters a loop may run over (``for step in count(1):``, until a ``break``): the same
#: on every process.
ENDLESS_COUNTERS = frozenset({"itertools.count"})
PER_PROCESS_PATHS = frozenset(
    {
        "tempfile.mkdtemp",
        "tempfile.mkstemp",
        "tempfile.TemporaryDirectory",
        "tempfile.NamedTemporaryFile",
    }
)

#: Calls whose result each process decides for itself: the clock, its process id, a fresh id, and
#: the listing of a folder at the moment it is read (another process may have just added to it). A
#: run folder named from one differs between the processes.
DECIDED_PER_PROCESS = frozenset(
    {
        "time.time",
        "time.time_ns",
        "time.strftime",
        "time.ctime",
        "time.localtime",
        "time.gmtime",
        "time.asctime",
        "datetime.datetime.now",
        "datetime.datetime.today",
        "datetime.datetime.utcnow",
        "datetime.date.today",
        "uuid.uuid1",
        "uuid.uuid4",
        "os.getpid",
        "glob.glob",
        "glob.iglob",
        "os.listdir",
        "os.scandir",
    }
)

#: Layers that take and return ``(sequence, batch, ...)`` tensors unless built with
#: ``batch_first=True`` (``nn.TransformerEncoder``/``Decoder`` follow the layer they stack).
SEQUENCE_FIRST_LAYERS = frozenset(
    {
        "torch.nn.Transformer",
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerDecoderLayer",
        "torch.nn.LSTM",
        "torch.nn.GRU",
        "torch.nn.RNN",
        "torch.nn.modules.transformer.Transformer",
        "torch.nn.modules.transformer.TransformerEncoderLayer",
        "torch.nn.modules.transformer.TransformerDecoderLayer",
        "torch.nn.modules.rnn.LSTM",
        "torch.nn.modules.rnn.GRU",
        "torch.nn.modules.rnn.RNN",
    }
)
#: Recurrent layers: whatever ``batch_first`` says of their output, the hidden state they return
#: second (``output, h_n = gru(x)``; ``output, (h_n, c_n) = lstm(x)``) is ``(layers, batch, hidden)``.
RECURRENT_LAYERS = frozenset(
    {
        "torch.nn.LSTM",
        "torch.nn.GRU",
        "torch.nn.RNN",
        "torch.nn.modules.rnn.LSTM",
        "torch.nn.modules.rnn.GRU",
        "torch.nn.modules.rnn.RNN",
    }
)
#: ``pad_sequence`` stacks the sequences along dim 1 unless called with ``batch_first=True``.
SEQUENCE_FIRST_PADDING = frozenset({"torch.nn.utils.rnn.pad_sequence"})

#: Functions drawing random tensors from the global generator: run on every process without a
#: seed, each process draws its own values.
RANDOM_TENSOR_FUNCTIONS = frozenset(
    {
        "torch.randn",
        "torch.rand",
        "torch.randint",
        "torch.randperm",
        "torch.normal",
        "torch.randn_like",
        "torch.rand_like",
        "torch.randint_like",
        "torch.bernoulli",
        "torch.multinomial",
        "torch.poisson",
    }
)
#: ``torch.nn`` layers whose construction draws their weights from torch's global generator
#: (``reset_parameters``); a layer whose name starts with one of these (``Conv2d``,
#: ``LSTMCell``, ``TransformerEncoderLayer``) is one. Normalisations and ``PReLU`` start from
#: fixed values; losses and activations hold no parameters.
_RANDOMLY_INITIALISED_LAYERS = (
    "Linear",
    "Bilinear",
    "LazyLinear",
    "Conv",
    "LazyConv",
    "Embedding",
    "RNN",
    "LSTM",
    "GRU",
    "MultiheadAttention",
    "Transformer",
)


def initialises_at_random(qualified: str) -> bool:
    """``torch.nn.Linear``, ``torch.nn.Conv2d``, ``torch.nn.LSTM``: a ``torch.nn`` layer that
    draws its initial weights from torch's global generator when built."""
    module, _, name = qualified.rpartition(".")
    return module in ("torch.nn", "torch.nn.modules") and name.startswith(_RANDOMLY_INITIALISED_LAYERS)


#: ``numpy.random`` names that are not draws (a seed, a generator or its state).
#: Functions splitting a dataset at random → the keyword that gives them their own seed.
RANDOM_SPLITS = {
    "torch.utils.data.random_split": "generator",
    "torch.utils.data.dataset.random_split": "generator",
    "sklearn.model_selection.train_test_split": "random_state",
}
#: Shuffles in place from a library's global generator (``np.random.shuffle(indices)`` before a
#: train/validation split) → the seeding calls of torch alone, which leave that generator as it was.
IN_PLACE_SHUFFLES = frozenset({"numpy.random.shuffle", "random.shuffle"})
TORCH_ONLY_SEEDS = frozenset(
    {"torch.manual_seed", "torch.random.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all"}
)
NUMPY_RANDOM_NOT_DRAWS = frozenset(
    {"numpy.random.seed", "numpy.random.default_rng", "numpy.random.RandomState", "numpy.random.Generator"}
)
#: ``random`` names that are not draws from its global generator (a seed, its state, a
#: generator of the script's own).
PYTHON_RANDOM_NOT_DRAWS = frozenset(
    {"random.seed", "random.getstate", "random.setstate", "random.Random", "random.SystemRandom"}
)
#: Loss constructors and functions whose default reduction is the mean over the batch's rows
#: (``criterion(out, y).item() * y.size(0)`` is then the rows' sum of losses).
MEAN_LOSSES = frozenset(
    {
        "torch.nn.CrossEntropyLoss",
        "torch.nn.NLLLoss",
        "torch.nn.MSELoss",
        "torch.nn.L1Loss",
        "torch.nn.BCELoss",
        "torch.nn.BCEWithLogitsLoss",
        "torch.nn.SmoothL1Loss",
        "torch.nn.HuberLoss",
        "torch.nn.functional.cross_entropy",
        "torch.nn.functional.nll_loss",
        "torch.nn.functional.mse_loss",
        "torch.nn.functional.l1_loss",
        "torch.nn.functional.binary_cross_entropy",
        "torch.nn.functional.binary_cross_entropy_with_logits",
    }
)

#: ``torch.nn.functional`` losses not named ``*_loss``.
_FUNCTIONAL_LOSSES = frozenset({"cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"})


def is_loss_module(qualified: str) -> bool:
    """A ``torch.nn`` loss module (``torch.nn.CrossEntropyLoss``, ``torch.nn.KLDivLoss``)."""
    return qualified.startswith("torch.nn.") and qualified.endswith("Loss")


def is_loss_function(qualified: str) -> bool:
    """A ``torch.nn.functional`` loss (``torch.nn.functional.mse_loss``, ``...cross_entropy``)."""
    module, _, name = qualified.rpartition(".")
    return module == "torch.nn.functional" and (name.endswith("_loss") or name in _FUNCTIONAL_LOSSES)


#: Calls joining tensors along their first dimension: the rows of every tensor they are given (a
#: collate function's ``torch.cat(boxes, 0)`` of every image's boxes).
ROW_JOINS = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})
#: Functions joining a list of per-batch arrays into one array of samples.
CONCATENATIONS = frozenset(
    {
        "torch.cat",
        "torch.concat",
        "torch.concatenate",
        "torch.hstack",
        "torch.vstack",
        "numpy.concatenate",
        "numpy.hstack",
        "numpy.vstack",
    }
)
#: torch calls joining a list of tensors into one (whose ``.numpy()`` then needs CPU tensors).
TENSOR_JOINS = frozenset({name for name in CONCATENATIONS if name.startswith("torch.")} | {"torch.stack"})
#: Functions of one output that keep one row per sample when no dim 0 is named.
ROW_WISE_FUNCTIONS = frozenset(
    {
        "torch.softmax",
        "torch.log_softmax",
        "torch.sigmoid",
        "torch.nn.functional.softmax",
        "torch.nn.functional.log_softmax",
        "torch.nn.functional.sigmoid",
    }
)
#: NumPy calls making an array of a list of tensors (each tensor must be on the CPU).
ARRAYS_FROM_LISTS = frozenset(
    {name for name in CONCATENATIONS if name.startswith("numpy.")} | {"numpy.array", "numpy.asarray", "numpy.stack"}
)
#: Functions padding a list of sequences to the longest one (a collate function calling one pads
#: each batch to its own length).
SEQUENCE_PADDERS = frozenset({"torch.nn.utils.rnn.pad_sequence"})
#: transformers' collators that pad each batch to its longest sample.
PADDING_COLLATORS = frozenset(
    {
        "transformers.DataCollatorWithPadding",
        "transformers.DataCollatorForTokenClassification",
        "transformers.DataCollatorForSeq2Seq",
        "transformers.data.data_collator.DataCollatorWithPadding",
        "transformers.data.data_collator.DataCollatorForTokenClassification",
        "transformers.data.data_collator.DataCollatorForSeq2Seq",
    }
)

#: Libraries that read a tensor's memory on the host (``np.asarray`` of it): a CUDA tensor handed
#: to one of their functions raises.
HOST_LIBRARIES = ("numpy.", "sklearn.", "scipy.", "pandas.", "matplotlib.")


#: Checkpoint writes (one process makes them once converted): qualified name → the keyword and
#: position of the path argument.
CHECKPOINT_WRITES = {"torch.save": ("f", 1)}
#: Checkpoint reads (every process makes them): qualified name → the keyword and position of the
#: path argument.
CHECKPOINT_READS = {"torch.load": ("f", 0)}


# Methods, by name (what a call's attribute is, whatever its receiver)
# --------------------------------------------------------------------------------------------

#: Methods that write what they are called on to the path they are given (a figure's
#: ``savefig``, pandas' ``to_csv``, pathlib's ``write_text``, a Hugging Face model's, tokenizer's
#: or config's ``save_pretrained``).
WRITING_METHODS = frozenset(
    {"savefig", "to_csv", "to_json", "to_parquet", "imsave", "write_text", "write_bytes", "save_pretrained"}
)
#: Methods that replace the state of what they are called on (a module's weights, an optimizer's
#: moments) with the state dict they are given.
STATE_LOADING_METHODS = frozenset({"load_state_dict"})
#: Methods that collect a value into what they are called on, once per call (a list of batch
#: losses' ``append``, an average meter's ``update``).
COLLECTING_METHODS = frozenset({"append", "extend", "update"})
#: Of those, a list's: they take a container of items (``extend``) or an item (``append``).
LIST_GROWING_METHODS = frozenset({"append", "extend"})
#: ``nn.Module`` methods that switch its mode, reach its parameters and submodules or move it:
#: none runs its forward, and each works the same on the DDP wrapper.
MODULE_HOUSEKEEPING_METHODS = frozenset(
    {"eval", "train", "parameters", "named_parameters", "zero_grad", "to", "cuda", "cpu", "modules"}
)
#: Methods of a model that do not compute its outputs (mode switches, parameter access, moves).
MODULE_NOT_RUNNING_METHODS = MODULE_HOUSEKEEPING_METHODS | {"state_dict"}
#: nn.Module's own methods and attributes: they work on the DDP wrapper (which forwards them or
#: has its own), so calls to them stay as written. Not ``module``: on the wrapper it is the
#: wrapped model, so the script's own ``block.module`` (a layer its class keeps under that name;
#: DataParallel's was unwrapped by ACC110) is read from the unwrapped model. Not ``state_dict``:
#: the wrapper's keys are prefixed with ``module.``.
MODULE_OWN_ATTRIBUTES = MODULE_HOUSEKEEPING_METHODS | {
    "named_modules",
    "children",
    "named_children",
    "apply",
    "buffers",
    "named_buffers",
    "requires_grad_",
    "half",
    "float",
    "double",
    "bfloat16",
    "type",
    "training",
    "forward",
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_backward_hook",
    "register_buffer",
    "register_parameter",
    "add_module",
    "get_submodule",
    "get_parameter",
    "get_buffer",
    "share_memory",
    "no_sync",
    "__class__",
}


#: Methods of the accelerator every process calls together (each waits for the others, or the
#: objects they return do): code calling one cannot run on the main process alone.
COLLECTIVE_ACCELERATOR_METHODS = frozenset(
    {
        "prepare",
        "backward",
        "gather",
        "gather_for_metrics",
        "reduce",
        "pad_across_processes",
        "wait_for_everyone",
        "clip_grad_norm_",
        "save_state",
        "load_state",
        "join_uneven_inputs",
        "accumulate",
        "no_sync",
    }
)
