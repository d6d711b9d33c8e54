"""Keep secrets out of what moekit prints and writes (pure).

A name is secret when one of its words looks like a credential (HF_TOKEN, WANDB_API_KEY,
hf_access_token, DB_PASSWORD, ...) or the config lists it in run.secrets. Values of secret names are
replaced by REDACTED in structures, and every such value is also scrubbed from free text (logs,
commands), wherever it appears. The credential inside a URL (`scheme://user:password@host/...` with any
character RFC 3986 allows, or a token as the user, `https://ghp_...@host/`), in data files, a tokenizer path or any
value, is a secret whatever its key is called: found by parsing the URL's authority, it is replaced in every text,
tree and assignment these functions see. This module is the one redactor of console, records and rendered files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"

# The documented list of credential words (docs/troubleshooting.md, "Secrets"). A name is split into words at _, -, .
# and case changes; it is secret when one of its words is in SECRET_WORDS or begins with one of SECRET_PREFIXES ...
SECRET_WORDS = frozenset(
    {"SECRET", "SECRETS", "APIKEY", "CREDENTIAL", "CREDENTIALS", "CREDS", "PAT", "BEARER", "PRIVATEKEY"}
)
SECRET_PREFIXES = ("PASS",)  # PASS, PASSWORD, PASSWD, PASSPHRASE, PASSCODE
NOT_SECRET_WORDS = frozenset({"PASSES", "PASSED", "PASSING", "PASSIVE", "PASSTHROUGH"})  # xla_disable_hlo_passes
# ... or when its last word is one of these: HF_TOKEN and WANDB_API_KEY, but not key_proj or experts_per_token=2
# (numbers and booleans are never treated as secrets either).
SECRET_LAST_WORDS = ("TOKEN", "KEY", "COOKIE", "AUTHORIZATION", "AUTH")
# Values shorter than this are not scrubbed from free text: "1" or "true" would mangle every log line.
MIN_SCRUB_LEN = 6
# A URL's user information without a password is a credential (https://ghp_xxx@github.com/...) when it is this long,
# or begins like a token; a short login (ssh://git@host) is kept.
TOKEN_USER_LEN = 16
TOKEN_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "github_pat_", "hf_", "glpat-", "xox", "sk-", "AKIA")
_AUTHORITY_END = re.compile(r"[/?#\s]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*$")


def _userinfo_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, secret) of every credential in the user information of a URL in `text`: the password, or a
    token standing alone. The authority is what follows `scheme://` up to /, ?, # or whitespace (RFC 3986: every
    other character, quotes included, may appear in user information), parsed by urllib."""
    from urllib.parse import urlsplit

    spans = []
    at = text.find("://")
    while at != -1:
        start = at + 3
        end = _AUTHORITY_END.search(text, start)
        stop = end.start() if end else len(text)
        authority = text[start:stop]
        if "@" in authority and _SCHEME.search(text[max(0, at - 32) : at]):
            userinfo = authority.rpartition("@")[0]
            try:
                parts = urlsplit("x://" + authority)
                user, password = parts.username or "", parts.password
            except ValueError:  # a malformed host ("[::1"): the user information is still the part before @
                user, colon, password = userinfo.partition(":")
                password = password if colon else None
            if password:
                spans.append((start + len(userinfo) - len(password), start + len(userinfo), password))
            elif user and (len(user) >= TOKEN_USER_LEN or user.startswith(TOKEN_PREFIXES)):
                spans.append((start, start + len(user), user))
        at = text.find("://", start)
    return spans


def redact_urls(text: str) -> str:
    """`text` with the credential of every URL's user information replaced: the password of
    `scheme://user:password@host` (the user name is kept), or a token given as the user (`https://TOKEN@host`)."""
    if "://" not in text or "@" not in text:
        return text
    out, last = [], 0
    for start, end, _ in _userinfo_spans(text):
        out += [text[last:start], REDACTED]
        last = end
    return "".join(out) + text[last:]


