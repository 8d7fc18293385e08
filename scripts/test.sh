#!/usr/bin/env bash
# Command (2) of the README: installs what is missing, builds, and runs the
# whole test suite (unit tests + real FUSE mounts against a local directory
# and s3rver on 127.0.0.1). ctest prints its summary at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd "${BUILD_DIR:-build}"
# Unit tests run two at a time; mount tests hold the 'fuse' resource lock
# so they run one after another.
ctest --output-on-failure -j2 --timeout 900 "$@"
