// Package config resolves the settings of an edgehook command from three sources in order of
// precedence: command-line flags, then EDGEHOOK_* environment variables, then an optional JSON config
// file; a setting given nowhere keeps its flag's default.
//
// Every setting is a pflag flag, so the three sources share one parser and one set of defaults: a
// value from the environment or the file is fed to the flag's own Set method, and a bad value is
// reported with the flag, the variable or the file key that carried it.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// EnvPrefix starts the name of every environment variable edgehook reads.
const EnvPrefix = "EDGEHOOK_"

// ConfigEnv names the config file when --config is not given.
const ConfigEnv = EnvPrefix + "CONFIG"

// annotation marks a flag as a setting that the environment and the config file may provide.
// Command arguments such as `emit --type` are not settings and keep this mark off.
const annotation = "edgehook.setting"

// secretAnnotation marks a setting whose value is a secret: an error never quotes it.
const secretAnnotation = "edgehook.secret"

// sourceAnnotation records where Apply found a setting's value: the variable, or the file and key.
const sourceAnnotation = "edgehook.source"

// MaxFileBytes bounds a config file; anything larger is a mistake (a wrong path).
const MaxFileBytes = 1 << 20

// Mark declares the named flags of fs as settings. It panics on an unknown name: that is a
// programming error caught by any run of the command.
func Mark(fs *pflag.FlagSet, names ...string) {
	for _, name := range names {
		if err := fs.SetAnnotation(name, annotation, []string{"true"}); err != nil {
			panic(err)
		}
	}
}

// MarkSecret declares the named settings of fs secrets (tokens, keys): a bad value read from the
// environment or the config file is reported without the value, which would otherwise reach the
// log (a token with a quote in it fails to parse as a list); the command line's flag errors are
// the caller's to reword (IsSecret). It panics on an unknown name.
func MarkSecret(fs *pflag.FlagSet, names ...string) {
	for _, name := range names {
		if err := fs.SetAnnotation(name, secretAnnotation, []string{"true"}); err != nil {
			panic(err)
		}
	}
}

// IsSecret reports whether f was declared a secret with MarkSecret.
func IsSecret(f *pflag.Flag) bool {
	_, ok := f.Annotations[secretAnnotation]
	return ok
}

// IsSetting reports whether f was declared a setting with Mark.
func IsSetting(f *pflag.Flag) bool {
	_, ok := f.Annotations[annotation]
	return ok
}

// EnvName returns the environment variable of a setting: "body-limit" → "EDGEHOOK_BODY_LIMIT".
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// UnknownEnv returns the EDGEHOOK_* variables of environ ("NAME=value" entries) that are not
// ConfigEnv and name no setting (known reports whether a config file key is one). A misspelt
// variable would otherwise be ignored without a word: EDGEHOOK_TOKENS for EDGEHOOK_TOKEN leaves
// the API without authentication.
func UnknownEnv(environ []string, known func(key string) bool) []string {
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		key, ok := strings.CutPrefix(name, EnvPrefix)
		if key = strings.ToLower(key); ok && name != ConfigEnv && (EnvName(key) != name || !known(key)) {
			unknown = append(unknown, name)
		}
	}
	return unknown
}

// FileKey returns the config file key of a setting: "body-limit" → "body_limit".
func FileKey(flag string) string { return strings.ReplaceAll(flag, "-", "_") }

// File is a parsed config file: setting keys (FileKey form) to values.
type File map[string]Value

// Value is one setting of a config file in flag syntax, and whether the file gave it as an array
// (joined with commas, as a list flag reads them), which only a list setting takes.
type Value struct {
	Text string
	List bool
}

