"""No way in through the user's own browser: the Host allow-list (DNS rebinding) and the cross-origin refusal
(a web page the user visits posting to this server). Pure functions over a request's headers; the middleware
in ``api.app`` applies them to every request before authentication.

* ``Host`` must name this server: ``localhost``, a loopback address, the bound address, an IP address when
  bound to all interfaces (``0.0.0.0``/``::``: a rebinding page can only send its own domain name), or a name
  in the ``allowed_hosts`` setting (the public name behind a reverse proxy; ``*`` turns the check off).
* A state-changing request (anything but GET, HEAD, OPTIONS) whose ``Origin`` is not this server's own
  (same host and port as ``Host``, or a host listed in ``allowed_hosts``), or that the browser marks
  ``Sec-Fetch-Site: cross-site`` / ``same-site``, is refused. Clients that are no browser send neither header.
* JSON routes take only ``application/json`` bodies (``api.requests.json_body``): a ``text/plain`` body is
  a "simple" request a foreign page could send without a preflight.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})


def split_host(value: str) -> tuple[str, str]:
    """``(host, port)`` of a Host header or netloc (``[::1]:8000`` → ``("::1", "8000")``), host lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    host, _, port = value.partition(":") if value.count(":") == 1 else (value, "", "")
    return host.rstrip("."), port


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostPolicy:
    bound: str  # the address the server listens on (settings.host)
    allowed: frozenset[str] = frozenset()  # settings.allowed_hosts, lower-cased; "*" = any

    @classmethod
    def from_settings(cls, host: str, allowed_hosts: str) -> "HostPolicy":
        names = frozenset(split_host(name)[0] if name.strip() != "*" else "*"
                          for name in allowed_hosts.split(",") if name.strip())
        return cls(bound=split_host(host)[0], allowed=names)

    def host_ok(self, host_header: str | None) -> bool:
        """Whether a request's Host names this server (no Host at all: no browser sent it)."""
        if host_header is None or "*" in self.allowed:
            return True
        host, _ = split_host(host_header)
        if host in self.allowed or host == self.bound or is_loopback(host):
            return True
        return self.bound in WILDCARD_BINDS and is_ip(host)

    def origin_ok(self, method: str, origin: str | None, fetch_site: str | None, host_header: str | None) -> bool:
        """Whether a request may change state: safe methods always; others only from this server's own pages
        (or from a client that is no browser: no Origin, no Sec-Fetch-Site)."""
        if method.upper() in SAFE_METHODS:
            return True
        if fetch_site is not None and fetch_site.strip().lower() in ("cross-site", "same-site"):
            return False
        if origin is None:
            return True
        parts = urlsplit(origin.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False  # "null" (sandboxed frames, file: pages) and anything unreadable
        origin_host, origin_port = split_host(parts.netloc)
        if host_header is not None and (origin_host, origin_port or default_port(parts.scheme)) == \
                _with_default_port(host_header, parts.scheme):
            return True
        return origin_host in self.allowed and origin_host != "*"


def default_port(scheme: str) -> str:
    return "443" if scheme == "https" else "80"


def _with_default_port(host_header: str, scheme: str) -> tuple[str, str]:
    host, port = split_host(host_header)
    return host, port or default_port(scheme)
