"""The static rendezvous without a store thread in any agent: task 0's process hosts the store.

torch's static rendezvous makes the agent of node 0 host the job's TCP store, and the store's
server is a thread of that agent (``pt_tcpstore_uv``). The agent then forks its ranks: global
rank 0 was the one rank forked from a multi-threaded parent, and a forked child can inherit a
lock that no thread of its own will release. Once in a while rank 0 hung before it reached
``init_process_group`` and every peer waited gloo's default 30 minutes.

Here every agent, node 0's included, is a client of a store that task 0's own process hosts
(:func:`host_store`, called after that process forked its agent), so the agents stay
single-threaded and forking their ranks is safe. Ranks find the store as before, through
``MASTER_ADDR``/``MASTER_PORT`` and ``TORCHELASTIC_USE_AGENT_STORE``.

The store belongs to one run: its host writes the run's token (:data:`RUN_KEY`), and an agent
whose run has another token is refused with one line (:func:`check_run`) before it takes part,
so a run started with a stale or colliding address never joins a stranger's ranks.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

__all__ = ["BACKEND", "RUN_KEY", "check_run", "host_store", "register"]

BACKEND = "gpuspark-static"
"""The name the handler is registered under in torch's rendezvous registry."""

_STORE_TIMEOUT_S = 300

_RUN_KEY_WAIT_S = 30

RUN_KEY = "gpuspark/run"
"""The store key holding the token of the run the store was started for."""


def host_store(host: str, port: int, listen_fd: int, run_id: str) -> Any:
    """The job's TCP store server on the listening socket ``listen_fd``, bound to ``host``
    (the task's own address, so the store does not listen on every interface), marked as run
    ``run_id``'s; the store takes the fd over and its own client connects to ``host``. Keep a
    reference while the job runs."""
    from torch.distributed import TCPStore

    store = TCPStore(
        host,
        port,
        is_master=True,
        timeout=timedelta(seconds=_STORE_TIMEOUT_S),
        wait_for_workers=False,
        master_listen_fd=listen_fd,
    )
    store.set(RUN_KEY, run_id)
    return store


def check_run(store: Any, run_id: str, where: str) -> None:
    """Refuse to join the store at ``where`` unless it was started for run ``run_id``."""
    from torch.distributed.elastic.rendezvous import RendezvousError

    try:  # the host writes the key just after its server starts: wait a moment for it
        store.wait([RUN_KEY], timedelta(seconds=_RUN_KEY_WAIT_S))
        found: str | None = store.get(RUN_KEY).decode()
    except RuntimeError:  # DistStoreError (a timeout) derives from it
        found = None
    if found != run_id:
        owner = f"run {found}" if found else "no gpuspark run"
        raise RendezvousError(
            f"the rendezvous store at {where} belongs to {owner}, not to run {run_id}: "
            "refusing to join another run's ranks"
        )


def _handler_class() -> type:
    from torch.distributed import PrefixStore, TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousInfo, RendezvousStoreInfo
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous

    class ClientStaticRendezvous(StaticTCPRendezvous):
        """torch's static rendezvous, each agent a client of a store hosted elsewhere."""

        def get_backend(self) -> str:
            return BACKEND

        def next_rendezvous(self) -> Any:
            if not self._store:
                store = TCPStore(
                    self.master_addr, self.master_port, is_master=False, timeout=self.timeout
                )
                check_run(store, self.run_id, f"{self.master_addr}:{self.master_port}")
                self._store = store
            return RendezvousInfo(
                PrefixStore(self.run_id, self._store),
                self.rank,
                self.world_size,
                RendezvousStoreInfo(self.master_addr, self.master_port),
            )

    return ClientStaticRendezvous


def _create(params: Any) -> Any:
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import create_rdzv_handler

    checked: Any = create_rdzv_handler(params)  # torch's checks of the endpoint and rank
    cls = _handler_class()
    return cls(
        checked.master_addr,
        checked.master_port,
        checked.rank,
        checked.world_size,
        checked.run_id,
        int(checked.timeout.total_seconds()),
    )


def register() -> None:
    """Make :data:`BACKEND` known to torch's rendezvous registry (in the agent process)."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    try:
        rendezvous_handler_registry.register(BACKEND, _create)
    except ValueError:  # registered already (a second launch from this process)
        pass
