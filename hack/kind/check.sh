#!/usr/bin/env bash
# The kind node's pieces that can be checked without a Docker engine (hack/test.sh runs this; needs the binaries
# of `cargo build --workspace --bins`, systemd-analyze and hadolint from hack/install-deps.sh):
#   1. the Dockerfile: hadolint (warnings fail, DL3008 aside: the project does not pin Debian package versions),
#      and every COPY source of the build context exists;
#   2. the units: `systemd-analyze verify` in a temp root laid out as the kind-node target lays the image out
#      (this host's systemd units stand in for the node's, the built binaries sit where the Dockerfile copies
#      them), so each ExecStart must name an executable that is there; any message, even a warning, fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${CARGO_TARGET_DIR:-target}/debug

echo "hadolint Dockerfile"
hadolint --ignore DL3008 --failure-threshold warning Dockerfile

echo "COPY sources of the build context"
missing=0
while read -r src; do
  [ -e "$src" ] || { echo "Dockerfile: COPY source $src is missing" >&2; missing=1; }
done < <(
  # Joined continuation lines; COPY without --from=, all words but the last (the destination).
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' Dockerfile |
    awk 'toupper($1) == "COPY" && $2 !~ /^--from=/ { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }'
)
grep -q '^FROM .* AS kind-node$' Dockerfile || { echo "Dockerfile: no kind-node target" >&2; missing=1; }
((missing == 0))

echo "systemd-analyze verify hack/kind/*.service"
root=$(mktemp -d /tmp/crius-kind-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/lib/systemd" "$root/usr/local/bin" "$root/etc/systemd/system" "$root/etc/crius"
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
for b in criusd crius crius-runc containerd-shim-crius-v2; do
  [ -x "$target/$b" ] || { echo "$target/$b is missing: cargo build --workspace --bins first" >&2; exit 1; }
  cp "$target/$b" "$root/usr/local/bin/"
done
cp hack/kind/preload-images.sh "$root/usr/local/bin/crius-kind-preload"
cp hack/kind/criusd.toml "$root/etc/crius/config.toml"
cp hack/kind/criusd.service hack/kind/crius-preload.service "$root/etc/systemd/system/"
for unit in criusd.service crius-preload.service; do
  out=$(systemd-analyze verify --root="$root" "$root/etc/systemd/system/$unit" 2>&1) ||
    { echo "systemd-analyze verify $unit failed: $out" >&2; exit 1; }
  [ -z "$out" ] || { echo "systemd-analyze verify $unit: $out" >&2; exit 1; }
  echo "  $unit: verified"
done
# The check is not vacuous: the same verify refuses a unit whose ExecStart is not in the root.
sed 's|^ExecStart=/usr/local/bin/criusd|ExecStart=/usr/local/bin/criusd-absent|' hack/kind/criusd.service \
  >"$root/etc/systemd/system/crius-absent.service"
if systemd-analyze verify --root="$root" "$root/etc/systemd/system/crius-absent.service" >/dev/null 2>&1; then
  echo "systemd-analyze verify passed a unit whose ExecStart is missing: the check proves nothing" >&2
  exit 1
fi
echo "  the config the unit names parses: $("$root/usr/local/bin/criusd" --config "$root/etc/crius/config.toml" --print-config | grep -c '=') keys"
echo "kind pieces checked"
