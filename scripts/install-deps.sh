#!/bin/sh
# Installs the Debian packages deltacells needs, only those that are missing.
#   scripts/install-deps.sh [EXTRA ...]   also the packages named (make coverage: gcovr)
set -e
PKGS="gcc make clang pkg-config sqlite3 libsqlite3-dev libzstd-dev libxxhash-dev libhdf5-dev zlib1g-dev libcurl4-openssl-dev nginx-light
python3 python3-numpy python3-scipy python3-h5py python3-anndata python3-pandas
python3-torch python3-pytest python3-pip python3-setuptools
python3-matplotlib python3-zarr python3-zstandard locales $*"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