// ParseFile strictly parses a config file: one JSON object whose keys are known settings (known
// reports that) and whose values are strings, numbers, booleans or arrays of strings (joined with
// commas, as a list flag reads them). Unknown or repeated keys, other value types and trailing
// data are errors that name the key.
func ParseFile(data []byte, known func(key string) bool) (File, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("is %d bytes, the maximum is %d", len(data), MaxFileBytes)
	}
	raw, err := objectMembers(data)
	if err != nil {
		return nil, err
	}
	f := make(File, len(raw))
	for _, key := range sortedKeys(raw) {
		if !known(key) {
			if dashed := strings.ReplaceAll(key, "-", "_"); dashed != key && known(dashed) {
				return nil, fmt.Errorf("%q: unknown setting (keys are spelt with underscores: %q)", key, dashed)
			}
			return nil, fmt.Errorf("%q: unknown setting", key)
		}
		v, err := fileValue(raw[key])
		if err != nil {
			return nil, fmt.Errorf("%q: %w", key, err)
		}
		f[key] = v
	}
	return f, nil
}

// objectMembers reads data as one JSON object and returns its members. A key given twice is an
// error: a decoder would silently keep the last, so of two "db" keys one would be ignored.
func objectMembers(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	} else if tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: starts with %s", tokenKind(tok))
	}
	raw := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		key := tok.(string) // Token returns an object's keys as strings, or an error
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		if _, dup := raw[key]; dup {
			return nil, fmt.Errorf("%q: given twice", key)
		}
		raw[key] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON object")
	}
	return raw, nil
}

// tokenKind names what a JSON document starts with, never quoting it: a file given by mistake may
// hold anything, a secret or control bytes included.
func tokenKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return "an array"
	case string:
		return "a string"
	case bool:
		return fmt.Sprint(t)
	case nil:
		return "null"
	default:
		return "a number"
	}
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// fileValue renders one JSON value in flag syntax.
func fileValue(raw json.RawMessage) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return Value{}, err
	}
	switch v := v.(type) {
	case string:
		return Value{Text: v}, nil
	case json.Number:
		return Value{Text: v.String()}, nil
	case bool:
		return Value{Text: strconv.FormatBool(v)}, nil
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok || strings.Contains(s, ",") {
				return Value{}, fmt.Errorf("[%d] must be a string without commas", i)
			}
			parts[i] = s
		}
		return Value{Text: strings.Join(parts, ","), List: true}, nil
	}
	return Value{}, errors.New("must be a string, a number, a boolean or an array of strings")
}

// ReadFile reads and parses the config file at path (see ParseFile). Errors name the file.
func ReadFile(path string, known func(key string) bool) (File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	f, err := ParseFile(data, known)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return f, nil
}

// Apply sets every setting of fs that the command line left alone from the environment (looked up
// with lookup, normally os.LookupEnv) or else from file (which may be nil). The error names the
// variable or the file key and the flag it feeds. Source tells afterwards where a value came from.
func Apply(fs *pflag.FlagSet, lookup func(string) (string, bool), file File, fileName string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || !IsSetting(f) {
			return
		}
		if v, ok := lookup(EnvName(f.Name)); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("invalid value %s for %s (--%s): %v", shown(f, v), EnvName(f.Name), f.Name, e)
			}
			err = errors.Join(err, fs.SetAnnotation(f.Name, sourceAnnotation, []string{EnvName(f.Name)}))
			return
		}
		if v, ok := file[FileKey(f.Name)]; ok {
			if _, list := f.Value.(pflag.SliceValue); v.List && !list {
				err = fmt.Errorf("config file %s: %q (--%s) takes one value, not an array", fileName, FileKey(f.Name), f.Name)
			} else if e := f.Value.Set(v.Text); e != nil {
				err = fmt.Errorf("config file %s: invalid value %s for %q (--%s): %v", fileName, shown(f, v.Text), FileKey(f.Name), f.Name, e)
			}
			err = errors.Join(err, fs.SetAnnotation(f.Name, sourceAnnotation, []string{fmt.Sprintf("config file %s, key %q", fileName, FileKey(f.Name))}))
		}
	})
	return err
}

// Source returns where Apply found the value of f: its environment variable, or the config file
// and key; "" if it did not set f (the command line or the default did).
func Source(f *pflag.Flag) string {
	if v := f.Annotations[sourceAnnotation]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// shown is v as an error quotes it, unless f is a secret.
func shown(f *pflag.Flag, v string) string {
	if IsSecret(f) {
		return "(a secret, not shown)"
	}
	return strconv.Quote(v)
}
