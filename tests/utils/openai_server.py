"""A small OpenAI-compatible chat server for tests: real HTTP (aiohttp) on 127.0.0.1, a thread of
its own. ``POST /v1/chat/completions`` answers like a grader: "1" when the message's
``Response:`` line contains its ``Reference answer:``, else "0". Knobs: ``fail_first`` (that many
requests get HTTP 500), ``delay_s`` (each reply waits), ``reply`` (a fixed text), ``reply_fn``
(optional: called with the last message's content, returns the reply text). It records every
request (model, Authorization header, last message content) and the peak number of requests in
flight."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable


class OpenAIServer:
    def __init__(self, fail_first: int = 0, delay_s: float = 0.0, reply: str | None = None,
                 reply_fn: Callable[[str], str] | None = None):
        self.fail_first, self.delay_s, self.reply, self.reply_fn = fail_first, delay_s, reply, reply_fn
        self.requests: list[dict] = []
        self.in_flight = self.peak_in_flight = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the test OpenAI server did not start")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        from aiohttp import web

        async def chat(request):
            body = await request.json()
            with self._lock:
                self.requests.append({"model": body.get("model"), "auth": request.headers.get("Authorization"),
                                      "content": body["messages"][-1]["content"]})
                n = len(self.requests)
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                if n <= self.fail_first:
                    return web.json_response({"error": "busy"}, status=500)
                text = self.reply if self.reply_fn is None else self.reply_fn(body["messages"][-1]["content"])
                if text is None:
                    content = body["messages"][-1]["content"]
                    ref = re.search(r"Reference answer: (.*)", content)
                    resp = re.search(r"Response: (.*)", content)
                    text = "1" if ref and resp and ref.group(1).strip() in resp.group(1) else "0"
                return web.json_response({"id": f"c{n}", "object": "chat.completion", "model": body.get("model"),
                                          "choices": [{"index": 0, "finish_reason": "stop",
                                                       "message": {"role": "assistant", "content": text}}]})
            finally:
                with self._lock:
                    self.in_flight -= 1

        async def start():
            app = web.Application()
            app.router.add_post("/v1/chat/completions", chat)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
            self._ready.set()

        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def close(self) -> None:
        async def stop():
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