def url_passwords(text: str) -> set[str]:
    """The credentials in the URLs of `text` (to scrub wherever else they appear, decoded or not)."""
    from urllib.parse import unquote

    found = {secret for _, _, secret in _userinfo_spans(text)} if "://" in text and "@" in text else set()
    return found | {unquote(p) for p in found}


def _words(name: str) -> list[str]:
    return [w.upper() for w in re.split(r"[^A-Za-z0-9]+|(?<=[a-z])(?=[A-Z])", name) if w]


def is_secret_name(name: str, extra: Iterable[str] = ()) -> bool:
    """True for a credential-looking name, or one listed in `extra` (run.secrets; case-insensitive)."""
    if name.upper() in {e.upper() for e in extra}:
        return True
    words = _words(name)
    if not words:
        return False
    glued = words[-1].endswith(("TOKEN", "APIKEY")) or any(p in name.upper() for p in ("PASSWORD", "SECRET"))
    listed = any(w in SECRET_WORDS or (w.startswith(SECRET_PREFIXES) and w not in NOT_SECRET_WORDS) for w in words)
    return glued or listed or words[-1] in SECRET_LAST_WORDS


def _secret_value(value: Any) -> bool:
    """Only text can be a credential (experts_per_token=2 is not)."""
    if not isinstance(value, str) or not value:
        return False
    import yaml  # here, not at the top: `moekit --help` imports this module (cli.py) and nothing heavy

    try:
        return isinstance(yaml.safe_load(value), str)
    except yaml.YAMLError:
        return True


def secret_values(
    env: Mapping[str, str], config: Mapping[str, Any] | None = None, extra: Iterable[str] = ()
) -> set[str]:
    """Values of secret names in an environment and anywhere in a (nested) config mapping."""
    extra = list(extra)
    found = {v for k, v in env.items() if v and is_secret_name(k, extra)}
    for v in env.values():
        found |= url_passwords(v)

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if is_secret_name(str(k), extra) and _secret_value(v):
                    found.add(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, str):
            found.update(url_passwords(node))

    walk(config or {})
    return found


def redact_tree(node: Any, extra: Iterable[str] = ()) -> Any:
    """A copy of a nested mapping/list with the values of secret keys replaced."""
    extra = list(extra)
    if isinstance(node, Mapping):
        return {
            k: (REDACTED if is_secret_name(str(k), extra) and _secret_value(v) else redact_tree(v, extra))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [redact_tree(v, extra) for v in node]
    return redact_urls(node) if isinstance(node, str) else node


def redact_assignments(items: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    """`a.b.NAME=value` strings (overrides, MaxText arguments, env) with secret values replaced."""
    extra = list(extra)
    out = []
    for item in items:
        key, eq, value = item.partition("=")
        name = key.lstrip("+~").rsplit(".", 1)[-1]
        secret = eq and is_secret_name(name, extra) and _secret_value(value.strip("'\""))
        out.append(f"{key}={REDACTED}" if secret else redact_urls(item))
    return out


class Scrubber:
    """Replace known secret values and URL passwords in free text (a log line, a printed command)."""

    def __init__(self, values: Iterable[str]):
        keep = sorted({v for v in values if len(v) >= MIN_SCRUB_LEN}, key=len, reverse=True)
        self._rx = re.compile("|".join(re.escape(v) for v in keep)) if keep else None

    def __call__(self, text: str) -> str:
        text = redact_urls(text)
        return self._rx.sub(REDACTED, text) if self._rx else text

    def __bool__(self) -> bool:
        return True  # a URL password may turn up in any line, known in advance or not


class RedactingStream:
    """A text stream (standard output or error) whose writes pass through redact_urls: whatever moekit prints,
    a message that quotes a value included, shows no URL password."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        """Write `text` without its URL passwords; returns the length given (what callers count on). A stream the
        interpreter found closed at start (None: `moekit ... >&-`) takes the text and discards it."""
        if self._stream is not None:
            self._stream.write(redact_urls(text))
        return len(text)

    def flush(self) -> None:
        """Flush the stream underneath (nothing to flush when it was closed at start)."""
        if self._stream is not None:
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
