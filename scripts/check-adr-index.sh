#!/usr/bin/env bash
# Every ADR file is listed in docs/adr/README.md, and every listed ADR exists.
set -euo pipefail
cd "$(dirname "$0")/../docs/adr"
fail=0
for f in [0-9][0-9][0-9][0-9]-*.md; do
  grep -qF "($f)" README.md || { echo "docs/adr/README.md does not list $f"; fail=1; }
done
for f in $(grep -o '([0-9][0-9][0-9][0-9]-[^)]*\.md)' README.md | tr -d '()'); do
  [ -f "$f" ] || { echo "docs/adr/README.md lists $f, which does not exist"; fail=1; }
done
if [ $fail -ne 0 ]; then exit 1; fi
echo "the ADR index lists every ADR"
