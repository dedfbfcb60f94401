# Threadkeeper: the Slack bot (Socket Mode by default). Build: docker build -t threadkeeper .
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE constraints.txt ./
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
# Socket Mode needs no inbound port; for HTTP events: threadkeeper serve --http --port 3000 (and EXPOSE 3000).
CMD ["threadkeeper", "serve", "--socket"]
