# chat-agent: the server on SQLite and local files by default (docs/deployment.md).
#   docker build -t chat-agent .
#   docker run -p 127.0.0.1:8000:8000 -v chat-agent-data:/data --env-file .env chat-agent
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# bubblewrap runs the code interpreter's sandbox; where the container may not create user
# namespaces, the tool is not offered and session.tools says why. Debian's security updates
# are wanted, hence no pinned version.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY chat_agent ./chat_agent
RUN python -m venv /opt/venv \
    && pip install --no-cache-dir .
COPY server.py ./
COPY tools ./tools

RUN useradd --system --uid 10001 --user-group --home-dir /app --no-create-home chat \
    && mkdir /data \
    && chown chat:chat /data
USER 10001:10001

# Inside a container the server listens on every interface: it then refuses to start
# without CHAT_AGENT_API_KEYS (or CHAT_AGENT_ALLOW_NO_AUTH=1 where the port is published on
# loopback only, as compose.yaml does).
ENV CHAT_AGENT_HOST=0.0.0.0 \
    CHAT_AGENT_PORT=8000 \
    CHAT_AGENT_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('CHAT_AGENT_PORT', '8000') + '/health', timeout=4)"]

# The README's command: python server.py (settings from the environment).
CMD ["python", "server.py"]
