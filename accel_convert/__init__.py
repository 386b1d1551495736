"""accel-convert's one import name.

The package has three parts, one folder each: ``converter/`` (the command line, the pipeline and
reporting), ``codemods/`` (the program model, the ordered rewrites and the checks) and ``runtime/``
(the distributed core converted scripts import). Converted scripts import
``from accel_convert.runtime import Accelerator``: a user's own ``runtime.py`` beside the script, or
an unrelated ``runtime``/``converter`` distribution, cannot shadow it.

Nothing is imported here, so ``import accel_convert.converter`` never loads torch and
``import accel_convert.runtime`` never loads libcst.
"""

#: The version (pyproject.toml reads it from here): ``--version``, and the ``--check`` cache keys
#: (converter.cache), which read it without importlib.metadata's cost at every run.
__version__ = "0.1.0"
