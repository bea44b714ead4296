"""The PyTree Compile Explorer page.

    panel serve apps/explorer_app.py --address 127.0.0.1 --allow-websocket-origin localhost:5006 --allow-websocket-origin 127.0.0.1:5006

Pass ``--address 127.0.0.1``: without it ``panel serve`` listens on every interface. To let other
machines in, opt in explicitly, e.g. ``--address 0.0.0.0 --allow-websocket-origin=HOST:5006``.
Results go to ``$PYTREE_EXPLORER_DB`` (default ``~/.local/share/pytree-explorer/results.sqlite``).
To measure on a Dask cluster, set ``$PYTREE_EXPLORER_SCHEDULER`` (``tcp://HOST:PORT``) and, to
allow more than one measurement at once per host, ``$PYTREE_EXPLORER_PER_HOST``
(``pytree-explorer serve --scheduler ... --per-host ...`` does the same). To cap the memory of
the worker every page shares (CPU; a case that needs more is stored as out of memory), set
``$PYTREE_EXPLORER_WORKER_MEMORY`` to a number of GiB (``pytree-explorer serve --worker-memory``).
"""

import explorer
from explorer._src.dashboard.page import settings_from_environment

explorer.dashboard(**settings_from_environment()).servable(title="PyTree Compile Explorer")
