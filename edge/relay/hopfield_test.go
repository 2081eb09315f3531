package relay

import (
	"strings"
	"testing"

	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// TestHopFieldNames: hopText reads each hop header (wire's name, lower-cased) into its own HopText
// field, and no name of the same length with any one byte changed (in its lowest bit or its case
// bit), nor one byte shorter or longer, into any field.
func TestHopFieldNames(t *testing.T) {
	t.Parallel()
	var h Header
	for _, name := range wire.HopHeaders {
		h = append(h, Field{strings.ToLower(name), name})
	}
	want := signature.HopText{
		DeliveryID: wire.HeaderDeliveryID, SubscriberID: wire.HeaderSubscriberID, EventType: wire.HeaderEventType,
		CoalesceKey: wire.HeaderCoalesceKey, Attempt: wire.HeaderAttempt, Timestamp: wire.HeaderHopTimestamp,
		Signature: wire.HeaderHopSignature,
	}
	if got := hopText(h); got != want {
		t.Fatalf("hopText = %+v, want %+v", got, want)
	}
	for _, f := range h {
		misses := []string{f.Name[:len(f.Name)-1], f.Name + "d"}
		for i := range f.Name {
			for _, bit := range []byte{0x01, 0x20} {
				b := []byte(f.Name)
				b[i] ^= bit
				misses = append(misses, string(b))
			}
		}
		for _, m := range misses {
			if got := hopText(Header{{m, "v"}}); got != (signature.HopText{}) {
				t.Errorf("%q (a near miss of %s) is read as %+v", m, f.Name, got)
			}
		}
	}
}

// TestSameString: sameString agrees with == for every length around its eight-byte steps and a
// difference at any position.
func TestSameString(t *testing.T) {
	t.Parallel()
	const s = "0123456789abcdefghijklmnopqrstuvwxyz"
	for n := range len(s) + 1 {
		a := s[:n]
		if !sameString(a, strings.Clone(a)) {
			t.Fatalf("sameString(%q, itself) = false", a)
		}
		if n > 0 && sameString(a, s[:n-1]) {
			t.Fatalf("sameString(%q, %q) = true", a, s[:n-1])
		}
		for i := range n {
			b := []byte(a)
			b[i] ^= 1
			if sameString(a, string(b)) {
				t.Fatalf("sameString(%q, %q) = true", a, b)
			}
		}
	}
}
