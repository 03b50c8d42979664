"""Where data comes from, in order: a path the user gives, the real source, a synthetic stand-in."""
import json
import os
import threading
import urllib.error
import urllib.request

from common.analysis.results_run import DataSource
from common.env import DATA_DECIDED_ENV, OFFLINE_ENV


def decided(name: str) -> tuple[str, DataSource] | None:
    """The path and source record a parent decided for data set `name` (its children never probe the
    network again), or None."""
    try:
        found = json.loads(os.environ.get(DATA_DECIDED_ENV) or "{}").get(name)
    except ValueError:
        return None
    return (found["path"], DataSource.from_json(found["source"])) if found else None


def decide(name: str, path, src: DataSource) -> None:
    """Record for this process's children where data set `name` is and what it is; they skip the network."""
    chosen = json.loads(os.environ.get(DATA_DECIDED_ENV) or "{}")
    chosen[name] = {"path": str(path), "source": src.to_json()}
    os.environ[DATA_DECIDED_ENV] = json.dumps(chosen)
    os.environ[OFFLINE_ENV] = "1"


def offline() -> bool:
    """COOKBOOK_OFFLINE=1 skips the network sources (they fail fast offline anyway)."""
    return os.environ.get(OFFLINE_ENV, "") not in ("", "0")


def reachable(url: str, seconds: float = 10) -> bool:
    """A quick HEAD request, so that a machine without internet falls back in seconds instead of
    waiting for a download to time out."""
    try:  # an opener of its own reads the proxy settings as they are now, not as the process's first request saw them
        urllib.request.build_opener().open(urllib.request.Request(url, method="HEAD"), timeout=seconds).close()
    except urllib.error.HTTPError:
        return True  # the host answered, if only with an error status
    except Exception:
        return False
    return True


def call_with_timeout(fn, seconds: float):
    """Run fn in a helper thread so a hanging download cannot hang the recipe."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # reported to the caller, not raised in the thread
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise TimeoutError(f"no answer in {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def source(kind: str, location: str | None, note: str = "") -> DataSource:
    """kind is 'real', 'local' or 'synthetic'; synthetic data is never presented as real."""
    return DataSource(kind=kind, location=location, note=note, synthetic=kind == "synthetic")
