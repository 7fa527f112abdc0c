#!/usr/bin/env bash
# Install Debian's chromium for the JupyterLab browser test, where this machine allows it.
set -uo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
    || echo "chromium could not be installed: the browser test will skip"
else
  echo "no root/apt: chromium not installed, the browser test will skip"
fi
exit 0
