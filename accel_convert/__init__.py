"""accel-convert's one import name.

The source tree keeps the three parts side by side at the top level (``converter/``, ``codemods/``,
``runtime/``); this folder holds links to them, so they import as ``accel_convert.converter``,
``accel_convert.codemods`` and ``accel_convert.runtime`` from a checkout and from the installed
package alike. Converted scripts import ``from accel_convert.runtime import Accelerator``: a user's
own ``runtime.py`` beside the script, or an unrelated ``runtime``/``converter`` distribution, cannot
shadow it.

Nothing is imported here, so ``import accel_convert.converter`` never loads torch and
``import accel_convert.runtime`` never loads libcst.
"""
