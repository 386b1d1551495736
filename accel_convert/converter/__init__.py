"""The tool around the codemods: the ``accel-convert`` command line (``cli``), the conversion of one
file's bytes with its safety checks (``pipeline``), what the user sees (``report``), defaults from
pyproject.toml (``config``) and file discovery and atomic writes (``files``).

This package never imports torch: ``accel-convert --check`` runs on CI machines without it.
"""
