"""Deployment files: Dockerfile (hadolint), docker-compose.yml (the compose JSON schema + topology,
its variables resolved from the .env that scripts/docker-env writes), nginx.conf and the declared
models. No Docker engine runs here, so these are static checks."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from lab.sim.datasets import load_dataset
from service.config import load_model_file
from service.runtime import build_learner

ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = Path(__file__).parent / "compose_spec"
SPEC_SHA256 = "0dc04bd346dcfee1b1419628fff79937bbf076925f298f272a2b490e2b112bac"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def validator() -> jsonschema.Validator:
    raw = (SPEC_DIR / "compose_spec.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == SPEC_SHA256, (
        "vendored schema differs from docker-compose 1.29.2"
    )
    schema = json.loads(raw)
    assert schema["$schema"].startswith("http://json-schema.org/draft/2019-09/")  # spelled without https
    cls = jsonschema.Draft201909Validator
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_dockerfile_is_hadolint_clean() -> None:
    hadolint = Path(sys.executable).with_name("hadolint")
    proc = subprocess.run(
        [str(hadolint), "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ""


def test_dockerfile_runs_the_service_as_non_root_with_a_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11\.\d+-slim-bookworm AS base$", text, re.M)
    server = text[text.index("FROM base AS server") :]  # the last stage: what `docker build .` gives
    assert "FROM" not in server[1:]
    assert set(re.findall(r"^COPY (\S+)", server, re.M)) == {"pyproject.toml", "README.md", "service"}
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert re.search(r"^HEALTHCHECK .*\n.*/readyz", text, re.M)
    assert '\nENTRYPOINT ["python", "-m", "service", "serve"]\n' in text
    # dependency layer before the code layer: installing deps must not depend on service/ or clients/
    assert server.index("-r /tmp/requirements.txt") < server.index("COPY service")


# A full version and the base system's release: a tag that moves (3.11-slim, 7.2-alpine) gives
# another image the next time it is pulled.
PINNED = re.compile(r"[a-z]+:\d+\.\d+\.\d+-(slim-bookworm|alpine\d+\.\d+)")


def test_base_images_are_pinned_to_exact_versions(compose: dict[str, Any]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", dockerfile, re.M))
    bases = set(re.findall(r"^FROM (\S+)", dockerfile, re.M)) - stages
    pulled = {svc["image"] for svc in compose["services"].values() if "build" not in svc}
    assert bases == {"python:3.11.16-slim-bookworm"}
    assert pulled == {"redis:7.2.16-alpine3.21", "nginx:1.30.4-alpine3.24"}
    for image in bases | pulled:
        assert PINNED.fullmatch(image), image


def seconds(duration: str) -> float:
    """A compose/Docker duration ("1m30s", "300s") in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3}[u] for n, u in parts)


# A cold compile of every numba kernel takes about 110 s of one core; two replicas compiling at once
# on a 2-core machine take about twice that: a replica must not be marked unhealthy meanwhile.
COLD_START_SECONDS = 300


def test_replica_healthchecks_wait_for_readyz_through_a_cold_compile(compose: dict[str, Any]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    image = re.search(r"^HEALTHCHECK .*--start-period=(\S+) .*\n(.*)$", dockerfile, re.M)
    assert image is not None and "/readyz" in image.group(2)
    assert seconds(image.group(1)) >= COLD_START_SECONDS
    servers = {n: s for n, s in compose["services"].items() if s.get("build", {}).get("target") == "server"}
    assert set(servers) == {"api1", "api2", "api-cluster-1", "api-cluster-2"}
    for name, svc in servers.items():
        check = svc["healthcheck"]
        assert check["test"][0] == "CMD" and "/readyz'" in check["test"][-1], name
        assert seconds(check["start_period"]) >= COLD_START_SECONDS, name


def test_dockerignore_admits_exactly_what_the_dockerfile_copies() -> None:
    copied = set(re.findall(r"^COPY (\S+)", (ROOT / "Dockerfile").read_text(), re.M))
    admitted = {
        line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line[:1] == "!"
    }
    assert copied == admitted == {"pyproject.toml", "README.md", "service", "lab", "clients"}


def test_compose_file_matches_the_compose_schema(
    compose: dict[str, Any], validator: jsonschema.Validator
) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("services", "api1", "depends_on", "redis", "condition"), "service_ready"),
        (("services", "redis", "healthcheck", "retries"), "ten"),
        (("services", "lb", "profile"), ["replay"]),
    ],
)
def test_the_schema_check_catches_mistakes(
    compose: dict[str, Any], validator: jsonschema.Validator, path: tuple[str, ...], value: Any
) -> None:
    broken = copy.deepcopy(compose)
    node = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert list(validator.iter_errors(broken)), f"schema accepted {path} = {value!r}"


