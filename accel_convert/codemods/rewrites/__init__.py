"""Rewrites: one module per automatic change (``ACC1xx``), run in the order of
``engine/registry.py``'s ``REWRITE_MODULES``, each on the tree the previous ones made.

A rewrite may also report (``ACC9xx``) what it could not change; a finding that needs no rewrite
belongs in ``codemods/checks/``.
"""
