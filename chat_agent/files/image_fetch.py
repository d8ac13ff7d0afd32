"""Downloading an image by URL without letting the URL reach our own network (SSRF).

`fetch_image` follows one rule on every hop, redirects included: resolve the host, refuse
the hop if any address it resolved to is not public (`check_address`), then connect to
those checked addresses and nothing else. The connection goes through httpcore with a
network backend pinned to the checked addresses: whatever host the URL names, the socket
goes to an address we checked, so the name is never looked up a second time (no DNS
rebinding between check and connect), while the URL keeps its host, so the Host header,
TLS SNI and certificate verification are the real host's. No proxy from the environment
is consulted. The body is read as a stream and abandoned past `max_bytes`; the whole
fetch, every hop, runs under one deadline.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence

import httpcore
import httpx

from chat_agent.files.images import ImageError, image_format

Resolver = Callable[[str], Awaitable[Sequence[str]]]

MAX_REDIRECTS = 5
_PORTS = {"http": 80, "https": 443}
_REDIRECTS = {301, 302, 303, 307, 308}
_HEADERS = [(b"Accept", b"image/*"), (b"Accept-Encoding", b"identity"),
            (b"User-Agent", b"chat-agent-image-fetch")]

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_V4_BLOCKED = tuple(ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
    "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
))
_V6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_V6_BLOCKED = tuple(ipaddress.IPv6Network(n) for n in (
    "2001::/23", "2001:db8::/32", "3fff::/20",  # IETF protocol assignments (Teredo...), documentation
))
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def check_address(ip: str) -> None:
    """Raises ImageError unless `ip` is a public unicast address.

    Refused: loopback, private, shared (CGNAT 100.64/10), link-local, multicast,
    broadcast, unspecified, reserved, benchmarking and documentation ranges, IPv6
    unique-local and site-local, scoped IPv6, Teredo; an IPv4 address carried in IPv6
    (IPv4-mapped ::ffff:0:0/96, 6to4 2002::/16, NAT64 64:ff9b::/96) is judged as that
    IPv4 address. Our own lists, so the answer does not depend on the Python release.
    """
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        raise ImageError("The image's host did not resolve to a valid address.") from None
    if not _public(address):
        raise ImageError("The image URL points to a private or reserved network address.")


def _public(address: _IP) -> bool:
    if isinstance(address, ipaddress.IPv4Address):
        return _public_v4(address)
    if address.scope_id:
        return False
    embedded = address.ipv4_mapped or address.sixtofour
    if embedded is None and address in _NAT64:
        embedded = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    if embedded is not None:
        return _public_v4(embedded)
    return (address in _V6_GLOBAL_UNICAST and address.teredo is None and address.is_global
            and not any(address in net for net in _V6_BLOCKED))


def _public_v4(address: ipaddress.IPv4Address) -> bool:
    return address.is_global and not any(address in net for net in _V4_BLOCKED)


async def fetch_image(url: str, *, max_bytes: int = 20 * 1024 * 1024, timeout: float = 15.0,
                      resolver: Resolver | None = None,
                      network_backend: httpcore.AsyncNetworkBackend | None = None) -> bytes:
    """Downloads the image at an http(s) URL and returns its bytes (unchecked beyond being
    an image: give them to `prepare_image`). Raises ImageError, with a message fit for the
    client, for a refused URL or address, a failed or slow download, too many bytes, too
    many redirects, or a response that is not an image.

    `resolver` (host -> IP addresses) replaces the system's DNS lookup. `network_backend`
    is the test seam: it opens the sockets, and is only ever asked for an address that
    already passed `check_address` (tests map a public address to a local server).
    """
    backend = network_backend or httpcore.AnyIOBackend()
    try:
        async with asyncio.timeout(timeout):
            return await _follow(url, max_bytes, resolver, backend)
    except (TimeoutError, httpcore.TimeoutException):
        raise ImageError(f"Downloading the image took longer than {timeout:g} seconds.") from None
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol,
            OSError) as exc:
        raise ImageError("Could not download the image: the connection failed.") from exc


async def _follow(url: str, max_bytes: int, resolver: Resolver | None,
                  backend: httpcore.AsyncNetworkBackend) -> bytes:
    target = _parse(url)
    for _ in range(MAX_REDIRECTS + 1):
        port = target.port or _PORTS[target.scheme]
        addresses = await _resolve(target.raw_host.decode("ascii"), port, resolver)
        for address in addresses:
            check_address(address)
        body, location = await _get(target, _PinnedBackend(addresses, backend), max_bytes)
        if location is None:
            return body
        try:
            target = _parse(target.join(location))
        except httpx.InvalidURL:
            raise ImageError("The image URL redirected to an invalid URL.") from None
    raise ImageError(f"The image URL redirected more than {MAX_REDIRECTS} times.")


def _parse(url: str | httpx.URL) -> httpx.URL:
    try:
        target = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise ImageError("The image URL is not a valid URL.") from None
    if target.scheme not in _PORTS:
        raise ImageError("Only http and https image URLs are allowed.")
    if not target.raw_host:
        raise ImageError("The image URL has no host.")
    if target.userinfo:
        raise ImageError("The image URL must not contain a user name or password.")
    return target


async def _resolve(host: str, port: int, resolver: Resolver | None) -> list[str]:
    """The host's addresses, in order, without duplicates; an IP literal is its own."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        if resolver is not None:
            found = [str(a) for a in await resolver(host)]
        else:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
            found = [str(info[4][0]) for info in infos]
    except OSError:
        raise ImageError("Could not find the image's host.") from None
    if not found:
        raise ImageError("Could not find the image's host.")
    return list(dict.fromkeys(found))


