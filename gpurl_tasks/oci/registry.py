"""OCI distribution client: tag -> digest, manifest/index, layer sizes, image config, auth.

Only what verify-layers and pin need, spoken over httpx: every request has a timeout, is
retried a bounded number of times on connection errors, 429 (honouring Retry-After) and 5xx
(writer/retry.py's rules, which the cluster job's crane calls follow too), a blob upload
restarted from a new session, and every manifest or config body is checked against the sha256
it was fetched by, so a truncated or tampered response is an error and never a silently wrong answer.

Auth follows the registry's challenge: anonymous first; on 401 the `WWW-Authenticate` header
says Basic (send the credentials) or Bearer (fetch a token from the realm, as ghcr.io does).
Credentials never appear in an exception message, a log line or a repr, and travel in the
clear (plain HTTP) only to a loopback host. The scheme (`oci/scheme.py`: HTTPS first for a
loopback host, plain HTTP only if it does not speak TLS) is decided by the first request that
connects and kept for the client's life.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import httpx

from gpurl_tasks.errors import RegistryError, Unreachable, unreachable_hint
from gpurl_tasks.imageref import DIGEST_RE, ImageRef, is_loopback
from gpurl_tasks.oci.auth import Credentials, credential_hint, parse_challenge
from gpurl_tasks.oci.image import (
    ACCEPT_MANIFESTS,
    IMAGE_TYPES,
    INDEX_TYPES,
    MALFORMED_HINT,
    Descriptor,
    ImageIndex,
    PulledImage,
    parse_config,
    parse_manifest,
    same_platform,
)
from gpurl_tasks.oci.scheme import (
    HTTP,
    HTTPS,
    candidate_schemes,
    credentials_allowed,
    tls_failure,
    untrusted_certificate,
)
from gpurl_tasks.writer.ocispec import OCI_INDEX, OCI_MANIFEST
from gpurl_tasks.writer.retry import RetryRules, retryable_status

__all__ = ["ManifestUnknown", "PushAccess", "RegistryClient"]

# How push access to a repository was established (`RegistryClient.push_access`).
PushAccess = Literal["anonymous", "basic", "bearer", "upload"]

_MAX_DOCUMENT = 16 * 2**20  # manifests and configs are small; refuse to buffer more


class RegistryUnreachable(RegistryError, Unreachable):
    """The registry's host did not answer from this machine (every attempt failed)."""


class _Again(Exception):
    """A request failed in a way worth retrying, for a caller that starts over itself."""

    def __init__(self, answer: str, retry_after: str | None) -> None:
        super().__init__(answer)
        self.answer, self.retry_after = answer, retry_after


class ManifestUnknown(RegistryError):
    """The registry has no manifest under that tag or digest (HTTP 404)."""