def test_compose_topology(compose: dict[str, Any]) -> None:
    s = compose["services"]
    redis = s["redis"]
    # fsync "always": feedback acknowledged by a replica survives a Redis crash (README, Several replicas)
    assert " ".join(redis["command"]).endswith("--appendonly yes --appendfsync always")
    assert redis["healthcheck"]["test"][-1] == "ping"
    assert redis["volumes"] == ["redis-data:/data"] and "redis-data" in compose["volumes"]
    for api in ("api1", "api2"):
        assert s[api]["depends_on"] == {"redis": {"condition": "service_healthy"}}
        assert s[api]["environment"]["REDIS_URL"] == "redis://redis:6379/0"
        assert "profiles" not in s[api]
    assert s["lb"]["ports"] == ["8000:8000"]
    assert s["lb"]["depends_on"] == {a: {"condition": "service_healthy"} for a in ("api1", "api2")}
    assert s["replay"]["profiles"] == ["replay"]
    # the service image is the server alone; the replay runs from the Dockerfile's replay stage
    assert s["api1"]["build"] == {"context": ".", "target": "server"}
    assert s["replay"]["build"] == {"context": ".", "target": "replay"}
    assert s["replay"]["entrypoint"] == ["python", "-m", "clickboost_client.replay"]
    assert s["replay"]["command"][s["replay"]["command"].index("--url") + 1] == "http://lb:8000"


def test_compose_secrets_are_required_variables(compose: dict[str, Any]) -> None:
    envs = [svc.get("environment", {}) for svc in compose["services"].values()]
    keys = {k: v for env in envs for k, v in env.items() if k.endswith(("_KEY", "_KEYS"))}
    # one name for a key everywhere: the server reads CLICKBOOST_API_KEY, and so do the SDK and replay
    assert set(keys) == {"CLICKBOOST_ADMIN_KEY", "CLICKBOOST_API_KEY"}
    assert keys["CLICKBOOST_API_KEY"].startswith("${CLICKBOOST_API_KEY:?")
    for name, value in keys.items():
        assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]+\}", value), (
            f"{name} must be ${{VAR:?message}}, is {value!r}"
        )


# Compose's variable syntax (compose specification, "Interpolation"): $$ is a dollar; ${VAR}, $VAR;
# ${VAR:-default} and ${VAR-default}; ${VAR:?message} and ${VAR?message} refuse to go on without it.
VARIABLE = re.compile(
    r"\$(?:(?P<dollar>\$)|\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|(?P<bare>[A-Za-z_]\w*))"
)


