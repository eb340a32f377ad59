#!/bin/sh
# The Python client's tests, against real evstored processes.
# The binaries come from $EVSTORE_BIN_DIR, else the repository's .build/debug.
# Usage: clients/python/run-tests.sh [unittest options, e.g. -v or -k watch]
set -e
cd "$(dirname "$0")"
exec "${PYTHON:-python3}" -m unittest discover -s tests -t . "$@"