class RegistryClient:
    """One registry host; reuse an instance for a run so tokens and connections are shared."""

    def __init__(
        self,
        host: str,
        *,
        credentials: Credentials | None = None,
        insecure: bool | None = None,
        timeout: float = 30.0,
        attempts: int = 4,
        backoff: float = 0.5,
        max_wait: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        self.host = host
        schemes = candidate_schemes(host, insecure)
        self._scheme = schemes[0]
        self._decided = len(schemes) == 1  # else HTTPS until a request shows it is not TLS
        self._credentials = credentials
        self._rules = RetryRules(attempts=max(1, attempts), max_wait=max_wait, backoff=backoff)
        self._sleep = sleep
        self._on_retry = on_retry  # one line per retry (what failed, the wait)
        self._tokens: dict[str, str] = {}
        self._use_basic = False
        self._http = httpx.Client(timeout=httpx.Timeout(timeout), follow_redirects=True,
                                  transport=transport, headers={"User-Agent": "gpurl"})

    @property
    def base_url(self) -> str:
        return f"{self._scheme}://{self.host}"

    def _shown(self) -> str:
        """The registry's URL once a request has fixed the scheme; before that its host."""
        return self.base_url if self._decided else self.host

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- public API -------------------------------------------------------------------

    def resolve(self, ref: ImageRef) -> str:
        """The digest a tag (or digest) points at, from Docker-Content-Digest."""
        if ref.digest:
            return ref.digest
        response = self._request("HEAD", ref, f"manifests/{ref.reference}",
                                 headers={"Accept": ACCEPT_MANIFESTS})
        digest = str(response.headers.get("Docker-Content-Digest", ""))
        if DIGEST_RE.match(digest):
            return digest
        return self.manifest(ref)[0]  # header missing: digest the body ourselves

    def lookup(self, ref: ImageRef) -> str | None:
        """The digest the tag points at, or None when the registry has no such tag."""
        try:
            return self.resolve(ref)
        except ManifestUnknown:
            return None

    def manifest(
        self, ref: ImageRef, reference: str | None = None
    ) -> tuple[str, str, dict[str, Any]]:
        """Fetch a manifest or index -> (digest, media type, parsed JSON), digest-checked."""
        return self._fetch_manifest(ref, reference or ref.reference)[:3]

    def _fetch_manifest(self, ref: ImageRef, reference: str
                        ) -> tuple[str, str, dict[str, Any], int]:
        """`manifest`, and the size of the body in bytes."""
        response = self._request("GET", ref, f"manifests/{reference}",
                                 headers={"Accept": ACCEPT_MANIFESTS})
        body = response.content
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        expected = reference if reference.startswith("sha256:") else (
            response.headers.get("Docker-Content-Digest") or actual)
        if actual != expected:
            raise RegistryError(
                f"manifest of {ref} does not match its digest: expected {expected}, "
                f"received {len(body)} bytes hashing to {actual}",
                hint="the response was truncated or altered in transit; retry, and check any "
                     "proxy between here and the registry")
        document = _json_document(body, f"manifest of {ref}")
        media_type = str(document.get("mediaType") or response.headers.get("Content-Type", ""))
        media_type = media_type.split(";")[0].strip()
        if document.get("schemaVersion") == 1 or "signatures" in document:
            raise RegistryError(f"{ref} is a schema 1 manifest, which gpurl does not read",
                                hint="push it again with a current builder (kaniko, buildx)")
        if media_type not in INDEX_TYPES + IMAGE_TYPES:
            media_type = OCI_INDEX if "manifests" in document else OCI_MANIFEST
        return actual, media_type, document, len(body)

    def blob_json(self, ref: ImageRef, digest: str) -> dict[str, Any]:
        """Fetch a small JSON blob (the image config), checked against its digest."""
        response = self._request("GET", ref, f"blobs/{digest}")
        body = response.content
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        if actual != digest:
            raise RegistryError(f"config blob {digest} of {ref} hashes to {actual}",
                                hint="the response was truncated or altered in transit; retry")
        return _json_document(body, f"config blob of {ref}")

    def pull(self, ref: ImageRef, *, platform: str = "linux/amd64") -> PulledImage:
        """Resolve `ref`, follow an index to `platform`, read layers, labels and history."""
        top_digest, top_type, found = self._top(ref)
        if isinstance(found, PulledImage):
            return found
        index = found
        chosen = _choose_platform(list(index.manifests), platform)
        if chosen is None:
            raise RegistryError(
                f"{ref} has no {platform} image; its index lists "
                f"{', '.join(index.platforms) or 'nothing'}",
                hint=f"build the {platform} image, or pull another platform's variant")
        return self._entry(ref, top_digest, top_type, index, chosen)

    def pull_each(self, ref: ImageRef) -> tuple[PulledImage, ...]:
        """Every platform's image under `ref`: one for an image manifest, one per platform an
        index lists (in its order; entries of no platform, as buildx's attestation manifests
        `unknown/unknown`, left out)."""
        top_digest, top_type, found = self._top(ref)
        if isinstance(found, PulledImage):
            return (found,)
        entries = [e for e in found.manifests if e.platform and "unknown" not in e.platform]
        if not entries:
            raise RegistryError(f"the index {top_digest[:19]} of {ref} lists no platform's image",
                                hint="push an image for the target's platform under that "
                                     "reference (`invoke build`)")
        return tuple(self._entry(ref, top_digest, top_type, found, e) for e in entries)

    def _top(self, ref: ImageRef) -> tuple[str, str, PulledImage | ImageIndex]:
        """(digest, media type, what it is) of what `ref` resolves to: an image, its config
        read, or an index."""
        top_digest = self.resolve(ref)
        digest, media_type, document, size = self._fetch_manifest(ref, top_digest)
        if media_type not in INDEX_TYPES:
            return top_digest, media_type, self._image(ref, top_digest, media_type, (), digest,
                                                       media_type, document, size)
        return top_digest, media_type, ImageIndex.from_json(document, f"index {digest} of {ref}",
                                                            media_type)

    def read_index(self, ref: ImageRef) -> tuple[str, ImageIndex]:
        """(digest, index) of the image index `ref` names, digest-checked; an image manifest
        there is an error naming it."""
        digest, media_type, document = self.manifest(ref)
        if media_type not in INDEX_TYPES:
            raise RegistryError(f"{ref} is an image manifest ({digest[:19]}), not an image index",
                                hint="name the index (the multi-platform tag), "
                                     "or pin the image manifest directly")
        return digest, ImageIndex.from_json(document, f"index {digest} of {ref}", media_type)

    def put_index(self, ref: ImageRef, tag: str, index: ImageIndex) -> str:
        """Store `index` under `tag` in `ref`'s repository (its members must be there: a
        registry refuses an index naming a manifest it lacks); returns its digest."""
        return self.put_manifest(ref, tag, index.to_bytes(), index.media_type)

    def _entry(self, ref: ImageRef, top_digest: str, top_type: str, index: ImageIndex,
               entry: Descriptor) -> PulledImage:
        """The image an index entry names."""
        digest, media_type, document, size = self._fetch_manifest(ref, entry.digest)
        if media_type not in IMAGE_TYPES:
            raise RegistryError(f"{ref}: the {entry.platform} entry {entry.digest[:19]} is "
                                f"{media_type or 'untyped'}, not an image manifest",
                                hint=MALFORMED_HINT)
        image = self._image(ref, top_digest, top_type, index.platforms, digest, media_type,
                            document, size)
        if entry.platform and image.platform and not same_platform(image.platform, entry.platform):
            raise RegistryError(f"{ref}: the index lists {digest[:19]} as {entry.platform}, and "
                                f"its config says {image.platform}",
                                hint=MALFORMED_HINT)
        return image

    def _image(self, ref: ImageRef, top_digest: str, top_type: str, platforms: tuple[str, ...],
               digest: str, media_type: str, manifest: dict[str, Any], size: int) -> PulledImage:
        """An image manifest with its config read."""
        parsed = parse_manifest(manifest, f"manifest {digest} of {ref}")
        config = parse_config(self.blob_json(ref, parsed.config_digest),
                              f"config {parsed.config_digest} of {ref}")
        return PulledImage(ref=ref, top_digest=top_digest, top_media_type=top_type,
                           manifest_digest=digest, layers=parsed.layers,
                           config_digest=parsed.config_digest, labels=config.labels,
                           history=config.history, platforms=platforms, platform=config.platform,
                           manifest_media_type=media_type, manifest_size=size)

    def has_manifest(self, ref: ImageRef) -> bool:
        """The registry holds `ref` (a tag or a digest): one HEAD request, no body."""
        try:
            self._request("HEAD", ref, f"manifests/{ref.reference}",
                          headers={"Accept": ACCEPT_MANIFESTS})
        except ManifestUnknown:
            return False
        return True

    def push_access(self, ref: ImageRef) -> PushAccess:
        """Whether these credentials may push to `ref`'s repository, asked without pushing.

        `GET /v2/` answers the challenge: a Bearer registry's token service is asked for
        `repository:NAME:pull,push` and the actions it grants are read from the token (a JWT's
        `access` claim); an opaque token is tried by starting a blob upload, which is cancelled
        at once. A Basic registry is answered by the credentials being accepted at /v2/;
        "anonymous": the registry asks for no credentials. Raises RegistryError on a refusal."""
        self._request("GET", ref, "", push=True, root=True)
        token = self._tokens.get(_scope(ref, push=True))
        if token is None:
            return "basic" if self._use_basic else "anonymous"
        granted = _granted_actions(token, ref.repository)
        if granted is not None:
            if "push" not in granted:
                raise RegistryError(
                    f"the token service of {self.host} grants "
                    f"{','.join(sorted(granted)) or 'no access'} on {ref.repository}, not push",
                    hint="use a token that may write to the repository (a GitHub PAT with "
                         "write:packages for ghcr.io)")
            return "bearer"
        started = self._request("POST", ref, "blobs/uploads/", push=True)
        location = started.headers.get("Location", "")
        if location:  # cancel the empty upload; a registry that cannot lets it expire
            with contextlib.suppress(RegistryError):
                self._request("DELETE", ref, "", push=True,
                              url=httpx.URL(self.base_url).join(location))
        return "upload"

    def descriptor(self, ref: ImageRef, digest: str) -> Descriptor:
        """The descriptor of manifest `digest` (media type and size), as a subject names it."""
        actual, media_type, _, size = self._fetch_manifest(ref, digest)
        return Descriptor(media_type=media_type, digest=actual, size=size)

    def referrers(self, ref: ImageRef, digest: str) -> dict[str, Any] | None:
        """The OCI 1.1 referrers API's index for `digest` (the artifacts whose subject it is);
        None when the registry does not serve the endpoint (ghcr.io, distribution 2.x answer
        404): the caller falls back to the `sha256-<hex>` tag schema."""
        try:
            response = self._request("GET", ref, f"referrers/{digest}",
                                     headers={"Accept": OCI_INDEX})
        except ManifestUnknown:
            return None
        if "json" not in response.headers.get("Content-Type", ""):
            return None  # something answered that is not a referrers index
        return _json_document(response.content, f"referrers of {ref}@{digest[:19]}")

    # --- writing (composition: writer/composition.py) -------------------------------------------

    def has_blob(self, ref: ImageRef, digest: str, *, push: bool = True) -> bool:
        """`ref`'s repository holds the blob `digest` (a HEAD; `push` asks for the token a
        writer holds, False for a reader such as verify-layers)."""
        try:
            self._request("HEAD", ref, f"blobs/{digest}", push=push)
        except ManifestUnknown:
            return False
        return True

    def mount_blob(self, ref: ImageRef, digest: str, source: str) -> None:
        """Make blob `digest` of repository `source` (same host) part of `ref`'s repository
        without moving its bytes (a cross-repository mount); a no-op when it is there."""
        if source == ref.repository or self.has_blob(ref, digest):
            return
        response = self._request("POST", ref, "blobs/uploads/", push=True,
                                 params={"mount": digest, "from": source})
        if response.status_code != 201:
            raise RegistryError(f"{self.host} did not mount blob {digest[:19]} from {source} "
                                f"into {ref.repository} (answered {response.status_code})",
                                hint="the registry must allow cross-repository mounts, and the "
                                     "credentials must read the source repository")

    def push_blob(self, ref: ImageRef, data: bytes | Path, digest: str | None = None) -> str:
        """Upload a blob in one request (bytes, or a file streamed from disk with its known
        `digest`, as a layer gpurl wrote); returns its digest. A no-op when it is there."""
        if digest is None:
            digest = "sha256:" + hashlib.sha256(
                data if isinstance(data, bytes) else data.read_bytes()).hexdigest()
        if self.has_blob(ref, digest):
            return digest
        attempt = 0
        while True:  # a failed PUT ends its upload session: each attempt starts a new one
            attempt += 1
            started = self._request("POST", ref, "blobs/uploads/", push=True)
            location = started.headers.get("Location", "")
            if not location:
                raise RegistryError(f"{self.host} started an upload to {ref.repository} "
                                    "without a Location",
                                    hint="the registry broke the upload protocol: "
                                         "check registry.host names a registry")
            url = httpx.URL(self.base_url).join(location).copy_merge_params({"digest": digest})
            try:
                self._request("PUT", ref, "", push=True, url=url, content=data, once=True,
                              headers={"Content-Type": "application/octet-stream"})
                return digest
            except _Again as again:
                if not self._rules.again(attempt):
                    raise RegistryError(
                        f"the upload of blob {digest[:19]} to {ref.repository} failed "
                        f"{attempt} times; the last PUT {url.path} answered {again.answer}",
                        hint="the registry is overloaded or failing; try again later "
                             "(registry.retries, registry.retry-max-wait bound the retries)"
                    ) from None
                self._retry(attempt, "PUT", url, again.answer, again.retry_after)

    def tag_manifest(self, ref: ImageRef, digest: str, tag: str) -> str:
        """Put the manifest `digest` of `ref`'s repository under `tag` as well, its bytes as
        stored (so the tag names that very digest); its blobs are already there."""
        response = self._request("GET", ref, f"manifests/{digest}",
                                 headers={"Accept": ACCEPT_MANIFESTS})
        body = response.content
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise RegistryError(f"the manifest {digest[:19]} of {ref.repository} read back as "
                                "other bytes", hint="retry; check any proxy in between")
        media_type = str(_json_document(body, f"manifest {digest[:19]}").get("mediaType") or
                         response.headers.get("Content-Type", "")).split(";")[0].strip()
        return self.put_manifest(ref, tag, body, media_type)

    def put_manifest(self, ref: ImageRef, tag: str, body: bytes, media_type: str) -> str:
        """Store an image manifest under `tag` in `ref`'s repository; returns its digest,
        checked against the registry's Docker-Content-Digest."""
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        response = self._request("PUT", ref, f"manifests/{tag}", push=True, content=body,
                                 headers={"Content-Type": media_type})
        said = response.headers.get("Docker-Content-Digest")
        if said and said != digest:
            raise RegistryError(f"{self.host} stored the manifest for {ref.repository}:{tag} "
                                f"as {said}, not {digest}",
                                hint="the registry rewrote the manifest: "
                                     "use one that stores manifests as pushed")
        return digest

    # --- transport ---------------------------------------------------------------------

    def _request(self, method: str, ref: ImageRef, path: str,
                 headers: Mapping[str, str] | None = None, *, push: bool = False,
                 params: Mapping[str, str] | None = None, url: httpx.URL | None = None,
                 content: bytes | Path | None = None, root: bool = False,
                 once: bool = False) -> httpx.Response:
        """One API call with auth, retries and error mapping: `path` under the repository's
        /v2/NAME/, or `url` as given, or (`root`) the API root /v2/ itself. `once`: a
        failure worth retrying raises _Again instead, for the caller to start over."""
        scope = _scope(ref, push=push)
        authenticated = False
        attempt = 0
        while True:
            attempt += 1
            # built in the loop: the first answer may have moved the scheme to plain HTTP
            target = url or httpx.URL(f"{self.base_url}/v2/" if root else
                                      f"{self.base_url}/v2/{ref.repository}/{path}",
                                      params=params or {})
            request_headers = dict(headers or {})
            auth = self._auth_header(scope)
            if auth:
                request_headers["Authorization"] = auth
            try:
                response = self._send(method, target, request_headers, content)
            except httpx.InvalidURL as exc:
                raise RegistryError(f"{target} is not a valid registry URL for {ref}: {exc}",
                                    hint="check registry.host and the image reference") from None
            except httpx.TransportError as exc:
                failure = tls_failure(exc) if isinstance(exc, httpx.ConnectError) else None
                if failure is not None and failure.kind == "certificate":
                    raise untrusted_certificate(self.host, failure, os.environ) from None
                if once:
                    raise _Again(_fault(exc), None) from None
                if not self._rules.again(attempt):
                    raise RegistryUnreachable(
                        f"cannot reach the registry at {self._shown()} for {ref} from this "
                        f"machine after {attempt} attempts ({_fault(exc)})", host=self.host,
                        hint=unreachable_hint(self.host) + " (its host: registry.host or the "
                        "image reference; plain HTTP: registry.insecure)") from None
                self._retry(attempt, method, target, _fault(exc), None)
                continue
            except httpx.HTTPError as exc:  # a redirect loop, a body that is not what it says
                raise RegistryError(f"the registry at {self.base_url} sent an unusable answer "
                                    f"for {ref} ({path}): {_fault(exc)}",
                                    hint="check registry.host (and registry.insecure "
                                         "for plain HTTP), then retry") from None
            status = response.status_code
            if status == 401 and not authenticated:
                authenticated = True  # one challenge round per request; a second 401 is final
                attempt -= 1
                self._authenticate(ref, response, scope)
                continue
            if retryable_status(status):
                if once:
                    raise _Again(f"{status}{_error_codes(response)}",
                                 response.headers.get("Retry-After"))
                if not self._rules.again(attempt):
                    raise RegistryError(
                        f"the registry answered {status}{_error_codes(response)} to "
                        f"{_request_line(method, target)} for {ref} after {attempt} attempts",
                        hint="the registry is overloaded or failing; try again later "
                             "(registry.retries, registry.retry-max-wait bound the retries)")
                self._retry(attempt, method, target, f"{status}{_error_codes(response)}",
                            response.headers.get("Retry-After"))
                continue
            if status in (401, 403, 404):
                raise self._refusal(ref, response)
            if status >= 400:
                raise RegistryError(f"the registry answered {status} for {ref} ({path})"
                                    f"{_error_codes(response)}",
                                    hint=_status_hint(status, self._scheme))
            if len(response.content) > _MAX_DOCUMENT:
                raise RegistryError(f"{ref}: {path} is larger than {_MAX_DOCUMENT} bytes",
                                    hint="that reference names something other than an image: check it")
            return response

    def _send(self, method: str, target: httpx.URL, headers: Mapping[str, str],
              content: bytes | Path | None) -> httpx.Response:
        """One request; while the scheme is undecided (loopback, `insecure` unset) an HTTPS
        attempt the server answers with something other than TLS is sent again in plain
        HTTP, and whichever connects fixes the scheme for the client's life."""
        if isinstance(content, Path):  # streamed, opened afresh for each attempt
            with content.open("rb") as handle:
                return self._send(method, target, {**headers, "Content-Length": str(
                    content.stat().st_size)}, handle)  # type: ignore[arg-type]
        if self._decided:
            return self._http.request(method, target, headers=headers, content=content)
        try:
            response = self._http.request(method, target, headers=headers, content=content)
        except httpx.ConnectError as exc:
            failure = tls_failure(exc)
            if failure is None or failure.kind != "not-tls":
                raise
            response = self._http.request(method, target.copy_with(scheme=HTTP),
                                          headers=headers, content=content)
            self._scheme = HTTP
        self._decided = True
        return response

    def _auth_header(self, scope: str) -> str | None:
        if scope in self._tokens:
            return f"Bearer {self._tokens[scope]}"
        if self._use_basic and self._credentials:
            return self._credentials.basic_header()
        return None

    def _authenticate(self, ref: ImageRef, response: httpx.Response, scope: str) -> None:
        if self._credentials and not credentials_allowed(self._scheme, self.host):
            raise RegistryError(
                f"{self.host} asks for credentials over plain HTTP; gpurl sends credentials "
                "in the clear only to a loopback registry",
                hint="serve the registry over TLS and leave registry.insecure unset")
        scheme, params = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if scheme == "basic":
            if not self._credentials:
                raise self._refusal(ref, response)
            self._use_basic = True
            return
        if scheme != "bearer" or not params.get("realm"):
            raise self._refusal(ref, response)
        query = {"service": params.get("service", ""), "scope": params.get("scope") or scope}
        try:
            realm = httpx.URL(params["realm"]) if params["realm"].startswith(
                ("http://", "https://")) else None
        except (httpx.InvalidURL, ValueError):
            realm = None
        if realm is None or not realm.host:
            raise RegistryError(f"{self.host} named an invalid token service {params['realm']!r}",
                                hint="the registry's auth setup is broken: ask its operator, "
                                     "or try another registry.host")
        # credentials travel only over TLS, or in the clear to a token service on loopback
        safe = realm.scheme == HTTPS or is_loopback(realm.host)
        headers = ({"Authorization": self._credentials.basic_header()}
                   if self._credentials and safe else {})
        try:
            answer = self._http.get(realm, params=query, headers=headers)
        except httpx.HTTPError as exc:
            raise RegistryError(f"cannot get a token from the token service of {self.host} "
                                f"({realm.host}) for {ref}: {_fault(exc)}",
                                hint="check that this machine can reach the token "
                                     "service host named, then retry") from None
        if answer.status_code in (401, 403):
            raise RegistryError(
                f"the token service of {self.host} refused the credentials for {ref} "
                f"({answer.status_code})", hint=credential_hint(self.host, self._credentials))
        if answer.status_code != 200:
            raise RegistryError(f"the token service of {self.host} answered "
                                f"{answer.status_code} for {ref}",
                                hint="the token service failed: try again later, "
                                     "or ask the registry's operator")
        try:
            body = answer.json()
            token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
        except ValueError:
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"the token service of {self.host} returned no token for {ref}",
                                hint="the token service failed: try again later, "
                                     "or ask the registry's operator")
        self._tokens[scope] = token

    def _refusal(self, ref: ImageRef, response: httpx.Response) -> RegistryError:
        status = response.status_code
        codes = _error_codes(response)
        if status == 401:
            return RegistryError(f"{self.host} asks for authentication to read {ref}{codes}",
                                 hint=credential_hint(self.host, self._credentials))
        if status == 403:
            return RegistryError(f"{self.host} denies access to {ref}{codes}",
                                 hint="the credentials are valid but lack read access to "
                                      f"{ref.repository} (a PAT needs read:packages)")
        return ManifestUnknown(f"{ref} was not found on {self.host}{codes}",
                             hint="check that the build pushed this tag, and registry.host / "
                                  "registry.repository in the config")

    def _retry(self, attempt: int, method: str, target: httpx.URL, answer: str,
               retry_after: str | None) -> None:
        """Wait before the next attempt, saying so in one line when asked to."""
        wait = self._rules.delay(attempt, retry_after)
        if self._on_retry is not None:
            self._on_retry(f"retry {attempt}/{self._rules.attempts - 1} in {wait:.1f}s: "
                           f"{_request_line(method, target)} answered {answer}"
                           + (f" (Retry-After {retry_after})" if retry_after else ""))
        self._sleep(wait)


