# Threadkeeper: the Slack bot (Socket Mode by default). Build: docker build -t threadkeeper .
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The dependencies first, in their own layer: a change to the code alone reuses it.
COPY pyproject.toml constraints.txt ./
RUN python -m venv /opt/threadkeeper \
 && python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep=chr(10))" \
    > /tmp/requirements.txt \
 && /opt/threadkeeper/bin/python -m pip install --quiet --no-cache-dir -c constraints.txt -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
COPY README.md LICENSE ./
COPY threadkeeper ./threadkeeper
COPY bot ./bot
COPY services ./services
COPY persistence ./persistence
COPY evals ./evals
COPY deploy/install.sh ./deploy/install.sh
RUN sh deploy/install.sh /opt/threadkeeper /src && rm -rf /src/build \
 && useradd --create-home --uid 10001 threadkeeper
ENV PATH=/opt/threadkeeper/bin:$PATH

USER threadkeeper
WORKDIR /home/threadkeeper
# Socket Mode needs no inbound port; /healthz and /metrics are served on 8080 for the health check and scraping.
# For HTTP events instead: threadkeeper serve --http --port 3000 (and EXPOSE 3000).
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=3)"]
# A deploy sends SIGTERM: running turns get THREADKEEPER_SHUTDOWN_SECONDS to finish (give the platform's stop timeout more).
CMD ["threadkeeper", "serve", "--socket", "--port", "8080"]
