"""A 3-master Redis Cluster on loopback ports, for tests and for trying the cluster path by hand.

``python tests/redis_cluster.py`` starts one and prints its URL until interrupted; the test suite starts
its own through :func:`start` and stops it at the end.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field


def _free_ports(count: int) -> list[int]:
    """Ports free now whose cluster bus port (+10000) is free too."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10_000 > 65_535 or port in ports:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        ports.append(port)
    return ports


@dataclass
class Cluster:
    ports: list[int]
    directory: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def stop(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.processes:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def available() -> bool:
    return bool(shutil.which("redis-server"))


def start(masters: int = 3, timeout: float = 30.0) -> Cluster:
    """Start ``masters`` redis-servers in cluster mode (no persistence), give each an equal share of the
    16,384 slots and join them into one cluster (what ``redis-cli --cluster create`` does)."""
    import redis

    server = shutil.which("redis-server")
    if not server:
        raise RuntimeError("redis-server is needed to start a Redis Cluster")
    cluster = Cluster(_free_ports(masters), tempfile.mkdtemp(prefix="threadkeeper-cluster-"))
    try:
        for port in cluster.ports:
            cluster.processes.append(subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", f"nodes-{port}.conf", "--save", "", "--appendonly", "no",
                 "--dir", cluster.directory, "--cluster-node-timeout", "2000"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + timeout
        nodes = [redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1) for port in cluster.ports]
        try:
            for node in nodes:
                while True:
                    try:
                        node.ping()
                        break
                    except (redis.RedisError, OSError):
                        if time.monotonic() > deadline:
                            raise RuntimeError("a redis-server of the cluster did not start") from None
                        time.sleep(0.05)
            share = 16_384 // masters
            for i, node in enumerate(nodes):
                last = 16_383 if i == masters - 1 else (i + 1) * share - 1
                node.execute_command("CLUSTER ADDSLOTSRANGE", i * share, last)
            for port in cluster.ports[1:]:
                nodes[0].execute_command("CLUSTER MEET", "127.0.0.1", port)
            while not all(n.execute_command("CLUSTER INFO").get("cluster_state") == "ok"  # type: ignore[union-attr]
                          and int(n.execute_command("CLUSTER INFO").get("cluster_known_nodes", 0)) == masters
                          for n in nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not reach cluster_state:ok")
                time.sleep(0.1)
        finally:
            for node in nodes:
                node.close()
        return cluster
    except BaseException:
        cluster.stop()
        raise


if __name__ == "__main__":
    c = start()
    print(f"Redis Cluster of {len(c.ports)} masters at {c.url} (ports {', '.join(map(str, c.ports))}); Ctrl-C stops it")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
    sys.exit(0)
