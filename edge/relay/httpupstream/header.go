package httpupstream

import (
	"net/http"
	"strings"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// The names of the headers a delivery and its answers carry, in both spellings: relay.Header's
// lower case and net/http's canonical form. Converting a name through these tables costs no
// allocation, where strings.ToLower and http.CanonicalHeaderKey make a new string of every name
// they change (net/http interns only a few common ones), several per request on each side.
var lowerOf, canonicalOf = func() (map[string]string, map[string]string) {
	names := []string{
		"Accept", "Accept-Encoding", "Allow", "Cache-Control", "Connection", "Content-Encoding", "Content-Length",
		"Content-Type", "Date", "Location", "Server", "User-Agent", "Vary",
		wire.HeaderWebhookID, wire.HeaderWebhookTimestamp, wire.HeaderWebhookSignature,
		wire.HeaderDeliveryID, wire.HeaderSubscriberID, wire.HeaderEventType, wire.HeaderCoalesceKey, wire.HeaderAttempt,
		wire.HeaderHopTimestamp, wire.HeaderHopSignature, wire.HeaderOutcome, wire.HeaderUpstreamLatency, wire.HeaderRetryAfter,
	}
	lower, canonical := make(map[string]string, len(names)), make(map[string]string, len(names))
	for _, n := range names {
		l, c := strings.ToLower(n), http.CanonicalHeaderKey(n)
		lower[c], canonical[l] = l, c
	}
	return lower, canonical
}()

// FromHTTP returns h as a relay.Header: lower-case names, each with its values joined by ", " as
// the Fetch API joins them.
func FromHTTP(h http.Header) relay.Header {
	out := make(relay.Header, 0, len(h))
	for name, values := range h {
		lower, ok := lowerOf[name]
		if !ok {
			lower = strings.ToLower(name)
		}
		out.Set(lower, strings.Join(values, ", ")) // Set lower-cases a lower-case name without a copy
	}
	return out
}

// SetHTTP sets each field of h in dst, replacing what dst has under its name, as http.Header.Set
// does.
func SetHTTP(dst http.Header, h relay.Header) {
	values := make([]string, len(h)) // one array for every field's value
	for i, f := range h {
		name, ok := canonicalOf[f.Name]
		if !ok {
			name = http.CanonicalHeaderKey(f.Name)
		}
		values[i] = f.Value
		dst[name] = values[i : i+1 : i+1]
	}
}
