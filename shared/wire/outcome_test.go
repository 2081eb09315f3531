package wire_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/shared/wire"
)

func TestParseOutcome(t *testing.T) {
	t.Parallel()
	valid := []string{"forwarded", "duplicate", "coalesced", "upstream_timeout", "upstream_unreachable",
		"rejected:bad_signature", "rejected:x", "rejected:reason_2"}
	for _, r := range []string{wire.ReasonMethod, wire.ReasonBodyTooLarge, wire.ReasonMissingHeader, wire.ReasonMalformedHeader,
		wire.ReasonStaleTimestamp, wire.ReasonBadSignature, wire.ReasonUnknownSubscriber, wire.ReasonBadRecord, wire.ReasonMisconfigured} {
		valid = append(valid, string(wire.Rejected(r)))
	}
	for _, s := range valid {
		o, err := wire.ParseOutcome(s)
		if err != nil || string(o) != s {
			t.Errorf("ParseOutcome(%q) = %q, %v; want it back", s, o, err)
		}
	}
	for _, s := range []string{"", "Forwarded", "forwarded ", "rejected", "rejected:", "rejected:Bad", "rejected:bad signature",
		"rejected:a:b", "rejected:bad-signature", "accepted", "upstream"} {
		if o, err := wire.ParseOutcome(s); err == nil || !strings.Contains(err.Error(), "unknown edge outcome") {
			t.Errorf("ParseOutcome(%q) = %q, %v; want an unknown-outcome error", s, o, err)
		}
	}
}

func TestRejected(t *testing.T) {
	t.Parallel()
	o := wire.Rejected(wire.ReasonStaleTimestamp)
	if o != "rejected:stale_timestamp" {
		t.Fatalf("Rejected = %q", o)
	}
	if reason, ok := o.IsRejected(); !ok || reason != wire.ReasonStaleTimestamp {
		t.Fatalf("IsRejected = %q, %v", reason, ok)
	}
	for _, o := range []wire.Outcome{wire.OutcomeForwarded, wire.OutcomeDuplicate, wire.OutcomeCoalesced, wire.OutcomeUpstreamTimeout, wire.OutcomeUpstreamUnreachable} {
		if _, ok := o.IsRejected(); ok {
			t.Errorf("%q.IsRejected() = true", o)
		}
	}
}

// TestKnownReasonNamesEveryReason reads the Reason constants from outcome.go, so that a reason
// added there and not to KnownReason is caught: its rejections would be counted as "other".
func TestKnownReasonNamesEveryReason(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "outcome.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		spec, ok := node.(*ast.ValueSpec)
		if !ok || len(spec.Values) != len(spec.Names) {
			return true
		}
		for i, name := range spec.Names {
			lit, ok := spec.Values[i].(*ast.BasicLit)
			if !ok || !strings.HasPrefix(name.Name, "Reason") {
				continue
			}
			n++
			if reason, _ := strconv.Unquote(lit.Value); !wire.KnownReason(reason) {
				t.Errorf("KnownReason(%s = %s) is false", name.Name, lit.Value)
			}
		}
		return true
	})
	if n < 10 {
		t.Fatalf("found %d Reason constants in outcome.go; the test no longer reads them", n)
	}
	if wire.KnownReason("made_up") {
		t.Error(`KnownReason("made_up") is true`)
	}
}
