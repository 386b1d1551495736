"""``python -m converter`` runs the ``accel-convert`` command."""

from converter.cli import main

main(prog_name="accel-convert")
