"""``python -m accel_convert.converter`` runs the ``accel-convert`` command."""

from accel_convert.converter.cli import main

main(prog_name="accel-convert")
