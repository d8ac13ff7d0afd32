"""Where the bytes of files live: a directory under the data dir, or an S3 / R2 bucket.

Keys are made by chat_agent.files from generated ids (never from a client's file name),
and are checked again here: a few path segments of letters, digits, '.', '_' and '-',
none starting with a dot, so no key can climb out of the directory or hide a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from chat_agent.config import Settings

log = logging.getLogger(__name__)

_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}){0,7}")


class BlobNotFound(KeyError):
    """No blob has that key."""


class Blobs(Protocol):
    async def put(self, key: str, data: bytes, media_type: str) -> None: ...

    async def get(self, key: str) -> bytes:
        """The blob's bytes; BlobNotFound if there is none."""
        ...

    async def delete(self, key: str) -> None:
        """Removes the blob; a missing one is not an error."""
        ...

    async def close(self) -> None: ...


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise ValueError(f"invalid blob key {key!r}")
    return key


class LocalBlobs:
    """One file per key under `root`. A put writes a temporary file beside the target and
    renames it over, so a reader (or a crash) never sees half a file."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalBlobs({str(self.root)!r})"

    async def put(self, key: str, data: bytes, media_type: str) -> None:
        await asyncio.to_thread(self._put, self._path(key), data)

    async def get(self, key: str) -> bytes:
        try:
            return await asyncio.to_thread(self._path(key).read_bytes)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise BlobNotFound(key) from None

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._path(key).unlink, missing_ok=True)

    async def close(self) -> None:
        pass

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    @staticmethod
    def _put(path: Path, data: bytes) -> None:
        made_folder = not path.parent.is_dir()
        path.parent.mkdir(parents=True, exist_ok=True)
        temp: str | None = None
        try:
            fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                # The store row that points here is committed after this returns: the
                # bytes must be on disk before it.
                os.fsync(out.fileno())
            os.replace(temp, path)
        except BaseException:
            if temp is not None:
                Path(temp).unlink(missing_ok=True)
            if made_folder:  # a failed write (a full disk, say) leaves no empty folder behind
                with contextlib.suppress(OSError):
                    path.parent.rmdir()
            raise


class S3Blobs:
    """Objects in an S3 bucket, or any S3 API (Cloudflare R2, MinIO, moto) at `endpoint_url`.

    Credentials and region come the boto3 way (AWS_ACCESS_KEY_ID..., a profile, an
    instance role). boto3 is blocking: every call runs in a worker thread."""

    def __init__(self, bucket: str, *, endpoint_url: str | None = None):
        import boto3  # slow to import: only a server that stores in S3 pays for it
        from botocore.config import Config

        self.bucket = bucket
        config = Config(connect_timeout=10, read_timeout=60, retries={"max_attempts": 4, "mode": "standard"})
        self._client: Any = boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)

    def __repr__(self) -> str:
        return f"S3Blobs({self.bucket!r})"

    async def put(self, key: str, data: bytes, media_type: str) -> None:
        await asyncio.to_thread(self._client.put_object, Bucket=self.bucket, Key=check_key(key), Body=data,
                                ContentType=media_type)

    async def get(self, key: str) -> bytes:
        return await asyncio.to_thread(self._get, check_key(key))

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._client.delete_object, Bucket=self.bucket, Key=check_key(key))

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)

    def _get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            response = self._client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                raise BlobNotFound(key) from None
            raise
        with response["Body"] as body:
            return body.read()


def open_blobs(settings: Settings) -> Blobs:
    """S3 (or R2) when CHAT_AGENT_S3_BUCKET is set, else files under the data dir."""
    if settings.s3_bucket:
        return S3Blobs(settings.s3_bucket, endpoint_url=settings.s3_endpoint_url)
    if settings.s3_public_base_url:
        log.warning("CHAT_AGENT_S3_PUBLIC_BASE_URL is set without CHAT_AGENT_S3_BUCKET: ignored, "
                    "files are stored under the data dir and served by /api/uploads")
    return LocalBlobs(Path(settings.data_dir) / "files")
