"""Make sure a real Redis is reachable for the test suite, starting one on loopback if possible.

Uses ``THREADKEEPER_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/15``; never ``REDIS_URL``, which
is the product's). Under ``CI=true`` a missing Redis is an
error; elsewhere the real-Redis tests are skipped and this says how to enable them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from urllib.parse import urlparse

import redis

URL = os.environ.get("THREADKEEPER_TEST_REDIS_URL") or "redis://127.0.0.1:6379/15"


def reachable() -> bool:
    try:
        return bool(redis.Redis.from_url(URL, socket_connect_timeout=1).ping())
    except (redis.RedisError, OSError):
        return False


def main() -> int:
    if reachable():
        print(f"Redis reachable at {URL}")
        return 0
    parsed = urlparse(URL)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 6379
    server = shutil.which("redis-server")
    if server and host in ("127.0.0.1", "localhost", "::1"):
        print(f"starting redis-server on {host}:{port} for the tests (no persistence). It keeps running after them, "
              f"so that later and concurrent runs share it; stop it with: redis-cli -p {port} shutdown nosave")
        subprocess.run([server, "--daemonize", "yes", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                        "--appendonly", "no"], check=False)
        for _ in range(50):
            if reachable():
                print(f"Redis reachable at {URL}")
                return 0
            time.sleep(0.1)
    advice = (f"No Redis is reachable at {URL}. Install one (Debian/Ubuntu: 'sudo apt-get install redis-server'; "
              "macOS: 'brew install redis') and run 'make test' again, or point THREADKEEPER_TEST_REDIS_URL at a Redis you may use "
              "(tests use database 15 and their own key prefix, and clean up).")
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        print(f"error: {advice}", file=sys.stderr)
        return 1
    print(f"warning: {advice} The tests that need a real Redis are skipped.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
