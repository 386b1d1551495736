"""The checkpoint rule's own code, which every module of the rule reports its rewrites under
(the rule, ``__init__.py``, documents it)."""

#: A save, a load or a read of the model rewritten: the rule's own code.
CHECKPOINT = "ACC114"
