# clickboost images. Lint: `hadolint Dockerfile` (a test runs it).
#   server (the default, last stage): `python -m service serve` on port 8000, the server package and
#          its dependencies alone (docker-compose.yml runs two of these behind nginx, with Redis);
#   replay: the replay load-test client with the lab that reads the datasets (compose's replay profile).
# The full Python version and Debian release: a rebuild gets the same ones (3.11-slim moved from
# bookworm to trixie with Debian 13).
FROM python:3.11.16-slim-bookworm AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

RUN groupadd --gid 10001 clickboost \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin clickboost

FROM base AS replay

COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['lab']))" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
COPY README.md ./
COPY service ./service
COPY lab ./lab
COPY clients ./clients
RUN pip install --no-cache-dir --no-deps . ./clients

USER 10001:10001
ENTRYPOINT ["python", "-m", "clickboost_client.replay"]

FROM base AS server

# Dependencies in their own layer, read from pyproject.toml alone: code changes do not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# The server alone: without lab/ the package finder installs service/ only.
COPY README.md setup.py ./
COPY service ./service
# gcc builds the C extensions (service/_features.c, service/_decisions.c) and leaves in the same layer;
# the import check fails the build if one is missing (the server would run the slower Python path).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --no-cache-dir --no-deps . \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && python -c "import service._features, service._decisions" \
    && python -m service warm \
    && chown -R 10001:10001 "$(python -c 'import service._jit_cache as j; print(j.ROOT / "__pycache__" / "numba")')"
# ^ compiles every kernel into the package's numba cache at build time (`clickboost warm`; a server
#   compiles only its learners' kernels, when first needed), and gives that cache to the user the
#   server runs as: numba uses a cache only where it can write, so a container starts without
#   compiling (it recompiles, into that cache, only on a CPU of another kind; service/_jit_cache.py).

# Without REDIS_URL the server keeps its models in the SQLite file under /data: mount a volume
# there to keep them across containers.
ENV CLICKBOOST_DATA_DIR=/data
RUN mkdir /data && chown 10001:10001 /data
VOLUME ["/data"]

# Numeric ids: the runtime can check that the user is not root without reading /etc/passwd.
USER 10001:10001
EXPOSE 8000

# Ready = store reachable and models loaded: what the load balancer's depends_on waits for (/healthz
# answers at once; /readyz is 503 while the kernels compile). The start period covers a cold compile
# of every kernel (about 2 min of one core, more with two replicas on two cores), which a CPU of
# another kind than the build's needs: failures in it do not count, and the first success ends it.
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2)"]

ENTRYPOINT ["python", "-m", "service", "serve"]
CMD ["--host", "0.0.0.0", "--port", "8000"]
