package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/edge/conformance"
)

func TestCheck(t *testing.T) {
	suite, err := conformance.Load()
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{}
	for _, sc := range suite.Scenarios {
		all[sc.Name] = "pass"
	}
	first := suite.Scenarios[0].Name
	lacking, failing, stale := clone(all), clone(all), clone(all)
	delete(lacking, first)
	failing[first] = "fail"
	stale["no_such_scenario"] = "pass"

	dir := t.TempDir()
	for rt, results := range map[string]map[string]string{"good": all, "lacking": lacking, "failing": failing, "stale": stale} {
		data, _ := json.Marshal(conformance.Report{Runtime: rt, Results: results})
		if err := os.WriteFile(filepath.Join(dir, rt+".json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		runtime, wants string
	}{
		{"good", ""},
		{"lacking", "lacking lacks scenario " + first},
		{"failing", "failing failed scenario " + first},
		{"stale", "no_such_scenario, which is not in the scenario file"},
		{"absent", "absent: no report"},
	} {
		problems, err := check(dir, []string{tc.runtime})
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(problems, "\n")
		if tc.wants == "" && got != "" || !strings.Contains(got, tc.wants) {
			t.Errorf("%s: problems %q, want %q", tc.runtime, got, tc.wants)
		}
	}
}

func clone(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
