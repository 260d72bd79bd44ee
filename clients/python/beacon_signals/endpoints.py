"""Where the daemon is, found as the ``beacon`` command line tool finds it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, Mapping, Optional

from .errors import ConfigurationError

REQUEST_SOCKET = "beacon.req"
PUBLISH_SOCKET = "beacon.pub"
SYSTEM_RUNTIME_DIR = "/run/beacon"


@dataclass(frozen=True)
class Curve:
    """CURVE credentials for tcp endpoints: the daemon's public key and this client's key pair (Z85)."""

    server_key: str
    public_key: str
    secret_key: str


@dataclass(frozen=True)
class Endpoints:
    """The daemon's request and publish endpoints, and CURVE credentials for tcp."""

    request: str
    #: None when the request endpoint implies none and none was given (a mirror then refuses to start).
    publish: Optional[str]
    curve: Optional[Curve] = None


def user_runtime_dir(environ: Mapping[str, str] = os.environ) -> str:
    xdg = environ.get("XDG_RUNTIME_DIR")
    return xdg + "/beacon" if xdg else f"/tmp/beacon-{os.getuid()}"


def client_runtime_dir(environ: Mapping[str, str] = os.environ) -> str:
    """``$BEACON_RUNTIME_DIR``; else the per-user directory or ``/run/beacon``, whichever holds a
    request socket (per-user first); else the per-user one."""
    if environ.get("BEACON_RUNTIME_DIR"):
        return environ["BEACON_RUNTIME_DIR"]
    user = user_runtime_dir(environ)
    for candidate in (user, SYSTEM_RUNTIME_DIR):
        if os.path.exists(os.path.join(candidate, REQUEST_SOCKET)):
            return candidate
    return user


def check_endpoint(endpoint: str) -> str:
    """Refuses what is not ``ipc://PATH`` or ``tcp://HOST:PORT``."""
    if endpoint.startswith("ipc://") and len(endpoint) > len("ipc://"):
        return endpoint
    match = re.fullmatch(r"tcp://(.+):(\d+)", endpoint)
    if match and 0 < int(match.group(2)) < 65536:
        return endpoint
    raise ConfigurationError(f"'{endpoint}' is not an endpoint: ipc://PATH or tcp://HOST:PORT (a port from 1 to 65535)")


def strip_comment(line: str) -> str:
    """The line without its comment, trimmed: a comment starts at a ``#`` at the start of the line
    or after white space, but not as the first character of a value (``name = #…``): Z85 keys
    contain ``#``, may start with one, and never hold a space."""
    previous, last_other = " ", None
    for index, character in enumerate(line):
        if character == "#" and previous in " \t" and last_other != "=":
            return line[:index].strip()
        previous = character
        if character not in " \t":
            last_other = character
    return line.strip()


def read_key_file(path: str) -> Dict[str, str]:
    """The keys of a key file as ``beacon keygen`` writes it: ``public = KEY``, ``secret = KEY``, ``#`` comments."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        raise ConfigurationError(f"cannot read key file {path}: {error.strerror}") from None
    keys: Dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        line = strip_comment(line)
        if not line:
            continue
        name, _, value = (part.strip() for part in line.partition("="))
        if name not in ("public", "secret") or len(value) != 40:
            raise ConfigurationError(f"{path}:{number}: expected 'public = KEY' or 'secret = KEY' with a 40-character Z85 key")
        keys[name] = value
    if not keys:
        raise ConfigurationError(f"{path}: no key in the file")
    return keys


def load_curve(server_key: Optional[str], key_file: Optional[str]) -> Optional[Curve]:
    """CURVE credentials from the daemon's public key (or a file holding it) and this client's key file."""
    if (server_key is None) != (key_file is None):
        raise ConfigurationError("CURVE needs both server_key and key_file ($BEACON_SERVER_KEY and $BEACON_KEY_FILE)")
    if server_key is None or key_file is None:
        return None
    if len(server_key) != 40 or os.path.exists(server_key):
        public = read_key_file(server_key).get("public")
        if public is None:
            raise ConfigurationError("the server key file holds no public key")
        server_key = public
    keys = read_key_file(key_file)
    if "secret" not in keys or "public" not in keys:
        raise ConfigurationError(f"{key_file}: a client key file needs both 'public' and 'secret' (beacon keygen)")
    return Curve(server_key=server_key, public_key=keys["public"], secret_key=keys["secret"])


def implied_publish_endpoint(request: str) -> Optional[str]:
    """The publish endpoint a request endpoint implies, as a relay's ``upstream_publish`` defaults:
    ``beacon.pub`` beside an ipc ``beacon.req``, the next port for tcp; None for any other."""
    suffix = "/" + REQUEST_SOCKET
    if request.startswith("ipc://") and request.endswith(suffix):
        return request[: -len(REQUEST_SOCKET)] + PUBLISH_SOCKET
    match = re.fullmatch(r"(tcp://.+):(\d+)", request)
    if match and int(match.group(2)) < 65535:
        return f"{match.group(1)}:{int(match.group(2)) + 1}"
    return None


def resolve(runtime_dir: Optional[str] = None, endpoint: Optional[str] = None, pub_endpoint: Optional[str] = None,
            server_key: Optional[str] = None, key_file: Optional[str] = None,
            environ: Mapping[str, str] = os.environ) -> Endpoints:
    """The endpoints to use: ``endpoint`` (or ``$BEACON_ENDPOINT``) with ``pub_endpoint`` (or
    ``$BEACON_PUB_ENDPOINT``, else the one ``endpoint`` implies: :func:`implied_publish_endpoint`;
    None when it implies none, and a mirror then refuses to start); else the ipc sockets of
    ``runtime_dir`` (or the runtime directory the command line tool would use). CURVE from
    ``server_key``/``key_file`` or ``$BEACON_SERVER_KEY``/``$BEACON_KEY_FILE``."""
    curve = load_curve(server_key or environ.get("BEACON_SERVER_KEY"), key_file or environ.get("BEACON_KEY_FILE"))
    endpoint = endpoint or (None if runtime_dir else environ.get("BEACON_ENDPOINT"))
    if endpoint:
        check_endpoint(endpoint)
        publish = pub_endpoint or environ.get("BEACON_PUB_ENDPOINT") or implied_publish_endpoint(endpoint)
        return Endpoints(endpoint, check_endpoint(publish) if publish else None, curve)
    directory = runtime_dir or client_runtime_dir(environ)
    return Endpoints(f"ipc://{directory}/{REQUEST_SOCKET}", f"ipc://{directory}/{PUBLISH_SOCKET}", curve)
