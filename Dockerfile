# Cascade proxy image. docker-compose.yml runs it next to pgvector/pgvector.
#
# Layers, least to most often changed: the pinned serving dependencies (constraints.txt, which
# `make constraints` regenerates with this Python version), tiktoken's BPE files, the code,
# the config. A code change rebuilds the last two only. Everything is installed and copied by
# root and only readable by the runtime user, who can write to /tmp and /data alone. The
# embedded PostgreSQL (the `embedded` extra) is not installed: DATABASE_URL names the server.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TIKTOKEN_CACHE_DIR=/opt/tiktoken \
    CASCADE_HOST=0.0.0.0 CASCADE_PORT=8080 CASCADE_CONFIG=/app/config/agents.json \
    CASCADE_DATA_DIR=/data

# 1. The dependencies, from the lock file alone.
COPY constraints.txt /opt/cascade/constraints.txt
RUN pip install -r /opt/cascade/constraints.txt

# 2. tiktoken's BPE files, fetched at build time: tiktoken downloads them on first use
# otherwise, which fails on an offline host and slows every cold start (proxy/tokenizers.py).
RUN python -c "import tiktoken; [tiktoken.get_encoding(e) for e in ('o200k_base', 'cl100k_base')]"

# 3. The code, installed as a wheel (its migrations go to /usr/local/share/cascade-proxy);
# the constraints keep pip from changing any dependency step 1 installed. The sources are
# removed: the installed copy is the one that runs. An extra for the image is named here
# ('/src[tracing]', say), then `make constraints` pins its dependencies too.
COPY pyproject.toml /src/
COPY proxy /src/proxy
COPY migrations /src/migrations
RUN pip install -c /opt/cascade/constraints.txt '/src[tracing]' && rm -rf /src

# 4. The config (docker-compose.yml mounts its own over it, read-only) and the runtime user,
# whose home is the data directory.
COPY config /app/config
RUN groupadd --system --gid 10001 cascade \
 && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin cascade \
 && install -d -o cascade -g cascade -m 0700 /data
USER 10001:10001
WORKDIR /app

EXPOSE 8080
# /healthz, not /readyz: liveness, so a database outage (which /readyz reports, for a load
# balancer) does not mark the container unhealthy and get it restarted. Neither needs a
# proxy key. /healthz answers once the start is done, migrations included (a connection
# made before waits for it; hence the start period). CASCADE_PORT, not 8080: a deployment
# may move the port. No HTTP(S)_PROXY: the check must not go out through the provider's
# egress proxy.
HEALTHCHECK --interval=10s --timeout=3s --retries=3 --start-period=120s \
  CMD python -c "import os,urllib.request as u; u.build_opener(u.ProxyHandler({})).open('http://127.0.0.1:%s/healthz' % os.environ.get('CASCADE_PORT', '8080'), timeout=2)" || exit 1
CMD ["cascade-proxy", "serve"]
