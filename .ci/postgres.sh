#!/usr/bin/env bash
# Install Debian's PostgreSQL server for the PostgreSQL store's tests, where this machine allows
# it. The tests start a throw-away cluster of their own with initdb (tests/fakes/postgres.py);
# none is started here. Without it those tests skip with the reason.
set -uo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null \
    || echo "postgresql could not be installed: the PostgreSQL tests will skip"
else
  echo "no root/apt: postgresql not installed, the PostgreSQL tests will skip"
fi
exit 0
