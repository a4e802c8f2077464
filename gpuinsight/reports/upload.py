"""Upload a written report (HTML, and the PNG/SVG charts) to S3 or an S3-compatible store.

The endpoint is an explicit argument (for MinIO, Ceph, or a test server); ``None`` means
AWS itself (or whatever boto3's own configuration says). Credentials come from boto3's
usual chain: IRSA / pod identity, instance profile, environment, shared config.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from gpuinsight.errors import BadInput, RuntimeFailure

_TYPES = {".html": "text/html; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
          ".json": "application/json"}


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ("bucket", "some/prefix") (prefix without slashes at the ends)."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise BadInput(f"--upload: expected s3://bucket[/prefix], got {url!r}")
    return parsed.netloc, parsed.path.strip("/")


def s3_client(endpoint_url: str | None = None, region: str | None = None) -> Any:
    import boto3

    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name=region)


def upload_files(files: Iterable[tuple[Path, str]], url: str, *, endpoint_url: str | None = None,
                 client: Any = None) -> list[str]:
    """Upload ``(local path, key relative to the prefix)`` pairs; return the s3:// URLs.

    Errors (no credentials, no bucket, access denied, endpoint down) become one-line
    :class:`RuntimeFailure` messages that name the bucket and key, never a credential.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = parse_s3_url(url)
    s3 = client or s3_client(endpoint_url)
    done: list[str] = []
    for path, rel in files:
        key = f"{prefix}/{rel}" if prefix else rel
        ctype = _TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes(), ContentType=ctype)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise RuntimeFailure(
                f"upload to s3://{bucket}/{key} failed: {err.get('Code', 'error')}: {err.get('Message', '')}".rstrip(": ")
            ) from exc
        except (BotoCoreError, OSError) as exc:
            raise RuntimeFailure(f"upload to s3://{bucket}/{key} failed: {exc}") from exc
        done.append(f"s3://{bucket}/{key}")
    return done
