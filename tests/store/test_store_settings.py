"""Where runs are stored: --db, TASKDECOMP_DATABASE_URL, TASKDECOMP_HOME, the user data dir."""

from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest

from taskdecomp.errors import StoreError
from taskdecomp.settings import load_settings
from taskdecomp.store import normalize_url


def test_the_default_store_is_runs_db_in_taskdecomp_home(clean_env: Path) -> None:
    assert load_settings().store_url() == f"sqlite:///{clean_env / 'runs.db'}"


def test_without_a_home_the_user_data_directory_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TASKDECOMP_HOME")
    expected = Path(platformdirs.user_data_dir("taskdecomp", appauthor=False)) / "runs.db"
    assert load_settings().store_url() == f"sqlite:///{expected}"


def test_the_flag_beats_the_environment_which_beats_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKDECOMP_DATABASE_URL", "postgresql://env@host/db")
    settings = load_settings()
    assert settings.store_url() == "postgresql://env@host/db"
    assert settings.store_url("sqlite:///flag.db") == "sqlite:///flag.db"


@pytest.mark.parametrize(
    ("url", "driver", "database"),
    [
        ("postgresql://user@host/db", "postgresql+psycopg", "db"),
        ("postgres://user@host/db", "postgresql+psycopg", "db"),
        ("postgresql+psycopg://user@host/db", "postgresql+psycopg", "db"),
        ("sqlite:////tmp/x.db", "sqlite", "/tmp/x.db"),
        ("runs/x.db", "sqlite", "runs/x.db"),
    ],
)
def test_urls_are_normalized(url: str, driver: str, database: str) -> None:
    parsed = normalize_url(url)
    assert (parsed.drivername, parsed.database) == (driver, database)


def test_passwords_never_appear_in_messages() -> None:
    with pytest.raises(StoreError) as refused:
        normalize_url("mysql://me:s3cret@host/db")
    assert "s3cret" not in str(refused.value) and "***" in str(refused.value)
