package main_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/edgehook/edgehook/origin/api"
)

// TestExcerptSafeInTerminal: a subscriber's answer is shown in the attempt log, so `deliveries
// show` prints text a stranger chose. Escapes, DEL and the C1 controls a terminal acts on (U+009B
// starts a control sequence, U+009D an operating-system command such as OSC 52, which sets the
// clipboard) must come out escaped, never raw.
func TestExcerptSafeInTerminal(t *testing.T) {
	t.Parallel()
	const hostile = "\x1b[2J\x7f\u009b2J\u009d52;c;aGk=\u009c"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(hostile))
	}))
	t.Cleanup(srv.Close)
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "s", "--url", srv.URL+"/hook", "--events", "*")
	c.ok("emit", "--id", "evt_1", "--type", "t", "--data", "{}")
	if r := c.run("drain", "--until-idle", "--for", "30s", "--max-attempts", "1", "--allow-network", "127.0.0.0/8"); r.code != 0 {
		t.Fatalf("drain: %+v", r)
	}
	var page api.DeliveryPage
	c.okJSON(&page, "deliveries", "list", "--json")
	if len(page.Deliveries) != 1 {
		t.Fatalf("deliveries = %+v", page)
	}
	var d api.Delivery
	out := c.ok("deliveries", "show", page.Deliveries[0].ID)
	c.okJSON(&d, "deliveries", "show", page.Deliveries[0].ID)
	if len(d.AttemptLog) != 1 || d.AttemptLog[0].Excerpt != hostile {
		t.Fatalf("attempt log = %+v, want the answer's excerpt", d.AttemptLog)
	}
	if raw := rawControl.FindString(out); raw != "" {
		t.Errorf("deliveries show printed control %q raw:\n%s", raw, strings.ToValidUTF8(out, "?"))
	}
}

// rawControl matches a control character a terminal acts on, but the tab and newline of a layout.
var rawControl = regexp.MustCompile("[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f]")

// TestTablesSafeInTerminal: the URL check lets C1 controls through (url.Parse refuses only ASCII
// ones), in UTF-8 or as a lone byte, so `subscribers list` prints a string an operator or an API
// client chose. Its table must show them escaped, as the JSON output does, never raw.
func TestTablesSafeInTerminal(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "s", "--url", "https://x.example/\u009b2J\u009d52;c;aGk=\u009c/\x9b31m", "--events", "*")
	out := c.ok("subscribers", "list")
	want := `https://x.example/\u009b2J\u009d52;c;aGk=\u009c/\x9b31m`
	if rawControl.MatchString(out) || !utf8.ValidString(out) || !strings.Contains(out, want) {
		t.Errorf("subscribers list printed %+q; want no control raw, and the URL as %s", out, want)
	}
}
