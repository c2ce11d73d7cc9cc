#!/usr/bin/env bash
# Dependency fences: pkg/events is standard library only; services never
# import each other; the contract packages never import a service.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=github.com/sandboxio/sandboxio
fail=0

nonstd=$(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./pkg/events | grep -v "^$mod/pkg/events$" || true)
if [ -n "$nonstd" ]; then
  echo "pkg/events must import only the standard library, but imports:"; echo "$nonstd"; fail=1
fi

for svc in services/*/; do
  svc=${svc%/}
  [ -n "$(ls "$svc"/*.go 2>/dev/null)" ] || continue
  own="$mod/$svc"
  bad=$(go list -deps "./$svc/..." 2>/dev/null | grep "^$mod/services/" | grep -v "^$own" || true)
  if [ -n "$bad" ]; then
    echo "$svc imports another service:"; echo "$bad"; fail=1
  fi
done

# pkg/sbxtest and pkg/worker/workertest run the router on purpose.
for pkg in $(go list ./pkg/... | grep -v -e "/pkg/sbxtest" -e "/pkg/worker/workertest"); do
  bad=$(go list -deps "$pkg" | grep "^$mod/services/" || true)
  if [ -n "$bad" ]; then
    echo "$pkg imports a service (pkg/ is the contract and SDK):"; echo "$bad" | sort -u; fail=1
  fi
done

# pkg/ is public: no exported identifier of it names a type of internal/ or
# services/ (a third party could not name it). pkg/sbxtest, the whole-system
# test harness, hands out the router and the embedded server.
if ! go run ./scripts/apicheck -exempt "$mod/pkg/sbxtest" ./pkg/...; then fail=1; fi

# What the public packages still import from internal/ (implementation, not
# API), and why; the list only shrinks. internal/recsign: the record
# signatures the auditor and the reaper verify; internal/tunnel: the port
# channel the docker worker and the CLI share; internal/cemsg: the
# CloudEvent framing of commands and records; internal/deadline: the
# tunnel's deadline channel (a part of internal/tunnel that the agent's
# dialled connections share, not a new dependency).
pkginternal="internal/cemsg internal/recsign internal/tunnel internal/deadline"
for pkg in $(go list ./pkg/... | grep -v -e "/pkg/sbxtest" -e "/pkg/worker/workertest"); do
  bad=$(go list -deps "$pkg" | grep "^$mod/internal/" | sed "s|^$mod/||" | grep -vxF $(printf -- '-e %s ' $pkginternal) || true)
  if [ -n "$bad" ]; then
    echo "$pkg imports internal packages outside the list in scripts/check-deps.sh:"; echo "$bad" | sort -u; fail=1
  fi
done

# internal/bus only forwards to pkg/bus; what still imports it is listed here
# and the list only shrinks.
busfwd=$(grep -rl --include='*.go' "\"$mod/internal/bus\"" . | sed 's|^\./||' | grep -vxF -e services/gateway/e2bapi/keys.go || true)
if [ -n "$busfwd" ]; then
  echo "import $mod/pkg/bus, not internal/bus (a forwarder):"; echo "$busfwd"; fail=1
fi

# internal/ is plumbing that services use: it never imports a service, in
# code or in tests (the binary's wiring is cmd/sandboxio/cli, the whole-system
# tests are under test/).
for pkg in $(go list ./internal/...); do
  bad=$(go list -f '{{join .Imports "\n"}}{{"\n"}}{{join .TestImports "\n"}}{{"\n"}}{{join .XTestImports "\n"}}' "$pkg" | grep "^$mod/services/" || true)
  bad2=$(go list -deps "$pkg" | grep "^$mod/services/" || true)
  if [ -n "$bad$bad2" ]; then
    echo "$pkg imports a service (internal/ is plumbing for services):"; printf '%s\n%s\n' "$bad" "$bad2" | sort -u; fail=1
  fi
done

# The Go SDK stays light: no embedded server, no exporters.
heavy=$(go list -deps ./pkg/client | grep -E "nats-server|google.golang.org/grpc|prometheus|otlp" || true)
if [ -n "$heavy" ]; then
  echo "pkg/client must not depend on the server or telemetry exporters:"; echo "$heavy"; fail=1
fi

# The MCP server is a client like any other: it reaches the system only
# through pkg/client (and the contract's types).
mcpbad=$(go list -f '{{join .Imports "\n"}}' ./services/mcp | grep "^$mod/" | grep -v -e "^$mod/pkg/client$" -e "^$mod/pkg/events$" || true)
if [ -n "$mcpbad" ]; then
  echo "services/mcp may import only pkg/client and pkg/events of this module, but imports:"; echo "$mcpbad"; fail=1
fi

if [ $fail -ne 0 ]; then exit 1; fi
echo "dependency fences hold"