def _scope(ref: ImageRef, *, push: bool) -> str:
    """The token scope a request on `ref`'s repository asks for."""
    return f"repository:{ref.repository}:{'pull,push' if push else 'pull'}"


def _granted_actions(token: str, repository: str) -> frozenset[str] | None:
    """The actions a JWT bearer token grants on `repository` (its `access` claim, as the
    distribution token spec writes it); None when the token is not a readable JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    access = claims.get("access") if isinstance(claims, dict) else None
    if not isinstance(access, list):
        return None
    return frozenset(str(action) for entry in access if isinstance(entry, dict)
                     and entry.get("type") == "repository" and entry.get("name") == repository
                     for action in entry.get("actions") or ())


def _choose_platform(entries: list[Descriptor], platform: str) -> Descriptor | None:
    exact = [e for e in entries if e.platform == platform]
    if exact:
        return exact[0]
    stated = [e for e in entries if same_platform(e.platform or "", platform)]  # its /v8 too
    return stated[0] if stated else None


def _json_document(body: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        raise RegistryError(f"the {what} is not valid JSON ({len(body)} bytes)",
                            hint="the response may have been truncated; retry") from None
    if not isinstance(document, dict):
        raise RegistryError(f"the {what} is not a JSON object",
                            hint="the registry or a proxy answered with something else: check registry.host")
    return document


def _fault(exc: httpx.HTTPError) -> str:
    """What went wrong in transport, in words (never the request's headers)."""
    words = {httpx.TooManyRedirects: "too many redirects (a redirect loop)",
             httpx.DecodingError: "the body does not decode as its Content-Encoding says",
             httpx.UnsupportedProtocol: "a redirect to an unsupported URL scheme"}
    for kind, text in words.items():
        if isinstance(exc, kind):
            return text
    failure = tls_failure(exc) if isinstance(exc, httpx.ConnectError) else None
    return f"{type(exc).__name__}: {failure}" if failure else type(exc).__name__


def _status_hint(status: int, scheme: str) -> str | None:
    """A registry serving HTTPS answers a plain HTTP request with a bare 400."""
    if status == 400 and scheme == HTTP:
        return ("if the registry speaks HTTPS, leave registry.insecure unset (a loopback host "
                "is tried over HTTPS first) or set it to false")
    return None


def _error_codes(response: httpx.Response) -> str:
    """The registry's error codes (e.g. MANIFEST_UNKNOWN), never the raw body."""
    try:
        errors = response.json().get("errors") or []
        codes = sorted({str(e.get("code")) for e in errors if isinstance(e, dict)})
    except (ValueError, AttributeError, httpx.ResponseNotRead):
        return ""
    return f" ({', '.join(codes)})" if codes else ""


def _request_line(method: str, target: httpx.URL) -> str:
    """A request as a log names it: method and path, the query (an upload's session state)
    and the host left out, so no credential a registry put in a URL is shown."""
    return f"{method} {target.path}"

