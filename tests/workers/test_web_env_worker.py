"""The web env rank outside Ray: its browser server and sites bind 127.0.0.1 on a one-node
cluster, each takes its own token derived from the run's secret, and its Chromium reads the
sites through the browser server (so the site token reached Chromium, for the site only)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

pytest.importorskip("playwright")
from rlinf.engines.web.browser import find_chromium

try:
    find_chromium(None)
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"no Chromium: {exc}", allow_module_level=True)

from rlinf.engines.web.client import BrowserClient
from rlinf.scheduler.secret import RunSecret
from rlinf.utils.web_auth import bearer
from rlinf.workers.env.web_env_worker import SERVICE_PURPOSE, SITE_PURPOSE, WebEnvWorker


def test_an_env_rank_binds_loopback_and_each_server_takes_its_own_token(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    secret = RunSecret(bytes(range(32)))
    service_token, site_token = secret.token(SERVICE_PURPOSE), secret.token(SITE_PURPOSE)
    worker = WebEnvWorker(1, [1.0], {"operation_timeout": 10, "wait_timeout": 10}, 0, False, _rlinf_secret=secret)
    try:
        urls = worker.urls()
        assert urls["browser"].startswith("http://127.0.0.1:") and urls["site"].startswith("http://127.0.0.1:")
        assert service_token not in str(urls) and site_token not in str(urls)
        assert httpx.get(urls["browser"] + "/health", headers=bearer(service_token)).status_code == 200
        assert httpx.get(urls["browser"] + "/health", headers=bearer(site_token)).status_code == 401
        assert httpx.get(urls["site"] + "/shop/", headers=bearer(site_token)).status_code == 200
        assert httpx.get(urls["site"] + "/shop/", headers=bearer(service_token)).status_code == 401

        async def browse():
            async with BrowserClient(urls["browser"], token=service_token, operation_timeout=10,
                                     wait_timeout=10) as client:
                iid = await client.allocate()
                page = await client.navigate(iid, urls["site"] + "/shop/")
                await client.release(iid)
                return page
        page = asyncio.run(asyncio.wait_for(browse(), 60))
        assert page["status"] == 200 and page["title"] == "Shop home"
    finally:
        worker.close()
