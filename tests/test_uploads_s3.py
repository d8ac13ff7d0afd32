"""Files in S3 (or R2): `S3Blobs` and `Files` against a real S3 API on loopback (moto's
server mode in a child process), and the real server storing uploads there.

Where moto cannot start, these tests are skipped and say why; with
CHAT_AGENT_REQUIRE_SERVICES=1 (CI) they fail instead."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chat_agent.files.blobs import BlobNotFound, S3Blobs, open_blobs
from chat_agent.config import Settings
from chat_agent.files.catalog import FileError, open_files
from chat_agent.store import CreateConversation
from tests.fakes.s3_server import CREDENTIALS, MotoS3, MotoUnavailable
from tests.test_files import image, word_document

REQUIRED = bool(os.environ.get("CHAT_AGENT_REQUIRE_SERVICES"))


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    try:
        server = MotoS3(tmp_path_factory.mktemp("moto")).__enter__()
    except MotoUnavailable as exc:
        if REQUIRED:
            pytest.fail(f"S3 tests need moto's server: {exc}")
        pytest.skip(f"S3 tests skipped: {exc}")
    yield server
    server.__exit__()


@pytest.fixture
def bucket(moto: MotoS3, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new bucket, and boto3 pointed at the fake credentials the way an operator would."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    name = f"chat-agent-{uuid.uuid4().hex[:12]}"
    moto.create_bucket(name)
    return name


async def test_s3_blobs_round_trip(moto: MotoS3, bucket: str) -> None:
    blobs = S3Blobs(bucket, endpoint_url=moto.endpoint_url)
    try:
        await blobs.put("file_1/original.png", b"one", "image/png")
        await blobs.put("file_1/original.png", b"two", "image/png")
        assert await blobs.get("file_1/original.png") == b"two"
        head = moto.client().head_object(Bucket=bucket, Key="file_1/original.png")
        assert head["ContentType"] == "image/png" and head["ContentLength"] == 3
        await blobs.delete("file_1/original.png")
        await blobs.delete("file_1/original.png")  # a missing blob is not an error
        with pytest.raises(BlobNotFound):
            await blobs.get("file_1/original.png")
        for bad in ("../x", "/x", ".x", "a//b"):
            with pytest.raises(ValueError):
                await blobs.put(bad, b"x", "text/plain")
    finally:
        await blobs.close()


async def test_a_missing_bucket_is_an_error_not_a_missing_file(moto: MotoS3, bucket: str) -> None:
    from botocore.exceptions import ClientError

    blobs = S3Blobs(bucket + "-gone", endpoint_url=moto.endpoint_url)
    with pytest.raises(ClientError, match="NoSuchBucket"):
        await blobs.put("k", b"x", "text/plain")
    with pytest.raises(ClientError, match="NoSuchBucket"):
        await blobs.get("k")
    await blobs.close()


async def test_files_in_s3(db, moto: MotoS3, bucket: str, tmp_path: Path) -> None:
    store, writer = db
    await store.apply([CreateConversation("alice", "c1", 1.0)])
    settings = Settings(data_dir=tmp_path, s3_bucket=bucket, s3_endpoint_url=moto.endpoint_url)
    files = open_files(settings, store, writer)
    try:
        assert isinstance(files.blobs, S3Blobs)
        png, document = image("PNG", (12, 8)), word_document("In the bucket")
        photo = await files.save("alice", png, "photo.png", conversation_id="c1")
        doc = await files.save("alice", document, "notes.docx", conversation_id="c1")
        assert (photo.width, photo.height) == (12, 8)
        assert await files.read("alice", photo.id) == (photo, png)
        assert [f.id for f in await files.in_conversation("alice", "c1")] == [photo.id, doc.id]
        await files.write_derived("alice", doc.id, "parsed.json", b"{}")
        assert await files.read_derived("alice", doc.id, "parsed.json") == b"{}"
        assert await files.read_derived("alice", doc.id, "other.json") is None
        keys = {o["Key"] for o in moto.client().list_objects_v2(Bucket=bucket)["Contents"]}
        assert keys == {photo.key, doc.key, f"{doc.id}/derived/parsed.json"}
        assert photo.key == f"{photo.id}/original.png"
        assert files.url(photo) == f"/api/uploads/{photo.id}"  # no public base: our owner-only route
        with pytest.raises(FileError):
            await files.read("bob", photo.id)
        assert not (tmp_path / "files").exists()  # nothing went to the data dir
    finally:
        await files.close()


async def test_a_public_bucket_serves_by_its_own_url(db, moto: MotoS3, bucket: str, tmp_path: Path) -> None:
    store, writer = db
    # Made public the way an operator does it, for anonymous reads of its objects.
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                                                      "Resource": f"arn:aws:s3:::{bucket}/*"}]}
    moto.client().put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    base = f"{moto.endpoint_url}/{bucket}"  # what an R2 public bucket's URL is to the bucket
    settings = Settings(data_dir=tmp_path, s3_bucket=bucket, s3_endpoint_url=moto.endpoint_url,
                        s3_public_base_url=base + "/")
    files = open_files(settings, store, writer)
    try:
        png = image("PNG")
        saved = await files.save("alice", png, "shared.png")
        assert files.url(saved) == f"{base}/{saved.id}/original.png"
        got = httpx.get(files.url(saved))  # fetched anonymously, as a browser would
        assert got.status_code == 200 and got.content == png
        assert got.headers["content-type"] == "image/png"
    finally:
        await files.close()


def test_open_blobs_uses_the_endpoint(moto: MotoS3, bucket: str) -> None:
    blobs = open_blobs(Settings(s3_bucket=bucket, s3_endpoint_url=moto.endpoint_url))
    assert isinstance(blobs, S3Blobs)
    assert blobs._client.meta.endpoint_url == moto.endpoint_url


def test_the_server_stores_uploads_in_s3(make_server, moto: MotoS3, bucket: str, tmp_path: Path) -> None:
    server = make_server(CHAT_AGENT_S3_BUCKET=bucket, CHAT_AGENT_S3_ENDPOINT_URL=moto.endpoint_url, **CREDENTIALS)
    png = image("PNG", (64, 48))
    response = httpx.post(f"{server.http_url}/api/uploads", files={"file": ("chart.png", png, "image/png")})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body == {"uploadId": body["uploadId"], "filename": "chart.png", "mediaType": "image/png",
                    "size": len(png)}
    stored = moto.client().get_object(Bucket=bucket, Key=f"{body['uploadId']}/original.png")
    assert stored["Body"].read() == png and stored["ContentType"] == "image/png"
    got = httpx.get(f"{server.http_url}/api/uploads/{body['uploadId']}")
    assert got.status_code == 200 and got.content == png
    assert not (server.data_dir / "files").exists()
