"""The one HTTP client of envbuild, and the OCI registry token flow on top of it.

- ``Http``: requests (imported on first use, never at start-up), one session per client: a time
  limit, a size cap, retries with exponential backoff on timeouts, lost connections, 429 and 5xx,
  the CA bundle of SSL_CERT_FILE, http(s) URLs only, redirects followed (requests drops the
  Authorization header when a redirect leaves the host). Every failure is one line: ``Unreachable``
  (no usable answer) or an ``EnvironmentProblem`` naming the status; both exit 3. URLs in
  messages go through envbuild.common.redact.
- ``RegistryAuth``: a registry's ``401`` answered once per scope and remembered: ``Bearer
  realm=...,service=...,scope=...`` -> GET realm -> a token (anonymous, or with the caller's basic
  credentials), or ``Basic`` (an htpasswd registry) with the caller's credentials. It sends through
  any ``Send`` callable, so a test or a caller with its own transport shares the same flow.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

from envbuild.common.boundedio import parse_json
from envbuild.common.errors import EnvironmentProblem
from envbuild.common.record import record
from envbuild.common.redact import redact, shown

OFFLINE_HINT = "offline or blocked? check the network and HTTPS_PROXY / REQUESTS_CA_BUNDLE"
TLS_HINT = ("behind a TLS-intercepting proxy set REQUESTS_CA_BUNDLE to its CA bundle "
            "(e.g. /etc/ssl/certs/ca-certificates.crt)")
MAX_BODY = 64 << 20


class Unreachable(EnvironmentProblem):
    """No usable answer from ``host``: no connection, no answer in time, TLS refused, an answer
    over the size cap, or not an http(s) URL. ``reason`` is the short why."""

    def __init__(self, message: str, hint: str, reason: str = "", host: str = "") -> None:
        super().__init__(message, hint)
        self.reason = reason or message
        self.host = host


class Denied(EnvironmentProblem):
    """A registry refused: a 401 without a challenge envbuild can answer, no token, or a 401
    again after answering it."""


@record
class Reply:
    status: int
    headers: Mapping[str, str]  # names in lower case when Http made it
    body: bytes
    url: str = ""

    def header(self, name: str) -> str:
        low = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == low), "")

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        try:
            return parse_json(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise EnvironmentProblem(
                f"{redact(self.url)} did not answer valid JSON ({first_line(str(exc))})",
                "the server sent something else (an error page of a proxy or captive "
                "portal?)") from None


# method, url, headers, body -> the answer, whatever its status
Send = Callable[[str, str, Mapping[str, str], bytes | None], Reply]


class Http:
    """HTTP with a timeout, ``retries`` tries with exponential backoff on timeouts, connection
    errors, 429 and 5xx. ``ok``: the statuses returned besides 200 (any other raises one
    EnvironmentProblem); ``ok=None`` returns every status (the last try's)."""

    def __init__(self, timeout: float = 20.0, retries: int = 3, backoff: float = 0.5,
                 sleep: Callable[[float], None] = time.sleep, *, agent: str = "envbuild",
                 limit: int = MAX_BODY, status_hint: str = "check the URL") -> None:
        self.timeout = timeout
        self.retries = max(1, retries)
        self.backoff = backoff
        self.sleep = sleep
        self.agent = agent
        self.limit = limit
        self.status_hint = status_hint
        self.requests = 0
        self._session: Any = None

    def _get_session(self) -> Any:
        if self._session is None:
            import requests

            s = requests.Session()
            s.headers["User-Agent"] = self.agent
            s.verify = ca_bundle()
            self._session = s
        return self._session

    def get(self, url: str, *, accept: str = "", headers: Mapping[str, str] | None = None,
            ok: Iterable[int] | None = (), limit: int | None = None) -> Reply:
        """``limit``: the most bytes read from one answer. With a Range header, a 200 answer (the
        server ignored the range) comes back with an empty body instead of being read."""
        return self.request("GET", url, accept=accept, headers=headers, ok=ok, limit=limit)

    def send(self, method: str, url: str, headers: Mapping[str, str],
             body: bytes | None) -> Reply:
        """The ``Send`` of a RegistryAuth: every status comes back."""
        return self.request(method, url, headers=headers, data=body, ok=None)

    def request(self, method: str, url: str, *, accept: str = "",
                headers: Mapping[str, str] | None = None, data: bytes | None = None,
                ok: Iterable[int] | None = (), limit: int | None = None) -> Reply:
        import requests

        parts = urlsplit(url)
        host = urlsplit(redact(url)).netloc.rpartition("@")[2]  # a password with "/" in it
        if parts.scheme not in ("http", "https") or not host:
            raise Unreachable(f"not an http(s) URL: {shown(url, 80, url=True)}",
                              "only http:// and https:// URLs are fetched", host=host)
        allowed = None if ok is None else {200, *ok}
        hdrs = dict(headers or {})
        if accept:
            hdrs["Accept"] = accept
        last = ""
        for attempt in range(self.retries):
            if attempt:
                self.sleep(self.backoff * 2 ** (attempt - 1))
            self.requests += 1
            try:
                r = self._get_session().request(method, url, headers=hdrs, data=data,
                                                timeout=self.timeout, stream=True,
                                                allow_redirects=True)
                retry = r.status_code == 429 or r.status_code >= 500
                if (r.status_code in allowed) if allowed is not None else (
                        not retry or attempt == self.retries - 1):
                    return self._read(r, url, limit or self.limit, host,
                                      ranged="Range" in hdrs)
            except requests.exceptions.SSLError as exc:
                why = re.search(r"certificate verify failed[^'\"()]*", str(exc))
                reason = why.group(0).strip() if why else first_line(str(exc))
                raise Unreachable(f"TLS verification failed for {host}: {reason}", TLS_HINT,
                                  f"TLS: {reason}", host) from None
            except requests.exceptions.Timeout:
                last = f"no answer within {self.timeout:g} s"
                continue
            except requests.exceptions.RequestException as exc:
                last = f"cannot connect ({short_reason(exc)})"
                continue
            r.close()
            last = f"HTTP {r.status_code} {r.reason or ''}".rstrip()
            if not retry:
                raise EnvironmentProblem(f"{redact(url)} answered {last}", self.status_hint)
        tries = f"{self.retries} tr{'y' if self.retries == 1 else 'ies'}"
        raise Unreachable(f"{host} unreachable: {last} ({tries}, {redact(url)})", OFFLINE_HINT,
                          last, host)

    @staticmethod
    def _read(r: Any, url: str, limit: int, host: str, ranged: bool) -> Reply:
        with r:
            headers = {k.lower(): v for k, v in r.headers.items()}
            if ranged and r.status_code == 200:
                return Reply(200, headers, b"", r.url or url)
            body = bytearray()
            for chunk in r.iter_content(65536):
                body += chunk
                if len(body) > limit:
                    raise Unreachable(f"{redact(url)} answered more than {limit} bytes",
                                      "is the URL pointing at the right server?",
                                      f"an answer over {limit >> 20} MiB", host)
            return Reply(r.status_code, headers, bytes(body), r.url or url)


def ca_bundle() -> str | bool:
    """requests reads REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE itself but not OpenSSL's SSL_CERT_FILE,
    which is how many proxied hosts (this one included) name their CA bundle: use it then."""
    import os

    if os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE"):
        return True
    ca = os.environ.get("SSL_CERT_FILE", "")
    return ca if ca and os.path.isfile(ca) else True


def first_line(text: str) -> str:
    return redact((text.strip().splitlines() or [""])[0][:200])


_REASONS = re.compile(r"Connection refused|Name or service not known|No route to host|"
                      r"Network is unreachable|Temporary failure in name resolution|"
                      r"Connection reset by peer|timed out")


def short_reason(exc: BaseException) -> str:
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text) or _REASONS.search(text)
    return (m.group(1) if m.groups() else m.group(0)).strip() if m else type(exc).__name__


