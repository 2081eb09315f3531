package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/prometheus/client_golang/prometheus"
)

// docAPI is the address the documents' curl commands use.
const docAPI = "http://127.0.0.1:8080"

// TestDocCurlCommands sends every curl command of the README's and deploy.md's shell blocks, and
// the one `edgehook dev` prints, to a real API on a fresh database, as curl would send it, and
// wants a success: an operator's first try must not be a 415.
func TestDocCurlCommands(t *testing.T) {
	t.Parallel()
	st, err := store.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "edgehook.db")})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Store: st, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	commands := append(docCurls(t, "../../../README.md"), docCurls(t, "../../../docs/deploy.md")...)
	if len(commands) < 4 {
		t.Fatalf("found only %d curl commands in the documents: %q", len(commands), commands)
	}
	commands = append(commands, emitCurl(docAPI))
	for _, cmd := range commands {
		req := curlRequest(t, cmd, hs.URL)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Errorf("%s\nanswered %d %s", cmd, resp.StatusCode, body)
		}
	}
}

// docCurls returns the curl commands in the fenced code blocks of a document, with continued
// lines joined.
func docCurls(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inBlock, cur := false, ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock || (cur == "" && !strings.HasPrefix(line, "curl ")) {
			continue
		}
		cur += line
		if c, ok := strings.CutSuffix(cur, `\`); ok {
			cur = c
			continue
		}
		out = append(out, cur)
		cur = ""
	}
	return out
}

// curlRequest builds the request curl would send for cmd (the options the documents use), with
// the documents' address replaced by base.
func curlRequest(t *testing.T, cmd, base string) *http.Request {
	t.Helper()
	words := shellWords(cmd)
	method, url, header := "", "", http.Header{}
	var body *string
	for i := 1; i < len(words); i++ {
		arg := func() string {
			if i++; i >= len(words) {
				t.Fatalf("%s: %s lacks its value", cmd, words[i-1])
			}
			return words[i]
		}
		switch w := words[i]; {
		case w == "-X":
			method = arg()
		case w == "-H":
			k, v, _ := strings.Cut(arg(), ":")
			header.Set(k, strings.TrimSpace(v))
		case w == "-d":
			d := arg()
			body = &d
		case w == "-s" || w == "-fsS":
		case strings.HasPrefix(w, docAPI+"/"):
			url = base + strings.TrimPrefix(w, docAPI)
		default:
			t.Fatalf("%s: %q is not an option this test knows; teach it", cmd, w)
		}
	}
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(*body)
		if method == "" {
			method = http.MethodPost
		}
		if header.Get("Content-Type") == "" {
			header.Set("Content-Type", "application/x-www-form-urlencoded") // curl's default for -d
		}
	}
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil || url == "" {
		t.Fatalf("%s: no request (%v)", cmd, err)
	}
	req.Header = header
	return req
}

// shellWords splits a command line as sh would for the quoting the documents use, up to a
// comment or a pipe.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	inWord, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				w.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		case (c == '#' || c == '|') && !inWord:
			return words
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// TestReliabilityNamesExistingTests: every test or fuzz target RELIABILITY.md names is declared
// in a test file, so its table and reproduce commands do not drift from the suite (a row named
// TestZeroRateIsTheDefault after the test had become TestZeroRateIsTheDefaultOrRefused).
func TestReliabilityNamesExistingTests(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "RELIABILITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`").FindAllSubmatch(doc, -1) {
		names[string(m[1])] = false
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "build"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, "_test.go"):
			return nil
		}
		data, err := os.ReadFile(path)
		for n := range names {
			names[n] = names[n] || strings.Contains(string(data), "func "+n+"(")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for n, found := range names {
		if !found {
			t.Errorf("RELIABILITY.md names %s, but no test file declares func %s", n, n)
		}
	}
}
