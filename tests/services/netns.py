"""A "host" on this machine: a network namespace of its own (`ip netns`, root only), reached from
the machine through a veth pair, and directories of its own (HOME, temp, working directory,
Prefect home). What runs in it sees the machine's services only at the machine's address on its
link (ROOT_SIDE), never at 127.0.0.1, as a worker on another host sees a database server.

The services under test listen on 127.0.0.1; a forwarder in this process relays each of their
ports from the link's address to them (bytes only: every protocol is the service's own).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest


def can_make_hosts() -> str:
    """Why hosts cannot be made here ("" when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip"):
        return "no `ip` (iproute2)"
    return ""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _free_link() -> int:
    """A /30 of 10.231.0.0/16 no interface of the machine has (another test run's hosts may)."""
    import random

    taken = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=30).stdout
    free = [n for n in range(1, 16000) if f" 10.231.{n // 64}.{(n % 64) * 4 + 1}/" not in taken]
    return random.SystemRandom().choice(free)


class Host:
    """Host `index` of this test: namespace attr-<pid>-<index>, a /30 link of 10.231.0.0/16."""

    def __init__(self, base: Path, index: int, ports: list[int]):
        why = can_make_hosts()
        if why:
            if os.environ.get("CI"):
                pytest.fail(why)
            pytest.skip(why)
        self.name = f"attr-{os.getpid() % 100000}-{index}"
        link = _free_link()
        third, fourth = link // 64, (link % 64) * 4
        self.root_side, self.host_side = f"10.231.{third}.{fourth + 1}", f"10.231.{third}.{fourth + 2}"
        self.dir = base / f"host-{index}"
        for d in ("home", "tmp", "work", "prefect-home", "state"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        self.ports = ports
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.base_events.Server] = []

    @property
    def env(self) -> dict[str, str]:
        """The directories this host keeps to itself."""
        d = self.dir
        return {
            "HOME": str(d / "home"),
            "TMPDIR": str(d / "tmp"),
            "PREFECT_HOME": str(d / "prefect-home"),
            "XDG_STATE_HOME": str(d / "state"),
            "XDG_DATA_HOME": str(d / "home" / ".local" / "share"),
            "XDG_CACHE_HOME": str(d / "home" / ".cache"),
        }

    def command(self, args: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *args]

    def start(self) -> Host:
        veth = self.name[-13:]  # interface names: at most 15 characters
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", f"{veth}a", "type", "veth", "peer", "name", f"{veth}b")
            _ip("link", "set", f"{veth}b", "netns", self.name)
            _ip("addr", "add", f"{self.root_side}/30", "dev", f"{veth}a")
            _ip("link", "set", f"{veth}a", "up")
            _ip("-n", self.name, "addr", "add", f"{self.host_side}/30", "dev", f"{veth}b")
            _ip("-n", self.name, "link", "set", f"{veth}b", "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
            self._thread.start()
            asyncio.run_coroutine_threadsafe(self._forward_all(), self._loop).result(10)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            for server in self._servers:
                self._loop.call_soon_threadsafe(server.close)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True, timeout=30)  # and its veth

    def forward(self, port: int) -> None:
        """Relay one more of the machine's ports to this host (a service started after the host)."""
        asyncio.run_coroutine_threadsafe(self._forward(port), self._loop).result(10)

    async def _forward_all(self) -> None:
        for port in self.ports:
            await self._forward(port)

    async def _forward(self, port: int) -> None:
        self._servers.append(await asyncio.start_server(self._relay(port), self.root_side, port))

    def _relay(self, port: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

        return client


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        dst.close()
