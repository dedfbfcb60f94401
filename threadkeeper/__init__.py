"""Threadkeeper: the command line and the composition root that wires bot, services and persistence.

Everything installs under this one namespace: ``threadkeeper.bot`` (Slack and the console),
``threadkeeper.services`` (the domain), ``threadkeeper.persistence`` (Redis) and ``threadkeeper.evals``. In the
repository they are the top-level folders ``bot/``, ``services/``, ``persistence/`` and ``evals/``; an installed
wheel holds them inside this package.
"""

import os as _os

_here = _os.path.dirname(__file__)
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "services")) and \
        _os.path.isfile(_os.path.join(_root, "services", "__init__.py")):
    __path__.append(_root)  # a source checkout (or an editable install): the subpackages sit beside this one
