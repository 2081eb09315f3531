package api_test

import (
	"bufio"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// openAPIRoutes reads "METHOD PATH" pairs from docs/openapi.yaml. The document keeps the usual
// layout (paths at two spaces, methods at four), which this reader relies on instead of a YAML
// library; a path with no method fails the test so a layout change cannot pass silently.
func openAPIRoutes(t *testing.T) (routes []string, refs, schemas map[string]bool) {
	t.Helper()
	f, err := os.Open("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pathRe := regexp.MustCompile(`^  (/\S*):\s*$`)
	methodRe := regexp.MustCompile(`^    (get|put|post|patch|delete|head|options):\s*$`)
	schemaRe := regexp.MustCompile(`^    ([A-Za-z]+):\s*$`)
	refRe := regexp.MustCompile(`\$ref: '#/components/schemas/([A-Za-z]+)'`)
	refs, schemas = map[string]bool{}, map[string]bool{}
	section, path, methods := "", "", 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, " ") && strings.HasSuffix(line, ":") {
			section = strings.TrimSuffix(line, ":")
		}
		if line == "  schemas:" {
			section = "schemas"
			continue
		}
		for _, m := range refRe.FindAllStringSubmatch(line, -1) {
			refs[m[1]] = true
		}
		switch section {
		case "paths":
			if m := pathRe.FindStringSubmatch(line); m != nil {
				if path != "" && methods == 0 {
					t.Fatalf("openapi.yaml: path %s has no method", path)
				}
				path, methods = m[1], 0
			} else if m := methodRe.FindStringSubmatch(line); m != nil {
				routes = append(routes, strings.ToUpper(m[1])+" "+path)
				methods++
			}
		case "schemas":
			if m := schemaRe.FindStringSubmatch(line); m != nil {
				schemas[m[1]] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return routes, refs, schemas
}

// TestOpenAPIMatchesRouter fails when the router has a route the document lacks, or the other
// way round.
func TestOpenAPIMatchesRouter(t *testing.T) {
	t.Parallel()
	documented, refs, schemas := openAPIRoutes(t)
	e := newEnv(t)
	var served []string
	for _, r := range e.srv.Routes() {
		served = append(served, r.Method+" "+r.Path)
	}
	sort.Strings(documented)
	sort.Strings(served)
	if len(served) < 10 {
		t.Fatalf("the router lists only %v", served)
	}
	if strings.Join(documented, "\n") != strings.Join(served, "\n") {
		t.Errorf("docs/openapi.yaml and the router differ\nonly documented: %v\nonly served: %v",
			missing(documented, served), missing(served, documented))
	}
	for name := range refs {
		if !schemas[name] {
			t.Errorf("openapi.yaml refers to the undefined schema %s", name)
		}
	}
}

// missing returns the elements of a not in b.
func missing(a, b []string) []string {
	in := map[string]bool{}
	for _, s := range b {
		in[s] = true
	}
	var out []string
	for _, s := range a {
		if !in[s] {
			out = append(out, s)
		}
	}
	return out
}
