#!/usr/bin/env bash
# No tracked file over 1 MiB unless scripts/large-files.txt names it with the
# reason beside it ("path<TAB or spaces>reason"). Build outputs are ignored
# (.gitignore) and never tracked.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((1024 * 1024))
allow=scripts/large-files.txt
fail=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  size=$(stat -c %s "$f")
  [ "$size" -le "$limit" ] && continue
  reason=$(awk -v p="$f" '$1 == p { $1 = ""; sub(/^ +/, ""); print; exit }' "$allow" 2>/dev/null || true)
  if [ -z "$reason" ]; then
    echo "$f is $size bytes (over 1 MiB) and $allow gives no reason for it"; fail=1
  fi
done < <(git ls-files -z)
if [ $fail -ne 0 ]; then exit 1; fi
echo "no tracked file over 1 MiB without a reason"
