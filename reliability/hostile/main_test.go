// Package hostile throws hostile input at the real edgehook binary: malformed and oversize
// requests at its API, subscriber URLs aimed at internal networks (SSRF), forged and replayed hops
// at the local edge, and a grep of every log line for secrets and payloads.
package hostile

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
