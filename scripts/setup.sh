#!/usr/bin/env bash
# Installs everything igtcache needs to build, test and benchmark on Debian 12.
# Idempotent: packages already present are skipped, s3rver is installed once
# into the project-local .deps/ folder (never globally).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  build-essential cmake pkg-config git
  fuse3 libfuse3-dev
  libcurl4-openssl-dev libssl-dev
  librocksdb-dev libfmt-dev libyaml-cpp-dev libspdlog-dev
  catch2 libboost-math-dev libpugixml-dev libxxhash-dev libcli11-dev
  nlohmann-json3-dev prometheus-cpp-dev
  python3 python3-matplotlib python3-numpy python3-yaml python3-torch nodejs npm
  s3fs rclone
  # mkfs.ext4 for the disk-full test; libFuzzer's runtime for scripts/fuzz.sh
  e2fsprogs libclang-rt-14-dev
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# node may come from elsewhere than Debian's nodejs package; accept any node+npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: Debian packages present"
fi

# The test S3 server, pinned, project-local.
S3RVER_DIR=.deps/s3rver
if [[ ! -f "$S3RVER_DIR/node_modules/s3rver/bin/s3rver.js" ]]; then
  echo "setup: installing s3rver@3.7.1 into $S3RVER_DIR"
  mkdir -p "$S3RVER_DIR"
  (cd "$S3RVER_DIR" && npm install --no-audit --no-fund --silent s3rver@3.7.1 >/dev/null)
else
  echo "setup: s3rver present"
fi
