"""The codes the metrics rule reports: its own (a gather made), and one per reason an evaluation
is left as written. Every module of the rule reports through these names, and the rule
(``__init__.py``) documents each one."""

#: A gather (or ``sync_on_compute=False``) written: the rule's own code.
GATHERED = "ACC113"
#: Evaluation of a sequence-first model or of (sequence, batch) data: not gathered, reported.
SEQUENCE_FIRST = "ACC922"
#: The evaluations left as written, one code per reason (``ACC913``, "metrics-manual", was all of
#: them: it stays an alias of these codes in --select/--ignore and the config).
COMPREHENSION = "ACC938"
UNREACHABLE = "ACC939"
SYNCED_TWICE = "ACC940"
MEAN_OF_BATCHES = "ACC941"
SUMMED_BATCH_MEANS = "ACC942"
NESTED_FORWARD = "ACC943"
FORWARD_IN_CALL = "ACC944"
UNKNOWN_MODEL = "ACC945"
PYTHON_VALUE = "ACC946"
INDEXED_STORE = "ACC947"
IN_BATCH_TARGETS = "ACC948"
BATCH_SCALAR = "ACC949"
LOCAL_BATCH_SIZE = "ACC950"
OBJECT_LISTS = "ACC951"
RAGGED_PADDING = "ACC952"
UNSIZED_STREAM = "ACC953"
BATCH_ORDER = "ACC955"
JOINED_ROWS = "ACC965"
ONE_SAMPLE_BATCHES = "ACC966"
MANUAL = "ACC913"
