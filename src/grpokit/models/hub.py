"""Hub ids without a network: use the local cache, or fail within seconds with a plain message.

Offline, transformers and datasets retry a hub id for most of a minute before a generic connection
error. grpokit asks two cheap questions first: is the model or data set in the local cache (no network
needed), and can the hub's host be reached at all (name lookup and a TCP connection, a few seconds at
most)? Cached and unreachable: load from the cache only. Neither: raise at once, naming the id, the
cache folder and what to do instead.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from huggingface_hub import constants, try_to_load_from_cache

from grpokit.errors import HubUnreachable

PROBE_TIMEOUT_S = 3.0
_TRUE = {"1", "true", "yes", "on"}


def hub_cache() -> Path:
    return Path(constants.HF_HUB_CACHE)


def offline_requested() -> bool:
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def unreachable_reason(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the hub cannot be reached (None when a TCP connection to it opens within `timeout` seconds)."""
    if offline_requested():
        return "HF_HUB_OFFLINE is set"
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urlparse(proxy or constants.ENDPOINT)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    result: list[str | None] = []

    def probe() -> None:  # in a thread: the name lookup itself has no timeout
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as err:
            result.append(f"{host}:{port}: {err.strerror or err}")

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    return result[0] if result else f"{host}:{port}: no answer within {timeout:g} s"


def cached_model_dir(name: str, revision: str | None = None) -> Path | None:
    """The cached snapshot folder of hub model `name`, or None (looks at the disk only)."""
    found = try_to_load_from_cache(name, "config.json", revision=revision, cache_dir=hub_cache())
    return Path(found).parent if isinstance(found, str) else None


def check_model(name: str, revision: str | None = None) -> Path | None:
    """For a hub id: the cached folder to load when the hub is unreachable, None to load it normally.

    Loading the snapshot folder itself, not the id with local_files_only: transformers still asks the hub
    about optional files (adapter_config.json) for an id, and retries for most of a minute.
    """
    cached = cached_model_dir(name, revision)
    reason = unreachable_reason()
    if reason is None:
        return None
    if cached is not None:
        return cached
    raise HubUnreachable(
        f"model {name!r} is not in the local cache ({hub_cache()}) and the hub cannot be reached ({reason}); "
        "use `embedded`, a local folder, or connect"
    )


def dataset_is_cached(source: str) -> bool:
    # slow import: datasets, only for a data set id
    import datasets

    return (hub_cache() / f"datasets--{source.replace('/', '--')}").is_dir() or (
        Path(datasets.config.HF_DATASETS_CACHE) / source.replace("/", "___")
    ).is_dir()


def check_dataset(source: str) -> bool:
    """For a hub data set id: True to read it from the cache only, False to load it normally; raises otherwise."""
    cached = dataset_is_cached(source)
    reason = unreachable_reason()
    if reason is None:
        return False
    if cached:
        return True
    # slow import: datasets, only for a data set id
    import datasets

    raise HubUnreachable(
        f"data set {source!r} is not in the local cache ({datasets.config.HF_DATASETS_CACHE} or {hub_cache()}) and "
        f"the hub cannot be reached ({reason}); use a local .jsonl/.csv/.parquet file or dataset folder, or connect"
    )


@contextlib.contextmanager
def datasets_offline() -> Iterator[None]:
    """datasets reads its offline flag at import; switch it on for one call so it reads its cache, not the network."""
    # slow import: datasets, only for a data set id
    import datasets

    saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved
