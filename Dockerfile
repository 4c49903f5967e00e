# The server as a container image:  docker build -t memory-catalog .
#
# Two stages: the first builds the wheel from exactly the files it is made of (the same files
# tests/test_container.py builds a wheel from), the second installs that wheel into a virtual
# environment on a slim Python and runs it as an unprivileged user. With CATALOG_DATABASE_URL set
# (compose.yaml) it uses that PostgreSQL; without it, the embedded PostgreSQL in /data.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY catalog ./catalog
COPY sql ./sql
COPY policies ./policies
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin catalog \
    && mkdir /data && chown catalog:catalog /data
COPY --from=build /wheels /wheels
# the versions the tests last passed on (constraints.txt: the Makefile installs within them too)
COPY constraints.txt /wheels/
# the `upgrade` extra: the earlier releases' PostgreSQL 16 (pgserver), which `catalog upgrade` runs
# to move a /data made by an earlier image to this one's PostgreSQL 18; nothing else starts it
RUN python -m venv /venv \
    && /venv/bin/pip install --no-cache-dir -c /wheels/constraints.txt "$(echo /wheels/*.whl)[upgrade]" \
    && rm -rf /wheels
ENV PATH=/venv/bin:$PATH \
    CATALOG_DATA_DIR=/data \
    PYTHONUNBUFFERED=1
USER catalog
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080
# /healthz answers 200 when the server can serve, 503 while its database is away or it drains
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]
# SIGTERM drains (CATALOG_DRAIN_SECONDS), then stops: give `docker stop` longer than that
STOPSIGNAL SIGTERM
ENTRYPOINT ["catalog"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
