"""Which conversion a notebook gets: its code cells converted as one program
(converter.notebooks), or with ``--launcher`` its top-level training restructured for
``notebook_launcher`` first (converter.launcher_cells).

It sits above both, so that neither imports the other's caller: the pipeline hands every
``.ipynb`` here (nbformat is loaded for notebooks only).
"""

from __future__ import annotations

from accel_convert.codemods import Options
from accel_convert.converter.launcher_cells import convert_for_launcher
from accel_convert.converter.notebooks import convert_cells, is_python, read_notebook
from accel_convert.converter.pipeline import Conversion


def convert_notebook(source: bytes, options: Options, *, path: str) -> Conversion:
    """Convert a notebook's code cells as one program (see converter.notebooks); with
    ``options.launcher_processes``, training written at the top level is made one function
    started by a ``notebook_launcher`` cell first (converter.launcher_cells). A notebook whose
    kernel is not Python comes back as it is."""
    notebook = read_notebook(source, path)
    if not is_python(notebook):
        return Conversion(path, source, source)
    if options.launcher_processes is not None:
        return convert_for_launcher(notebook, source, options, path)
    converted = convert_cells(notebook, options, path)
    if converted is None:
        return Conversion(path, source, source)
    return converted.conversion(notebook, source, path)
