// Package e2e holds cws's end-to-end tests: the real `cws serve` binary on real Docker
// and Redis, driven through the official go-sdk MCP client and the REST API, plus the
// auth and isolation suites against the real router with an in-process sandbox. It has
// no non-test code; run it with `CI=true go test ./e2e/ -v -count=1`.
package e2e
