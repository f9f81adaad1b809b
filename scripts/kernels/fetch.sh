#!/usr/bin/env bash
# Fetches Debian's stock cloud kernels for the kernel matrix
# (scripts/test-kernels.sh) into $CACHE/<suite>/vmlinuz, one per suite:
# bullseye (5.10), bookworm (6.1), trixie (6.12). apt-get download reads
# a private sources list and package lists under $CACHE/apt: the
# machine's own apt configuration is left as it is. A suite whose
# vmlinuz is cached is not fetched again (CI keeps $CACHE).
#   usage: fetch.sh CACHE [SUITE...]
set -euo pipefail
cache=${1:?usage: fetch.sh CACHE [SUITE...]}
shift
suites=("$@")
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
[ $# -gt 0 ] || suites=(bullseye bookworm trixie)
# The machine's Debian mirror (deb822 or one-line format), else Debian's.
mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /^https?:/){print $i; exit}}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
for suite in "${suites[@]}"; do
  dir=$cache/$suite
  if [ -s "$dir/vmlinuz" ]; then
    echo "kernel $suite: cached ($(cat "$dir/version"))"
    continue
  fi
  apt=$cache/apt/$suite
  mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/parts" "$dir"
  echo "deb $mirror $suite main" >"$apt/sources.list"
  o=(-o Dir::Etc::sourcelist="$apt/sources.list" -o Dir::Etc::sourceparts="$apt/parts" \
     -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt" -o Dir::Cache::archives="$apt/archives" \
     -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root -o Debug::NoLocking=1)
  apt-get "${o[@]}" -qq update
  # The cloud flavour's metapackage names the suite's current kernel.
  pkg=$(apt-cache "${o[@]}" depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  [ -n "$pkg" ] || { echo "kernel $suite: no linux-image-cloud-amd64 in $mirror" >&2; exit 1; }
  (cd "$apt/archives" && apt-get "${o[@]}" -qq download "$pkg")
  deb=$(ls "$apt/archives/${pkg}"_*.deb | head -1)
  rm -rf "$apt/x"
  dpkg-deb -x "$deb" "$apt/x"
  cp "$apt"/x/boot/vmlinuz-* "$dir/vmlinuz"
  basename "$apt"/x/boot/vmlinuz-* | sed 's/^vmlinuz-//' >"$dir/version"
  rm -rf "$apt/x" "$deb"
  echo "kernel $suite: $(cat "$dir/version")"
done
