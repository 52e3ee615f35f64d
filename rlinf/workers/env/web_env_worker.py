"""The env worker of web runs: hosts one browser server (and, optionally, the shipped sites).

Each rank of the ``env`` group (placed by ``cluster.component_placement`` like every group; env
workers need no accelerator) starts a :mod:`rlinf.engines.web.service` browser server with its
share of ``env_config.server_size`` instances, on its own event-loop thread, and answers with the
URLs the rollout's clients use. With ``env_config.site_server.enabled`` it also serves the
shipped sites, so each rank's browsers read pages from their own node.

Both servers take a bearer token derived from the run's secret (:data:`SERVICE_PURPOSE`,
:data:`SITE_PURPOSE`): the driver derives the same service token for its clients, and only this
rank's Chromium is given the site token (for the site's origin alone). The sites bind 127.0.0.1
(only this rank's browsers read them); the browser server binds 127.0.0.1 too, unless the cluster
has more than one node (its clients, the driver's episodes, may then be on another node), when it
binds this node's address.
"""

from __future__ import annotations

from rlinf.scheduler import Worker

#: the purposes the run's secret derives the web tokens for (``run_secret.token(purpose)``)
SERVICE_PURPOSE = "web-service"
SITE_PURPOSE = "web-site"
LOOPBACK = "127.0.0.1"


class WebEnvWorker(Worker):
    """One env rank.

    Args:
        server_size: ``env_config.server_size``, over all ranks; this rank holds its share by
            ``weights`` (``env_config.rank_load_weight``, one per rank).
        service_kwargs: the browser server's limits (``operation_timeout``, ``wait_timeout``,
            ``instance_lifetime_max_minutes``) and browser settings.
        site_seed: seed of the shipped sites, or None to serve none.
        multi_node: the cluster has more than one node: the browser server binds this node's
            address instead of 127.0.0.1.
    """

    def __init__(self, server_size: int, weights: list[float], service_kwargs: dict, site_seed: int | None,
                 multi_node: bool = False):
        # lazy: the browser server pulls playwright / aiohttp (~1.5 s); the driver imports this class to launch it
        from rlinf.engines.web.client import split_for_rank
        from rlinf.engines.web.service import start_service_thread

        self.server_size = split_for_rank({}, server_size, weights, self.rank)[1]
        self.site = None
        self.site_url = None
        origin_tokens = {}
        if site_seed is not None:
            # lazy: the shipped sites (~80 ms) only when env_config.site_server is enabled
            from rlinf.envs.web_sites import SiteServer

            site_token = self.run_secret.token(SITE_PURPOSE)
            self.site = SiteServer(host=LOOPBACK, port=0, seed=site_seed, token=site_token)
            self.site_url = self.site.start()
            origin_tokens[self.site_url] = site_token
        url, self._stop = start_service_thread(server_size=self.server_size,
                                               host=self._host() if multi_node else LOOPBACK,
                                               token=self.run_secret.token(SERVICE_PURPOSE),
                                               origin_tokens=origin_tokens, **service_kwargs)
        self.browser_url = url

    @staticmethod
    def _host() -> str:
        try:
            import ray  # lazy: Ray (~1 s) only for a multi-node run on the Ray backend

            ip = ray.util.get_node_ip_address()
        except Exception:  # noqa: BLE001 - outside Ray: this machine only
            return LOOPBACK
        return LOOPBACK if ip in (None, "", LOOPBACK) else ip

    def urls(self) -> dict:
        """``{"browser": URL of the browser server, "site": base URL of the shipped sites or None}``
        (no token: the driver derives the browser server's from the run's secret)."""
        return {"browser": self.browser_url, "site": self.site_url}

    def close(self) -> None:
        self._stop()
        if self.site is not None:
            self.site.stop()
