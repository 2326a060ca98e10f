#!/usr/bin/env bash
# Builds the Debian package from a built wirespeed binary: scripts/deb.sh BIN OUTDIR.
# `make deb` passes the release binary and target/deb; the packaging test passes the binary
# its own build made. Needs nothing beyond dpkg-dev (dpkg-deb, dpkg-shlibdeps) and gzip.
#
# OUTDIR/stage/ holds the package tree (what dpkg-deb packs); OUTDIR/wirespeed_VERSION_ARCH.deb
# is the package. Running it again rebuilds both from scratch.
set -euo pipefail

if (($# != 2)); then
  echo "usage: scripts/deb.sh BIN OUTDIR (make deb runs it with target/release/wirespeed target/deb)" >&2
  exit 2
fi
bin=$(realpath "$1")
out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
[[ -x $bin ]] || { echo "deb: $1 is not an executable; build it first (make build)" >&2; exit 1; }
for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture gzip; do
  command -v "$tool" >/dev/null || { echo "deb: $tool is missing; apt-get install dpkg-dev" >&2; exit 1; }
done

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml")
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
# Reproducible: file times and the changelog date come from the last commit.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
# The project has no package address yet; a real build names one: DEB_MAINTAINER="Name <mail>".
maintainer=${DEB_MAINTAINER:-wirespeed maintainers <wirespeed@localhost>}
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)

mkdir -p "$out"
out=$(realpath "$out")
stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage/DEBIAN"
doc=$stage/usr/share/doc/wirespeed

install -D -m 0755 "$bin" "$stage/usr/bin/wirespeed"
# Symbols are for debugging builds; the package carries the code.
strip --strip-unneeded "$stage/usr/bin/wirespeed"
for unit in wirespeed-fp wirespeed-lb; do
  install -D -m 0644 "$root/packaging/systemd/$unit.service" "$stage/lib/systemd/system/$unit.service"
  install -D -m 0644 "$root/packaging/default/$unit" "$stage/etc/default/$unit"
  echo "/etc/default/$unit" >>"$stage/DEBIAN/conffiles"
done

# Man pages and completions come from the binary's own clap definitions.
"$bin" man "$stage/usr/share/man/man1"
gzip -9n "$stage"/usr/share/man/man1/*.1
install -d "$stage/usr/share/bash-completion/completions"
"$bin" completions bash >"$stage/usr/share/bash-completion/completions/wirespeed"

install -D -m 0644 "$root/packaging/debian/copyright" "$doc/copyright"
date_rfc2822=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
cat >"$doc/changelog" <<EOF
wirespeed ($version) unstable; urgency=medium

  * Built from the wirespeed workspace at commit $commit.

 -- $maintainer  $date_rfc2822
EOF
gzip -9n "$doc/changelog"

for script in postinst prerm postrm; do
  install -m 0755 "$root/packaging/debian/$script" "$stage/DEBIAN/$script"
done

# Recommends: what `fp run` reads the filter configuration with (libnftables or `nft`, `ipset
# save`, `iptables-nft-save`); unable to read the ruleset, it hands what the filter would see to
# the kernel.
# Depends: the shared libraries the binary links, as dpkg-shlibdeps names their packages.
# It wants a source tree with debian/control; an empty one in a scratch directory will do.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/debian"
touch "$scratch/debian/control"
depends=$(cd "$scratch" && dpkg-shlibdeps -O "$stage/usr/bin/wirespeed" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
[[ -n $depends ]] || { echo "deb: dpkg-shlibdeps found no dependencies of $bin" >&2; exit 1; }

installed_size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<EOF
Package: wirespeed
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: $depends
Recommends: nftables, ipset, iptables
Section: net
Priority: optional
Description: Linux networking at kernel-bypass speed, measured
 One binary: a thread-per-core server runtime on the kernel stack or a userspace
 TCP/IP stack over AF_XDP or DPDK; a transparent XDP/TC fast path for Linux
 routing, bridging and filtering (wirespeed-fp.service); an XDP L4 load balancer
 configured like ipvsadm (wirespeed-lb.service); and the instruments that
 measure them.
EOF

(cd "$stage" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z |
  xargs -0 md5sum >DEBIAN/md5sums)
find "$stage" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

deb=$out/wirespeed_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
