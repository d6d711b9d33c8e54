#!/bin/bash
# GPU-machine side of benchmarks/te_h200/build.sh: collect the archive parts carried in this call under
# /tmp/te_parts (files outside the working tree stay while the machine is held), and once every part
# named in the manifest is there, check the archive's sha256 and unpack it to /tmp/te_site.
#   bash benchmarks/te_h200/stage.sh [PACK_DIR]   (run from the repository root; PACK_DIR default .te, or .te_gmm)
# Exit 0: unpacked (now or earlier); 3: parts still missing; 1: a broken archive.
set -eu
PACK=${1:-.te}
PARTS=/tmp/te_parts SITE=/tmp/te_site
mkdir -p "$PARTS"
[ -f "$SITE/.complete" ] && { echo "te: already unpacked in $SITE"; exit 0; }
cp "$PACK/manifest" "$PARTS/" 2>/dev/null || [ -f "$PARTS/manifest" ] || { echo "te: no $PACK/manifest carried" >&2; exit 1; }
for f in "$PACK"/te_site.tar.xz.part*; do [ -f "$f" ] && cp "$f" "$PARTS/"; done
# shellcheck disable=SC1091
. "$PARTS/manifest"
have=$(find "$PARTS" -name 'te_site.tar.xz.part*' | wc -l)
echo "te: $have of $parts parts on this machine"
[ "$have" -lt "$parts" ] && exit 3
got=$(cat "$PARTS"/te_site.tar.xz.part* | sha256sum | cut -d' ' -f1)
[ "$got" = "$sha256" ] || { echo "te: archive sha256 $got != manifest $sha256" >&2; exit 1; }
mkdir -p "$SITE"
cat "$PARTS"/te_site.tar.xz.part* | xz -d -T0 | tar -x -C "$SITE"
touch "$SITE/.complete"
echo "te: unpacked $(du -sh "$SITE" | cut -f1) into $SITE"
