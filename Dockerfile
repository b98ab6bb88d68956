# Cascade proxy image. docker-compose.yml runs it next to pgvector/pgvector.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    TIKTOKEN_CACHE_DIR=/opt/tiktoken \
    CASCADE_HOST=0.0.0.0 CASCADE_PORT=8080 CASCADE_CONFIG=/app/config/agents.json

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
# pyproject ships migrations/ as the wheel's data files (share/cascade-proxy/migrations)
COPY migrations ./migrations
COPY config ./config
RUN pip install --no-cache-dir . \
 # Bake the BPE files in at build time: tiktoken downloads them on first use otherwise,
 # which fails on an offline host and slows every cold start.
 && python -c "import tiktoken; [tiktoken.get_encoding(e) for e in ('o200k_base', 'cl100k_base')]" \
 && useradd --create-home --uid 10001 cascade && chown -R cascade /app
USER cascade

EXPOSE 8080
# The port the proxy was given (CASCADE_PORT may be overridden), and a start period for
# the migrations that run at start-up (README: Deploying).
HEALTHCHECK --interval=10s --timeout=3s --retries=3 --start-period=120s \
  CMD python -c "import os,urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('CASCADE_PORT', '8080'), timeout=2)" || exit 1
CMD ["cascade-proxy", "serve"]
