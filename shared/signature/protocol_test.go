package signature_test

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// protocolDoc is the specification whose examples TestProtocolDoc checks.
const protocolDoc = "../../docs/PROTOCOL.md"

// docBlock is one fenced block of the document: its info string, first line number and lines.
type docBlock struct {
	tag   string
	line  int
	lines []string
}

// readDocBlocks returns the fenced blocks of path. Every fence must carry one of the checked tags
// or none, so a misspelt tag cannot hide an example from the test.
func readDocBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []docBlock
	var cur *docBlock
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fence, isFence := strings.CutPrefix(line, "```")
		switch {
		case isFence && cur == nil:
			switch fence {
			case "", "vector", "kv-record", "kv-bulk", "retry-after":
			default:
				t.Fatalf("%s:%d: unknown block tag %q", path, n, fence)
			}
			cur = &docBlock{tag: fence, line: n + 1}
		case isFence:
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: unterminated block", path, cur.line)
	}
	return blocks
}

// fields parses a vector block's "key: value" lines; keys are unique.
func (b docBlock) fields(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for i, line := range b.lines {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("line %d: %q is not \"key: value\"", b.line+i, line)
		}
		if _, dup := m[k]; dup {
			t.Fatalf("line %d: key %q twice", b.line+i, k)
		}
		m[k] = v
	}
	return m
}

// vectorFields checks that m has every key in required and no key outside required and optional.
func vectorFields(t *testing.T, m map[string]string, required, optional []string) {
	t.Helper()
	allowed := map[string]bool{}
	for _, k := range optional {
		allowed[k] = true
	}
	for _, k := range required {
		allowed[k] = true
		if _, ok := m[k]; !ok {
			t.Fatalf("missing key %q", k)
		}
	}
	for k := range m {
		if !allowed[k] {
			t.Fatalf("unexpected key %q", k)
		}
	}
}

func parseInt(t *testing.T, key, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return n
}

func parseSecrets(t *testing.T, s string) []signature.Secret {
	t.Helper()
	secs, err := signature.ParseSecrets(s)
	if err != nil {
		t.Fatal(err)
	}
	return secs
}

// TestProtocolDoc checks every example in docs/PROTOCOL.md against the code, and that the
// document still holds the examples the specification promises.
func TestProtocolDoc(t *testing.T) {
	t.Parallel()
	count := map[string]int{}
	sawReference, sawRotation, sawVVV, sawHopCoalesce, sawHopPlain := false, false, false, false, false
	for _, b := range readDocBlocks(t, protocolDoc) {
		if b.tag == "" {
			continue
		}
		name := b.tag + " at line " + strconv.Itoa(b.line)
		kind := b.tag
		t.Run(name, func(t *testing.T) {
			switch b.tag {
			case "vector":
				m := b.fields(t)
				kind = m["profile"]
				switch kind {
				case "standard":
					checkStandardVector(t, m)
					sawReference = sawReference || m["secrets"] == refSecret && m["id"] == refID &&
						m["timestamp"] == "1614265330" && m["body"] == refBody && m["webhook-signature"] == refSignature
					sawRotation = sawRotation || len(strings.Fields(m["secrets"])) > 1
				case "legacy":
					checkLegacyVector(t, m)
					sawVVV = sawVVV || m["prefix"] == "VVV"
				case "hop":
					checkHopVector(t, m)
					_, coalescible := m["coalesce-key"]
					sawHopCoalesce = sawHopCoalesce || coalescible && len(strings.Fields(m["secrets"])) > 1
					sawHopPlain = sawHopPlain || !coalescible
				default:
					t.Fatalf("unknown profile %q", kind)
				}
			case "kv-record":
				if _, err := wire.DecodeSubscriberRecord([]byte(strings.Join(b.lines, "\n"))); err != nil {
					t.Fatalf("record example does not decode: %v", err)
				}
			case "kv-bulk":
				checkBulkExample(t, strings.Join(b.lines, "\n"))
			case "retry-after":
				checkRetryAfterExample(t, b)
			}
		})
		count[kind]++
	}
	for kind, min := range map[string]int{"standard": 3, "legacy": 1, "hop": 2, "kv-record": 1, "kv-bulk": 1, "retry-after": 1} {
		if count[kind] < min {
			t.Errorf("the document has %d %s examples, want at least %d", count[kind], kind, min)
		}
	}
	for what, ok := range map[string]bool{"the Standard Webhooks reference vector": sawReference, "a rotation with two secrets": sawRotation,
		"a legacy example with prefix VVV": sawVVV, "a coalescible hop with two edge secrets": sawHopCoalesce, "a hop without coalesce key": sawHopPlain} {
		if !ok {
			t.Errorf("the document lacks %s", what)
		}
	}
}

func checkStandardVector(t *testing.T, m map[string]string) {
	vectorFields(t, m, []string{"profile", "secrets", "id", "timestamp", "body", wire.HeaderWebhookID, wire.HeaderWebhookTimestamp, wire.HeaderWebhookSignature}, nil)
	secs, ts, body := parseSecrets(t, m["secrets"]), parseInt(t, "timestamp", m["timestamp"]), []byte(m["body"])
	if m[wire.HeaderWebhookID] != m["id"] || m[wire.HeaderWebhookTimestamp] != m["timestamp"] {
		t.Fatalf("webhook-id/webhook-timestamp must repeat id and timestamp")
	}
	if got := signature.Sign(secs, m["id"], ts, body); got != m[wire.HeaderWebhookSignature] {
		t.Fatalf("Sign = %s, the document says %s", got, m[wire.HeaderWebhookSignature])
	}
	for i := range secs {
		if err := signature.Verify(secs[i:i+1], m["id"], m["timestamp"], m[wire.HeaderWebhookSignature], body, time.Unix(ts, 0), signature.DefaultTolerance); err != nil {
			t.Fatalf("secret %d alone does not verify the example: %v", i+1, err)
		}
	}
}