async def _get(target: httpx.URL, backend: httpcore.AsyncNetworkBackend,
               max_bytes: int) -> tuple[bytes, str | None]:
    """One GET: (body, None), or (b"", where a redirect points)."""
    url = httpcore.URL(scheme=target.raw_scheme, host=target.raw_host, port=target.port,
                       target=target.raw_path)
    headers = [(b"Host", target.netloc), *_HEADERS]
    async with httpcore.AsyncConnectionPool(network_backend=backend, retries=0) as pool:
        async with pool.stream("GET", url, headers=headers) as response:
            fields = {k.decode("latin-1").lower(): v.decode("latin-1")
                      for k, v in response.headers}
            if response.status in _REDIRECTS:
                if "location" not in fields:
                    raise ImageError("The image URL redirected without saying where.")
                return b"", fields["location"]
            if response.status != 200:
                raise ImageError(f"The image URL answered with HTTP status {response.status}.")
            if fields.get("content-encoding", "identity").strip().lower() != "identity":
                raise ImageError("The image server sent a compressed response.")
            body = await _read(response, fields.get("content-length", ""), max_bytes)
    content_type = fields.get("content-type", "").split(";")[0].strip().lower()
    if not content_type.startswith("image/") and image_format(body) is None:
        raise ImageError("The URL did not return an image.")
    return body, None


async def _read(response: httpcore.Response, length: str, max_bytes: int) -> bytes:
    too_big = ImageError(f"The image is larger than {max_bytes:,} bytes.")
    if length.strip().isdigit() and int(length) > max_bytes:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_big  # leaving the stream closes the connection: the rest is never read
        chunks.append(chunk)
    return b"".join(chunks)


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the checked addresses, in order, whatever host it is asked for."""

    def __init__(self, addresses: Sequence[str], inner: httpcore.AsyncNetworkBackend) -> None:
        self._addresses = list(addresses)
        self._inner = inner

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: object = None) -> httpcore.AsyncNetworkStream:
        error: Exception = httpcore.ConnectError("no address")
        for address in self._addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address,
                    socket_options=socket_options)  # type: ignore[arg-type]
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        raise error

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: object = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not used here")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