# ------------------------------------------------------------------ the registry token flow

_PARAM = re.compile(r'(\w+)=(?:"([^"]*)"|([^,\s"]+))')


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """`Bearer realm="https://auth...",service="...",scope="..."` -> ("bearer", its parameters);
    `Basic realm="x"` -> ("basic", {"realm": "x"}); nothing usable -> ("", {})."""
    scheme, _, rest = header.strip().partition(" ")
    scheme = scheme.lower()
    if scheme not in ("bearer", "basic"):
        return "", {}
    return scheme, {k.lower(): q or t for k, q, t in _PARAM.findall(rest)}


def loopback(host: str) -> bool:
    """localhost or a loopback address: the only hosts plain http may carry a login to (a name
    like 127.0.0.1.example.com is not one)."""
    import ipaddress

    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


Credentials = Callable[[], tuple[str, str] | None]


class RegistryAuth:
    """Requests to one registry that answer its 401 challenge once per scope (a token is reused
    for every later request in that scope, asked again once if the registry refuses it).

    ``credentials``: called at most once, on the first challenge, for (user, password) of this
    registry, or None; without it the flow is anonymous. Credentials are sent only over https,
    or plain http to a loopback address."""

    def __init__(self, send: Send, host: str,
                 credentials: Credentials | None = None) -> None:
        self.send = send
        self.host = host
        self.credentials = credentials
        self.authorization: dict[str, str] = {}
        self._creds: tuple[str, str] | None = None
        self._looked_up = False

    def request(self, method: str, url: str, scope: str,
                headers: Mapping[str, str] | None = None, body: bytes | None = None) -> Reply:
        hdrs = dict(headers or {})
        answered = False
        while True:
            if scope in self.authorization:
                hdrs["Authorization"] = self.authorization[scope]
            r = self.send(method, url, hdrs, body)
            if r.status != 401:
                return r
            if answered:
                raise Denied(f"the registry {self.host} refused access to {scope}", self._hint())
            self.authorization[scope] = self._answer(r, scope)
            answered = True

    def _login(self) -> tuple[str, str] | None:
        if not self._looked_up and self.credentials is not None:
            self._creds = self.credentials()
        self._looked_up = True
        return self._creds

    def _hint(self) -> str:
        if self.credentials is None:
            return "the repository may need a login; envbuild asks anonymously here"
        return (f"check the login: docker login {self.host}" if self._creds
                else f"log in first: docker login {self.host}")

    def _answer(self, r: Reply, scope: str) -> str:
        scheme, params = parse_challenge(r.header("www-authenticate"))
        if scheme == "basic":
            login = self._login()
            if login is None:
                raise Denied(f"the registry {self.host} asks for a login and has none here",
                             self._hint())
            self._check_safe(r.url or self.host, "the registry")
            return "Basic " + _basic(login)
        if scheme != "bearer" or not params.get("realm"):
            raise Denied(f"the registry {self.host} answered 401 without a challenge envbuild "
                         "can answer (Bearer realm=... or Basic)", self._hint())
        return "Bearer " + self._token(params, scope)

    def _check_safe(self, url: str, what: str) -> None:
        parts = urlsplit(url if "://" in url else f"https://{url}")
        if parts.scheme != "https" and not loopback(parts.hostname or ""):
            raise Denied(f"{what} of {self.host} is plain http at {parts.hostname}: "
                         "envbuild sends no login there", "use an https registry / token service")

    def _token(self, params: Mapping[str, str], scope: str) -> str:
        realm = params["realm"]
        scopes = [s for s in dict.fromkeys((scope, params.get("scope", ""))) if s]
        query: dict[str, Any] = {"scope": scopes}
        if params.get("service"):
            query["service"] = params["service"]
        url = realm + ("&" if "?" in realm else "?") + urlencode(query, doseq=True)
        headers: dict[str, str] = {}
        login = self._login()
        if login is not None:
            self._check_safe(realm, "the token service")
            headers["Authorization"] = "Basic " + _basic(login)
        r = self.send("GET", url, headers, None)
        try:
            doc = parse_json(r.body)
            token = (doc.get("token") or doc.get("access_token")) if isinstance(doc, dict) \
                else None
        except (ValueError, UnicodeDecodeError):
            token = None
        if r.status != 200 or not isinstance(token, str) or not token:
            raise Denied(f"the token service of {self.host} gave no token for {scope or 'it'} "
                         f"(HTTP {r.status})", self._hint())
        return token


def _basic(login: tuple[str, str]) -> str:
    return base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
