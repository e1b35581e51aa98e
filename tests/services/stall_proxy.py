"""A TCP proxy in front of a real server that can hold every new connection (a hung endpoint: a
Prometheus behind a stuck load balancer), so a flow run can be caught in the middle of collecting.
`stall()` holds new connections unanswered; `release()` lets held and new ones through to the real
server. It forwards bytes, nothing else: the client talks to the real server's protocol.
"""

from __future__ import annotations

import asyncio
import threading

from tests.services.prometheus import free_port


class StallProxy:
    def __init__(self, upstream_host: str, upstream_port: int):
        self.upstream = (upstream_host, upstream_port)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.held = 0  # connections that arrived while stalled
        self._loop = asyncio.new_event_loop()
        self._open = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> StallProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        self.release()
        return self

    def stall(self) -> None:
        self._loop.call_soon_threadsafe(self._open.clear)

    def release(self) -> None:
        self._loop.call_soon_threadsafe(self._open.set)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._open.is_set():
            self.held += 1
            await self._open.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
