"""Checks: one module per code, each reporting (``ACC9xx``) what a person must look at, never
changing the script.

Every module here is found by the registry and run after all rewrites, on the converted tree
(order does not matter). A check is one :class:`~accel_convert.codemods.engine.rule.Rule`
subclass whose docstring starts ``ACC9nn name: summary``, with examples of what it reports and
of what it leaves alone (``Example(leaves_alone=True)``); those examples are its tests. A check
that looks at nodes is a :class:`~accel_convert.codemods.engine.check_walk.WalkingCheck`: its
hooks run in the one walk every such check shares.
"""
