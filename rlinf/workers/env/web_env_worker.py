"""The env worker of web runs: hosts one browser server (and, optionally, the shipped sites).

Each rank of the ``env`` group (placed by ``cluster.component_placement`` like every group; env
workers need no accelerator) starts a :mod:`rlinf.engines.web.service` browser server with its
share of ``env_config.server_size`` instances, on its own event-loop thread, and answers with the
URLs the rollout's clients use. With ``env_config.site_server.enabled`` it also serves the
shipped sites, so each rank's browsers read pages from their own node.
"""

from __future__ import annotations

from rlinf.scheduler import Worker


class WebEnvWorker(Worker):
    """One env rank.

    Args:
        server_size: ``env_config.server_size``, over all ranks; this rank holds its share by
            ``weights`` (``env_config.rank_load_weight``, one per rank).
        service_kwargs: the browser server's limits (``operation_timeout``, ``wait_timeout``,
            ``instance_lifetime_max_minutes``) and browser settings.
        site_seed: seed of the shipped sites, or None to serve none.
    """

    def __init__(self, server_size: int, weights: list[float], service_kwargs: dict, site_seed: int | None):
        from rlinf.engines.web.client import split_for_rank
        from rlinf.engines.web.service import start_service_thread

        self.server_size = split_for_rank({}, server_size, weights, self.rank)[1]

        host = self._host()
        self.site = None
        if site_seed is not None:
            from rlinf.envs.web_sites import SiteServer

            self.site = SiteServer(host="0.0.0.0" if host != "127.0.0.1" else host, port=0, seed=site_seed)
            self.site_url = self.site.start().replace("0.0.0.0", host)
        else:
            self.site_url = None
        url, self._stop = start_service_thread(server_size=self.server_size, host=host, **service_kwargs)
        self.browser_url = url

    @staticmethod
    def _host() -> str:
        from rlinf.scheduler import local

        if local.is_active():  # cluster.backend: local: everything is in this process
            return "127.0.0.1"
        try:
            import ray

            ip = ray.util.get_node_ip_address()
        except Exception:  # noqa: BLE001 - outside Ray: this machine only
            return "127.0.0.1"
        return "127.0.0.1" if ip in (None, "", "127.0.0.1") else ip

    def urls(self) -> dict:
        """``{"browser": URL of the browser server, "site": base URL of the shipped sites or None}``."""
        return {"browser": self.browser_url, "site": self.site_url}

    def close(self) -> None:
        self._stop()
        if self.site is not None:
            self.site.stop()