def interpolate(node: Any, env: dict[str, str], missing: list[str]) -> Any:
    """``node`` with the variables of its strings replaced from ``env``, as compose does before
    anything else; each required one that ``env`` lacks is added to ``missing`` (compose stops)."""
    if isinstance(node, dict):
        return {k: interpolate(v, env, missing) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, env, missing) for v in node]
    if not isinstance(node, str):
        return node

    def value(m: re.Match[str]) -> str:
        if m["dollar"]:
            return "$"
        name, op = m["name"] or m["bare"], m["op"] or ""
        unset = name not in env or (op.startswith(":") and env[name] == "")
        if unset and op.endswith("?"):
            missing.append(name)
        if unset:
            return m["arg"] if op.endswith("-") else ""
        return env[name]

    return VARIABLE.sub(value, node)


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines, as compose reads .env (comments and blank lines skipped)."""
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_compose_reads_its_keys_from_the_env_file_that_scripts_docker_env_writes(
    compose: dict[str, Any], validator: jsonschema.Validator, tmp_path: Path
) -> None:
    """`docker compose ps/logs/down` in a new shell: the keys come from .env (compose reads it from
    the project directory), not from variables exported in the shell that ran `up`; with neither,
    compose refuses to start anything."""
    missing: list[str] = []
    interpolate(compose, {}, missing)  # a new shell, no .env
    assert sorted(set(missing)) == ["CLICKBOOST_ADMIN_KEY", "CLICKBOOST_API_KEY"]

    env_file = tmp_path / ".env"
    script = ROOT / "scripts" / "docker-env"
    done = subprocess.run([str(script), str(env_file)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert env_file.stat().st_mode & 0o777 == 0o600
    env = read_env_file(env_file)
    assert set(env) == {"CLICKBOOST_API_KEY", "CLICKBOOST_ADMIN_KEY"}
    assert all(re.fullmatch(r"[0-9a-f]{48}", key) for key in env.values())
    assert env["CLICKBOOST_API_KEY"] != env["CLICKBOOST_ADMIN_KEY"]

    missing = []
    resolved = interpolate(compose, env, missing)  # the same shell, with the .env written
    assert missing == [] and list(validator.iter_errors(resolved)) == []
    services = resolved["services"]
    for name in ("api1", "api2", "api-cluster-1", "api-cluster-2", "replay"):
        assert services[name]["environment"]["CLICKBOOST_API_KEY"] == env["CLICKBOOST_API_KEY"], name
    assert services["api1"]["environment"]["CLICKBOOST_ADMIN_KEY"] == env["CLICKBOOST_ADMIN_KEY"]

    again = subprocess.run([str(script), str(env_file)], capture_output=True, text=True, timeout=30)
    assert again.returncode != 0 and "kept" in again.stderr  # the running services' keys stay
    assert read_env_file(env_file) == env
    # never committed (the .dockerignore test shows it is never sent to an image build either)
    assert subprocess.run(["git", "check-ignore", "-q", "--no-index", ".env"], cwd=ROOT).returncode == 0


def test_nginx_balances_over_the_compose_replicas(compose: dict[str, Any]) -> None:
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    upstream = re.search(r"upstream clickboost \{(.*?)\}", conf, re.S)
    assert upstream is not None
    servers = re.findall(r"^\s*server (\S+):8000\b", upstream.group(1), re.M)
    assert servers == ["api1", "api2"] and all(name in compose["services"] for name in servers)
    # a replica recreated with a new address is found again: its name is asked of Docker's DNS again
    # (`resolve`, in open-source nginx from 1.27.3 on, with the group in shared memory)
    assert re.search(r"^\s*resolver 127\.0\.0\.11 valid=\d+s ipv6=off;", conf, re.M)
    assert re.findall(r"^\s*server (\S+):8000 resolve\b", upstream.group(1), re.M) == servers
    assert re.search(r"^\s*zone clickboost \d+k;", upstream.group(1), re.M)
    version = re.fullmatch(r"nginx:(\d+)\.(\d+)\.(\d+)-.*", compose["services"]["lb"]["image"])
    assert version is not None and tuple(map(int, version.groups())) >= (1, 27, 3)
    assert re.search(r"^\s*listen 8000;", conf, re.M)
    assert "non_idempotent" not in conf  # a POST that reached a replica is never re-sent
    mounted = compose["services"]["lb"]["volumes"]
    assert mounted == ["./deploy/nginx.conf:/etc/nginx/nginx.conf:ro"]


def test_declared_model_is_valid_and_fits_the_replayed_dataset(compose: dict[str, Any]) -> None:
    specs = load_model_file(ROOT / "deploy" / "models.toml")  # what the server reads at start-up
    for spec in specs.values():
        build_learner(spec)
    cmd = compose["services"]["replay"]["command"]
    model, dataset = cmd[cmd.index("--model") + 1], cmd[cmd.index("--dataset") + 1]
    ds = load_dataset(dataset)
    assert (specs[model].n_features, specs[model].labels) == (ds.d, ds.classes)
    env = compose["services"]["api1"]["environment"]
    assert env["CLICKBOOST_CONFIG_FILE"] == "/etc/clickboost/models.toml"
    assert "./deploy/models.toml:/etc/clickboost/models.toml:ro" in compose["services"]["api1"]["volumes"]