func checkLegacyVector(t *testing.T, m map[string]string) {
	if err := signature.ValidateLegacyPrefix(m["prefix"]); err != nil {
		t.Fatal(err)
	}
	tsHeader, sigHeader := signature.LegacyHeaders(m["prefix"])
	vectorFields(t, m, []string{"profile", "prefix", "secret", "timestamp", "body", tsHeader, sigHeader}, nil)
	secret, err := signature.ParseSecret(m["secret"])
	if err != nil {
		t.Fatal(err)
	}
	if m[tsHeader] != m["timestamp"] {
		t.Fatalf("%s must repeat the timestamp", tsHeader)
	}
	if got := signature.SignLegacy(secret, parseInt(t, "timestamp", m["timestamp"]), []byte(m["body"])); got != m[sigHeader] {
		t.Fatalf("SignLegacy = %s, the document says %s", got, m[sigHeader])
	}
}

func checkHopVector(t *testing.T, m map[string]string) {
	required := []string{"profile", "secrets", "delivery-id", "subscriber-id", "event-type", "attempt", "timestamp", "body", "canonical",
		wire.HeaderDeliveryID, wire.HeaderSubscriberID, wire.HeaderEventType, wire.HeaderAttempt, wire.HeaderHopTimestamp, wire.HeaderHopSignature}
	if _, ok := m["coalesce-key"]; ok {
		required = append(required, "coalesce-key", wire.HeaderCoalesceKey)
	}
	vectorFields(t, m, required, nil)
	secs, body := parseSecrets(t, m["secrets"]), []byte(m["body"])
	h := &signature.Hop{
		DeliveryID: m["delivery-id"], SubscriberID: m["subscriber-id"], EventType: m["event-type"], CoalesceKey: m["coalesce-key"],
		Attempt: int(parseInt(t, "attempt", m["attempt"])), Timestamp: parseInt(t, "timestamp", m["timestamp"]),
	}
	canonical, err := strconv.Unquote(m["canonical"])
	if err != nil {
		t.Fatalf("canonical: %v", err)
	}
	if got := string(h.Canonical()); got != canonical {
		t.Fatalf("canonical = %q, the document says %q", got, canonical)
	}
	set := exactHeaders{}
	signature.SetHopHeaders(set, secs, h, body)
	for name, v := range set {
		if m[name] != v {
			t.Fatalf("SetHopHeaders wrote %s: %s, the document says %q", name, v, m[name])
		}
	}
	docHeaders := exactHeaders{}
	for k, v := range m {
		if strings.HasPrefix(k, "Edgehook-") {
			docHeaders[k] = v
		}
	}
	if len(docHeaders) != len(set) {
		t.Fatalf("the document lists %d hop headers, SetHopHeaders writes %d", len(docHeaders), len(set))
	}
	parsed, sig, err := signature.ParseHopHeaders(docHeaders)
	if err != nil || *parsed != *h {
		t.Fatalf("ParseHopHeaders(document) = %+v, %v; want %+v", parsed, err, *h)
	}
	for i := range secs {
		if err := signature.VerifyHop(secs[i:i+1], parsed, sig, body, time.Unix(h.Timestamp, 0), signature.DefaultTolerance); err != nil {
			t.Fatalf("edge secret %d alone does not verify the example: %v", i+1, err)
		}
	}
}

func checkBulkExample(t *testing.T, file string) {
	entries, err := wire.DecodeBulk([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("the bulk example is empty")
	}
	for i, e := range entries {
		id, ok := wire.SubscriberIDFromKey(e.Key)
		if !ok || wire.ValidateID(id) != nil {
			t.Fatalf("[%d].key %q is not a subscriber key", i, e.Key)
		}
		if _, err := wire.DecodeSubscriberRecord([]byte(e.Value)); err != nil {
			t.Fatalf("[%d].value: %v", i, err)
		}
	}
}

func checkRetryAfterExample(t *testing.T, b docBlock) {
	nowText, ok := strings.CutPrefix(b.lines[0], "now: ")
	if !ok {
		t.Fatalf("the first line must be \"now: <HTTP-date>\", not %q", b.lines[0])
	}
	now, err := time.Parse("Mon, 02 Jan 2006 15:04:05 GMT", nowText)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range b.lines[1:] {
		quoted, err := strconv.QuotedPrefix(line)
		if err != nil {
			t.Fatalf("line %d: %q does not start with a quoted value", b.line+1+i, line)
		}
		value, _ := strconv.Unquote(quoted)
		want, ok := strings.CutPrefix(line[len(quoted):], ": ")
		if !ok {
			t.Fatalf("line %d: no \": \" after the value", b.line+1+i)
		}
		got, err := wire.ParseRetryAfter(value, now)
		if reason, ignored := strings.CutPrefix(want, "ignored "); ignored {
			if !errors.Is(err, wire.ErrRetryAfter) || !strings.Contains(err.Error(), reason) {
				t.Errorf("ParseRetryAfter(%q) = %s, %v; the document says ignored (%s)", value, got, err, reason)
			}
			continue
		}
		d, perr := time.ParseDuration(want)
		if perr != nil {
			t.Fatalf("line %d: %q is neither a duration nor \"ignored <reason>\"", b.line+1+i, want)
		}
		if err != nil || got != d {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; the document says %s", value, got, err, d)
		}
	}
}
