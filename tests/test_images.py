"""prepare_image on real images made with Pillow; fetch_image against a real local HTTP server.

The allowed fetch path needs a public address, and the tests have no internet. Two seams
stand in for the network, neither touching the checks: the `resolver` answers names
(images.example -> a public address), and a `network_backend` opens the sockets, mapping
that public address to the local server. fetch_image checks every address before it asks
the backend for a connection, so the backend only ever sees checked addresses; it fails
the test if asked for anything else. (Documentation ranges such as 203.0.113.0/24 are not
globally routable, so check_address refuses them: the stand-in is a real public address.)
"""

from __future__ import annotations

import base64
import io
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import httpcore
import pytest
from PIL import Image

from chat_agent.files.image_fetch import MAX_REDIRECTS, check_address, fetch_image
from chat_agent.files.images import ImageError, PreparedImage, prepare_image
from tests import pace

FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


def encode(image: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **params)
    return out.getvalue()


def picture(size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    """Left half red, right half blue: lets a test see which way the image is turned."""
    image = Image.new(mode, size, "blue")
    image.paste("red", (0, 0, size[0] // 2, size[1]))
    return image


def noise(size: tuple[int, int]) -> Image.Image:
    """Random pixels: what PNG cannot compress."""
    return Image.merge("RGB", [Image.effect_noise(size, 80) for _ in range(3)])


def decoded(prepared: PreparedImage) -> Image.Image:
    image = Image.open(io.BytesIO(prepared.data))
    assert Image.MIME[image.format] == prepared.media_type
    assert image.size == (prepared.width, prepared.height)
    return image


def with_size(png: bytes, width: int, height: int) -> bytes:
    """The PNG with its IHDR declaring another size (checksum fixed): a tiny file that
    claims a huge image."""
    header = b"IHDR" + struct.pack(">II", width, height) + png[24:29]
    return png[:12] + header + struct.pack(">I", zlib.crc32(header)) + png[33:]


# --- prepare_image ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_allowed_format_passes_unchanged(fmt: str) -> None:
    data = encode(picture((64, 48)), fmt)
    prepared = prepare_image(data)
    assert prepared == PreparedImage(FORMATS[fmt], data, 64, 48)


@pytest.mark.parametrize(("fmt", "out"), [("PNG", "PNG"), ("JPEG", "JPEG"), ("WEBP", "WEBP"),
                                          ("GIF", "PNG")])
def test_oversize_is_scaled_to_1568_keeping_the_aspect_ratio(fmt: str, out: str) -> None:
    prepared = prepare_image(encode(picture((3136, 1000)), fmt))
    assert (prepared.width, prepared.height) == (1568, 500)
    assert decoded(prepared).format == out
    tall = prepare_image(encode(picture((600, 2000)), fmt), long_edge=1000)
    assert (tall.width, tall.height) == (300, 1000)


def test_transparency_survives_scaling() -> None:
    image = Image.new("RGBA", (2000, 1000), (0, 0, 0, 0))
    image.paste((255, 0, 0, 255), (0, 0, 1000, 1000))
    result = decoded(prepare_image(encode(image, "PNG")))
    assert result.mode == "RGBA" and result.size == (1568, 784)
    assert result.getpixel((1500, 400))[3] == 0 and result.getpixel((10, 10)) == (255, 0, 0, 255)


def test_exif_orientation_is_applied() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # stored lying down: turn 90 degrees clockwise to display
    data = encode(picture((200, 100)), "JPEG", exif=exif.tobytes(), quality=95)
    result = decoded(prepare_image(data))
    assert result.size == (100, 200)
    top, bottom = result.getpixel((50, 20)), result.getpixel((50, 180))
    assert top[0] > 200 > top[2] and bottom[2] > 200 > bottom[0]  # the red half went on top
    assert result.getexif().get(0x0112, 1) == 1


def test_a_cmyk_jpeg_is_sent_as_rgb() -> None:
    result = decoded(prepare_image(encode(Image.new("CMYK", (60, 40), "cyan"), "JPEG")))
    assert result.mode == "RGB" and result.size == (60, 40)


def test_animated_gif_becomes_its_first_frame() -> None:
    frames = [Image.new("RGB", (40, 30), color) for color in ("red", "blue")]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    result = decoded(prepare_image(out.getvalue()))
    assert result.format == "PNG" and getattr(result, "n_frames", 1) == 1
    assert result.convert("RGB").getpixel((20, 15)) == (255, 0, 0)


def test_too_many_bytes_after_scaling_becomes_a_smaller_jpeg() -> None:
    data = encode(noise((600, 600)), "PNG")
    limit = len(data) // 2
    prepared = prepare_image(data, max_bytes=limit)
    assert prepared.media_type == "image/jpeg"
    assert len(base64.b64encode(prepared.data)) <= limit
    decoded(prepared)


def test_max_bytes_counts_the_base64_form_the_api_measures() -> None:
    data = encode(noise((100, 100)), "PNG")
    limit = len(data) + 1  # the raw bytes fit, their base64 does not
    assert prepare_image(data, max_bytes=limit).media_type == "image/jpeg"
    assert prepare_image(data, max_bytes=len(base64.b64encode(data))).data == data


def test_a_decompression_bomb_is_refused_from_its_header() -> None:
    tiny = encode(Image.new("L", (1, 1)), "PNG")
    before = Image.MAX_IMAGE_PIXELS
    start = time.perf_counter()
    with pytest.raises(ImageError, match="too many pixels"):
        prepare_image(with_size(tiny, 100_000, 100_000))  # past Pillow's own hard limit
    with pytest.raises(ImageError, match="too large: 8000x8000 pixels"):
        prepare_image(with_size(tiny, 8000, 8000))  # under Pillow's, over ours
    assert time.perf_counter() - start < pace.scaled(0.5)  # nothing was decoded
    assert Image.MAX_IMAGE_PIXELS == before


def test_a_highly_compressible_huge_image_is_refused() -> None:
    data = encode(Image.new("1", (7000, 6000)), "PNG")  # 42 million pixels in a few KB
    assert len(data) < 100_000
    with pytest.raises(ImageError, match="7000x6000"):
        prepare_image(data)
    with pytest.raises(ImageError, match="limit is 1,000 pixels"):
        prepare_image(encode(picture((40, 40)), "PNG"), max_pixels=1000)


@pytest.mark.parametrize("data", [b"just some text, saved as photo.png\n" * 20,
                                  b'{"image": "not really"}', "caf\u00e9 \u2615".encode()])
def test_text_is_not_an_image(data: bytes) -> None:
    with pytest.raises(ImageError, match="text, not an image"):
        prepare_image(data)


@pytest.mark.parametrize("fmt", ["BMP", "TIFF", "ICO", "PPM"])
def test_other_formats_are_refused(fmt: str) -> None:
    with pytest.raises(ImageError, match="PNG, JPEG, GIF or WEBP"):
        prepare_image(encode(picture((32, 32)), fmt))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "GIF"])
def test_a_truncated_file_is_refused(fmt: str) -> None:
    image = Image.effect_mandelbrot((256, 256), (-2, -1.5, 1, 1.5), 100).convert("RGB")
    data = encode(image, fmt)
    with pytest.raises(ImageError):
        prepare_image(data[: len(data) // 2])


def test_a_corrupt_png_is_refused() -> None:
    data = bytearray(encode(picture((64, 64)), "PNG"))
    data[-20] ^= 0xFF  # inside the image data: its checksum no longer matches
    with pytest.raises(ImageError, match="damaged"):
        prepare_image(bytes(data))


def with_chunk_before_data(png: bytes, kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    """`png` with one more chunk right after IHDR (where Pillow checks checksums on open)."""
    crc = zlib.crc32(kind + body) if crc is None else crc
    return png[:33] + struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc) + png[33:]


def test_a_damaged_ancillary_chunk_is_dropped_and_the_image_passes() -> None:
    """Like the reference MCP "everything" server's sample image: one text chunk with a
    wrong checksum. The picture is whole, so it goes through, less that chunk."""
    clean = encode(picture((40, 30)), "PNG")
    damaged = with_chunk_before_data(clean, b"tEXt", b"Comment\0hello", crc=0xDEADBEEF)
    with pytest.raises(Exception):
        Image.open(io.BytesIO(damaged))  # what Pillow alone does with it
    prepared = prepare_image(damaged)
    assert (prepared.media_type, prepared.width, prepared.height) == ("image/png", 40, 30)
    assert prepared.data == clean
    intact = with_chunk_before_data(clean, b"tEXt", b"Comment\0hello")
    assert prepare_image(intact).data == intact  # sound chunks stay


def test_a_damaged_critical_chunk_is_refused_saying_which() -> None:
    data = bytearray(encode(picture((8, 8)), "PNG"))
    data[29] ^= 0xFF  # the IHDR chunk's checksum
    with pytest.raises(ImageError, match="PNG image is damaged: its IHDR chunk has a bad checksum"):
        prepare_image(bytes(data))


@pytest.mark.parametrize("data, what", [
    (b"%PDF-1.7\n%\xe2\xe3\n1 0 obj", "a PDF document, not an image"),
    (b"<!DOCTYPE html><html><body>404</body></html>", "an HTML page, not an image"),
    (b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"/>', "an SVG drawing, not an image"),
    (b"PK\x03\x04" + bytes(40), "a ZIP archive, not an image"),
    (b"\x00\x00\x00\x18ftypheic" + bytes(40), "a HEIC image; an image must be a PNG, JPEG, GIF or WEBP"),
    (b"\x01\xff\xfe\x80" * 16, "not an image \\(it starts with the bytes 01 ff fe 80 01 ff fe 80\\)"),
])
def test_what_is_not_an_image_is_named(data: bytes, what: str) -> None:
    with pytest.raises(ImageError, match=f"The file is {what}"):
        prepare_image(data)


def test_empty_is_refused() -> None:
    with pytest.raises(ImageError, match="empty"):
        prepare_image(b"")


# --- check_address ------------------------------------------------------------------


@pytest.mark.parametrize("ip", [
    "127.0.0.1", "127.8.8.8", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
    "0.0.0.0", "0.1.2.3", "100.64.0.1", "100.127.255.254", "192.0.0.170", "192.0.2.1",
    "198.18.0.1", "198.51.100.7", "203.0.113.7", "224.0.0.1", "239.255.255.250",
    "240.0.0.1", "255.255.255.255",
    "::", "::1", "fe80::1", "fe80::1%eth0", "fec0::1", "fc00::1", "fd12:3456::1", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1",
    "2002:7f00:1::1", "2002:a9fe:a9fe::1", "64:ff9b::a00:1", "64:ff9b:1::1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:db8::1", "100::1",
    "localhost", "", "1.2.3",
])
def test_check_address_refuses(ip: str) -> None:
    with pytest.raises(ImageError):
        check_address(ip)


@pytest.mark.parametrize("ip", ["8.8.8.8", "93.184.215.14", "1.1.1.1", "2606:4700:4700::1111",
                                "::ffff:8.8.8.8", "2002:808:808::1", "64:ff9b::808:808"])
def test_check_address_accepts_public_addresses(ip: str) -> None:
    check_address(ip)


# --- fetch_image --------------------------------------------------------------------

PNG = encode(picture((32, 32)), "PNG")
PUBLIC = "93.184.215.14"  # what the test resolver gives images.example


class Handler(BaseHTTPRequestHandler):
    server: Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.seen.append((self.path, self.headers.get("Host")))
        route = getattr(self, "route_" + self.path.strip("/").replace("-", "_").replace(".", "_"), self.route_404)
        route()

    def send(self, status: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def route_x_png(self) -> None:
        self.send(200, PNG, Content_Type="image/png")

    def route_octet(self) -> None:
        self.send(200, PNG, Content_Type="application/octet-stream")

    def route_page(self) -> None:
        self.send(200, b"<html><body>no image here</body></html>", Content_Type="text/html")

    def route_big(self) -> None:
        self.send(200, bytes(3_000_000), Content_Type="image/png")

    def route_endless(self) -> None:  # no length: the body ends when the connection does
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.end_headers()
        try:
            for _ in range(1000):  # 64 MB at most, should the client never stop
                self.wfile.write(bytes(65536))
        except OSError:
            pass

    def route_slow(self) -> None:
        self.server.release.wait(5)
        self.send(200, PNG, Content_Type="image/png")

    def route_relative(self) -> None:
        self.send(302, Location="/x.png")

    def route_to_local(self) -> None:
        self.send(302, Location=f"http://127.0.0.1:{self.server.server_port}/x.png")

    def route_to_internal(self) -> None:
        self.send(301, Location="http://internal.example/x.png")

    def route_to_ftp(self) -> None:
        self.send(307, Location="ftp://images.example/x.png")

    def route_loop(self) -> None:
        self.send(302, Location="/loop")

    def route_404(self) -> None:
        self.send(404, b"not found")

    def log_message(self, *args: object) -> None:
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[tuple[str, str | None]] = []
        self.release = threading.Event()

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.seen]


@pytest.fixture(scope="module")
def http_server() -> Iterator[Server]:
    server = Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def server(http_server: Server) -> Server:
    http_server.seen.clear()
    return http_server


class LocalBackend(httpcore.AnyIOBackend):
    """Opens the sockets: PUBLIC goes to the local server, anything else fails the test."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.asked: list[str] = []

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.asked.append(host)
        assert host == PUBLIC, f"asked to connect to {host}"
        return await super().connect_tcp("127.0.0.1", self.server.server_port, timeout=timeout)


NAMES = {"images.example": [PUBLIC], "mixed.example": [PUBLIC, "10.0.0.1"],
         "internal.example": ["10.1.2.3"], "sneaky.example": ["::ffff:127.0.0.1"]}


async def resolver(host: str) -> list[str]:
    return NAMES[host]


@pytest.fixture
def backend(server: Server) -> LocalBackend:
    return LocalBackend(server)


async def fetch(url: str, backend: LocalBackend, **limits) -> bytes:
    return await fetch_image(url, resolver=resolver, network_backend=backend, **limits)


async def test_a_loopback_url_is_refused_before_connecting(server: Server) -> None:
    with pytest.raises(ImageError, match="private or reserved"):
        await fetch_image(f"http://127.0.0.1:{server.server_port}/x.png")  # production path
    assert server.seen == []


@pytest.mark.parametrize("url", [
    "http://localhost:{port}/x.png", "http://[::1]:{port}/x.png", "http://10.0.0.1/x.png",
    "http://169.254.169.254/latest/meta-data/", "http://0.0.0.0:{port}/x.png",
    "http://2130706433:{port}/x.png", "http://[::ffff:127.0.0.1]:{port}/x.png",
    "ftp://images.example/x.png", "file:///etc/passwd", "data:image/png;base64,AAAA",
    "http://user:secret@images.example/x.png", "http:///x.png", "not a url",
])
async def test_refused_urls_never_connect(url: str, server: Server, backend: LocalBackend) -> None:
    with pytest.raises(ImageError):
        await fetch_image(url.format(port=server.server_port), network_backend=backend)
    assert backend.asked == [] and server.seen == []


@pytest.mark.parametrize("host", ["mixed.example", "internal.example", "sneaky.example"])
async def test_a_name_with_any_private_address_is_refused(host: str, server: Server,
                                                         backend: LocalBackend) -> None:
    with pytest.raises(ImageError, match="private or reserved"):
        await fetch(f"http://{host}/x.png", backend)
    assert backend.asked == [] and server.seen == []


async def test_an_allowed_host_is_fetched_from_the_checked_address(server: Server,
                                                                   backend: LocalBackend) -> None:
    assert await fetch("http://images.example/x.png", backend) == PNG
    assert backend.asked == [PUBLIC]
    assert server.seen == [("/x.png", "images.example")]  # the URL's host, not the address


async def test_the_name_is_resolved_once_so_it_cannot_rebind(server: Server,
                                                              backend: LocalBackend) -> None:
    answers = [[PUBLIC], ["127.0.0.1"]]  # a rebinding DNS server: public, then loopback

    async def rebinding(host: str) -> list[str]:
        return answers.pop(0)

    assert await fetch_image("http://images.example/x.png", resolver=rebinding,
                             network_backend=backend) == PNG
    assert answers == [["127.0.0.1"]] and backend.asked == [PUBLIC]


async def test_the_content_type_or_the_bytes_must_say_image(server: Server,
                                                           backend: LocalBackend) -> None:
    assert await fetch("http://images.example/octet", backend) == PNG
    with pytest.raises(ImageError, match="did not return an image"):
        await fetch("http://images.example/page", backend)
    with pytest.raises(ImageError, match="HTTP status 404"):
        await fetch("http://images.example/missing", backend)


async def test_redirects_are_followed_and_checked_hop_by_hop(server: Server,
                                                            backend: LocalBackend) -> None:
    assert await fetch("http://images.example/relative", backend) == PNG
    assert server.paths == ["/relative", "/x.png"]
    server.seen.clear()
    for path in ("to-local", "to-internal"):
        with pytest.raises(ImageError, match="private or reserved"):
            await fetch(f"http://images.example/{path}", backend)
    with pytest.raises(ImageError, match="Only http and https"):
        await fetch("http://images.example/to-ftp", backend)
    assert server.paths == ["/to-local", "/to-internal", "/to-ftp"]  # never the second hop


async def test_redirects_stop_after_five(server: Server, backend: LocalBackend) -> None:
    with pytest.raises(ImageError, match="more than 5 times"):
        await fetch("http://images.example/loop", backend)
    assert server.paths == ["/loop"] * (MAX_REDIRECTS + 1)


async def test_the_size_limit_holds_with_or_without_a_length(server: Server,
                                                             backend: LocalBackend) -> None:
    start = time.perf_counter()
    with pytest.raises(ImageError, match="larger than 1,000,000 bytes"):
        await fetch("http://images.example/big", backend, max_bytes=1_000_000)
    with pytest.raises(ImageError, match="larger than 1,000,000 bytes"):
        await fetch("http://images.example/endless", backend, max_bytes=1_000_000)
    assert time.perf_counter() - start < pace.scaled(2)  # stopped reading, did not drain 64 MB


async def test_the_time_limit_holds(server: Server, backend: LocalBackend) -> None:
    start = time.perf_counter()
    with pytest.raises(ImageError, match="longer than 0.3 seconds"):
        await fetch("http://images.example/slow", backend, timeout=0.3)
    assert time.perf_counter() - start < pace.scaled(1.5)
