"""The published package: what `pip install resilience-pipeline[redis]` gives a user.

Builds the wheel from this checkout, installs it with the `redis` extra into a fresh virtual
environment of every supported interpreter (the one running the tests, and 3.12 and 3.13 under
`pyenv root`, as `make test` finds them), and takes a lock on the test Redis from each. The
wheel is built once, so `make test` runs this module once (marker `once`, on 3.11).
"""

from __future__ import annotations

import email
import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import resilience

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

pytestmark = pytest.mark.once

ROOT = Path(__file__).parent.parent
USER_EXTRAS = {"redis", "http", "requests", "postgres"}  # what users install; tools for developers are groups


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(ROOT)],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("resilience_pipeline-*.whl")
    return built


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def test_the_version_is_the_distributions() -> None:
    """`resilience.__version__` is the installed distribution's version."""
    assert resilience.__version__ == importlib.metadata.version("resilience-pipeline")


def test_the_wheel_publishes_user_extras_only_with_license_and_urls(wheel: Path) -> None:
    """Extras are for users (redis, …); dev and bench tools are not published; MIT, URLs, LICENSE."""
    metadata = _metadata(wheel)
    extras = set(metadata.get_all("Provides-Extra") or [])
    assert "redis" in extras
    assert extras <= USER_EXTRAS, f"development-only extras leak into the wheel: {extras - USER_EXTRAS}"
    assert metadata["License-Expression"] == "MIT"
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Repository", "Issues", "Changelog"} <= set(urls)
    assert metadata["Version"] == resilience.__version__
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "resilience/py.typed" in names
    assert not [n for n in names if n.startswith("tests/")]


def _interpreter(version: str) -> str | None:
    """The newest `version` under `pyenv root` (as the Makefile picks it), or the running one."""
    if version == f"{sys.version_info[0]}.{sys.version_info[1]}":
        return sys.executable
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return None
    root = Path(subprocess.run([pyenv, "root"], capture_output=True, text=True, check=True).stdout.strip())
    found = sorted(
        root.glob(f"versions/{version}.*/bin/python"),
        key=lambda path: tuple(int(part) for part in path.parent.parent.name.split(".") if part.isdigit()),
    )
    return str(found[-1]) if found else None


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_the_redis_extra_installs_into_a_fresh_venv_and_locks(
    version: str, wheel: Path, tmp_path: Path, redis_server: RedisServer
) -> None:
    """`pip install resilience-pipeline[redis]` from the wheel, then a Redis lock, in a clean env."""
    interpreter = _interpreter(version)
    if interpreter is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI installs the wheel on every supported Python: {version} is not under pyenv")
        pytest.skip(f"Python {version} is not installed under pyenv")
    env_dir = tmp_path / "venv"
    # A bare venv, filled by this interpreter's pip (`--python`): no pip copied into each venv and
    # no bytecode compiled, which is most of the disk a venv costs (a busy disk stalls the other
    # tests' servers). What is installed, and from where, is what a user's pip would do.
    subprocess.run([interpreter, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=300)
    python = env_dir / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "--no-compile", f"{wheel}[redis]"], check=True, timeout=600)
    script = f"""
import redis
import resilience
from resilience import ResiliencePipelineBuilder, get_lock_token
from resilience.stores import RedisLockStore

store = RedisLockStore(redis.Redis.from_url({redis_server.url!r}))
pipeline = ResiliencePipelineBuilder(name="wheel").add_lock("wheel-check", ttl=5, store=store).build()
print(resilience.__version__, pipeline.execute(get_lock_token) > 0, resilience.__file__)
"""
    interpreter_version = subprocess.run(
        [str(python), "-c", "import sys; print(*sys.version_info[:2], sep='.')"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert interpreter_version == version
    completed = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, check=True, timeout=120, cwd=tmp_path
    )
    installed, locked, location = completed.stdout.split()
    assert (installed, locked) == (resilience.__version__, "True")
    assert str(env_dir) in location  # the installed wheel, not this checkout
