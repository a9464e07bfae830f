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
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

__all__ = ["BACKEND", "host_store", "register"]

BACKEND = "gpuspark-static"
"""The name the handler is registered under in torch's rendezvous registry."""

_STORE_TIMEOUT_S = 300


def host_store(host: str, port: int, listen_fd: int) -> Any:
    """The job's TCP store server on the listening socket ``listen_fd``, bound to ``host``
    (the task's own address, so the store does not listen on every interface); the store
    takes the fd over and its own client connects to ``host``. Keep a reference while the job
    runs."""
    from torch.distributed import TCPStore

    return TCPStore(
        host,
        port,
        is_master=True,
        timeout=timedelta(seconds=_STORE_TIMEOUT_S),
        wait_for_workers=False,
        master_listen_fd=listen_fd,
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
                self._store = TCPStore(
                    self.master_addr, self.master_port, is_master=False, timeout=self.timeout
                )
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
