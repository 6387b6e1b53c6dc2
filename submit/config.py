"""Where the leaderboard service is and who we are to it.

The official `popcorn` client reads the base URL from `POPCORN_API_URL` and the
user's identity from `~/.popcorn.yaml` (`cli_id: ...`, written by
`popcorn register discord|github`). We read the same places, so a user set up
for `popcorn` is set up for `qrsub`; `POPCORN_CLI_ID` may override the file.

The cli_id is a credential. It lives only inside `CliId`, whose str() and
repr() hide it, so that no f-string, log line, traceback or JSON dump built
from our objects can leak it; `CliId.reveal()` is called in one place: the
HTTP header.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import yaml

URL_ENV = "POPCORN_API_URL"
CLI_ID_ENV = "POPCORN_CLI_ID"
HIDDEN = "<hidden>"


class ConfigError(Exception):
    """The service's address or the user's identity is missing or unreadable."""


class CliId:
    """The user's cli_id: a secret that refuses to print itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The raw value, for the `X-Popcorn-Cli-Id` header and nothing else."""
        return self._value

    def __repr__(self) -> str:
        return f"CliId({HIDDEN})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CliId) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self):  # pickling would write the secret somewhere
        raise TypeError("a CliId is a credential and cannot be pickled")


@dataclass(frozen=True)
class Config:
    api_url: str
    cli_id: CliId


def default_config_path() -> Path:
    return Path.home() / ".popcorn.yaml"


def load_api_url(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    url = (env.get(URL_ENV) or "").strip()
    if not url:
        raise ConfigError(
            f"{URL_ENV} is not set: the leaderboard service's address is needed.\n"
            f"  export {URL_ENV}=https://...   (the same value the `popcorn` CLI uses)")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{URL_ENV}={url!r} is not an http(s) URL; "
                          f"set it to the service's address, e.g. https://host:port")
    return url.rstrip("/")


def load_cli_id(env: Mapping[str, str] | None = None,
                config_path: Path | None = None) -> CliId:
    env = os.environ if env is None else env
    from_env = (env.get(CLI_ID_ENV) or "").strip()
    if from_env:
        return CliId(from_env)
    path = config_path or default_config_path()
    value = _cli_id_from_file(path)
    if not value:
        raise ConfigError(
            f"no cli_id: {path} is missing or has no `cli_id:` line. Register with the official client "
            f"(`popcorn register discord` or `popcorn register github`, which writes it), "
            f"or export {CLI_ID_ENV}=<your cli_id>.")
    return CliId(value)


def _cli_id_from_file(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}; fix its permissions "
                          f"or export {CLI_ID_ENV}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        # The parser's message may quote the file's contents, the secret included.
        raise ConfigError(f"{path} is not valid YAML; it should hold one line "
                          f"`cli_id: <your id>` (or export {CLI_ID_ENV})") from None
    if not isinstance(data, dict) or data.get("cli_id") in (None, ""):
        return None
    return str(data["cli_id"]).strip()


def load_config(env: Mapping[str, str] | None = None,
                config_path: Path | None = None) -> Config:
    """The URL and cli_id, from the environment first, then ~/.popcorn.yaml."""
    return Config(api_url=load_api_url(env), cli_id=load_cli_id(env, config_path))
