package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type settings struct {
	listen string
	limit  ByteSize
	every  time.Duration
	tokens []string
	typ    string
}

func newFlags(s *settings) *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.StringVar(&s.listen, "listen", "127.0.0.1:8080", "")
	s.limit = 256 << 10
	fs.Var(&s.limit, "body-limit", "")
	fs.DurationVar(&s.every, "every", time.Second, "")
	fs.StringSliceVar(&s.tokens, "token", nil, "")
	fs.StringVar(&s.typ, "type", "", "")
	Mark(fs, "listen", "body-limit", "every", "token")
	return fs
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func known(k string) bool {
	switch k {
	case "listen", "body_limit", "every", "token":
		return true
	}
	return false
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	var s settings
	fs := newFlags(&s)
	if err := fs.Parse([]string{"--listen", "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	file, err := ParseFile([]byte(`{"listen":"127.0.0.1:3","body_limit":"1MiB","every":"5s","token":["a","b"]}`), known)
	if err != nil {
		t.Fatal(err)
	}
	e := env(map[string]string{"EDGEHOOK_LISTEN": "127.0.0.1:2", "EDGEHOOK_EVERY": "2s", "EDGEHOOK_TYPE": "x"})
	if err := Apply(fs, e, file, "f.json"); err != nil {
		t.Fatal(err)
	}
	if s.listen != "127.0.0.1:1" {
		t.Errorf("listen = %q, the flag must win", s.listen)
	}
	if s.every != 2*time.Second {
		t.Errorf("every = %s, the environment must beat the file", s.every)
	}
	if s.limit != 1<<20 || strings.Join(s.tokens, "|") != "a|b" {
		t.Errorf("limit = %d tokens = %q, want the file's values", s.limit, s.tokens)
	}
	if s.typ != "" {
		t.Errorf("type = %q: a flag not marked as a setting must ignore the environment", s.typ)
	}
}

func TestDefaultsKept(t *testing.T) {
	t.Parallel()
	var s settings
	fs := newFlags(&s)
	if err := Apply(fs, env(nil), nil, ""); err != nil {
		t.Fatal(err)
	}
	if s.listen != "127.0.0.1:8080" || s.limit != 256<<10 || s.every != time.Second {
		t.Errorf("defaults changed: %+v", s)
	}
}

func TestBadValuesNameTheSource(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  map[string]string
		file File
		want string
	}{
		{map[string]string{"EDGEHOOK_EVERY": "soon"}, nil, "EDGEHOOK_EVERY (--every)"},
		{nil, File{"body_limit": {Text: "lots"}}, `"body_limit" (--body-limit)`},
		{nil, File{"listen": {Text: "a,b", List: true}}, `"listen" (--listen) takes one value, not an array`},
	}
	for _, c := range cases {
		var s settings
		err := Apply(newFlags(&s), env(c.env), c.file, "f.json")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want it to name %s", err, c.want)
		}
	}
}

func TestParseFileRejects(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		`{"nope":1}`:                  `"nope": unknown setting`,
		`{"listen":{"a":1}}`:          `"listen": must be`,
		`{"token":["a,b"]}`:           `"token": [0]`,
		`{"listen":"x"} {}`:           "unexpected data",
		`[1]`:                         "not a JSON object",
		`null`:                        "not a JSON object",
		`{"listen":"x",}`:             "not a JSON object",
		`{"listen":"x","listen":"y"}`: `"listen": given twice`,
		`{"body-limit":"1MiB"}`:       `"body-limit": unknown setting (keys are spelt with underscores: "body_limit")`,
		`{"listen":"x"} x`:            "unexpected data",
		`{"listen" "x"}`:              "not a JSON object",
		`{1:"x"}`:                     "not a JSON object",
		`"x"`:                         "not a JSON object",
		``:                            "not a JSON object",
		strings.Repeat(" ", 2<<20):    "maximum",
	}
	for in, want := range cases {
		_, err := ParseFile([]byte(in), known)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFile(%.40q) err = %v, want %q", in, err, want)
		}
	}
}

func TestReadFileNamesThePath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "edgehook.json")
	if err := os.WriteFile(path, []byte(`{"every": 3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path, known)
	if err != nil || f["every"].Text != "3" {
		t.Fatalf("ReadFile = %v, %v", f, err)
	}
	var s settings
	if err := Apply(newFlags(&s), env(nil), f, path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a bare number is not a duration; err = %v, want the path named", err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing.json"), known); err == nil {
		t.Error("a missing file must be an error")
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	good := map[string]int64{"0": 0, "1024": 1024, "256KiB": 256 << 10, "256KB": 256000, "4 MiB": 4 << 20, "1GB": 1e9, "10B": 10}
	for in, want := range good {
		var b ByteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1TB", "KiB", "1.5MiB", "99999999999GiB"} {
		var b ByteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) accepted %d", in, b)
		}
	}
	if s := ByteSize(256 << 10).String(); s != "256KiB" {
		t.Errorf("String = %q", s)
	}
	if s := ByteSize(1000).String(); s != "1000" {
		t.Errorf("String = %q", s)
	}
}

func TestUnknownEnv(t *testing.T) {
	t.Parallel()
	environ := []string{"PATH=/bin", "EDGEHOOK_LISTEN=127.0.0.1:1", "EDGEHOOK_CONFIG=f.json", "EDGEHOOK_TOKENS=x",
		"EDGEHOOK_listen=y", "EDGEHOOK_BODY_LIMIT=1MiB", "EDGEHOOK_TYPE=z", "EDGEHOOK_=", "EDGEHOOK_BODY-LIMIT=2"}
	got := strings.Join(UnknownEnv(environ, known), " ")
	if want := "EDGEHOOK_TOKENS EDGEHOOK_listen EDGEHOOK_TYPE EDGEHOOK_ EDGEHOOK_BODY-LIMIT"; got != want {
		t.Errorf("UnknownEnv = %s, want %s", got, want)
	}
}

// TestSecretValuesNotShown: a secret setting's bad value is reported without the value.
func TestSecretValuesNotShown(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		file File
	}{
		{map[string]string{"EDGEHOOK_TOKEN": `s3cr"et`}, nil},
		{nil, File{"token": {Text: `s3cr"et`}}},
	} {
		var s settings
		fs := newFlags(&s)
		MarkSecret(fs, "token")
		err := Apply(fs, env(c.env), c.file, "f.json")
		if err == nil || strings.Contains(err.Error(), "s3cr") || !strings.Contains(err.Error(), "--token") {
			t.Errorf("err = %v; want it to name --token and not show the value", err)
		}
	}
}
