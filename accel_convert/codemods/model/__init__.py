"""The program model: one walk over a module, then providers, each the one owner of a concept.

See ``docs/contributing.md`` ("The program model") for what each provider owns and how to add one;
:mod:`codemods.model.runner` holds their order, checked when it is imported.
"""
