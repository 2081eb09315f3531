// Command conformancecheck fails unless every runtime ran every relay conformance scenario and
// passed it. Each runner writes DIR/<runtime>.json:
//
//	{"runtime": "wasi", "results": {"<scenario name>": "pass" | "fail", ...}}
//
// Usage: conformancecheck DIR RUNTIME...   (e.g. build/conformance native wasi workerd)
//
// A missing report, a scenario missing from a report (a runtime that lacks it), a failure, or a
// name the scenario file does not have (a stale report) is an error.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgehook/edgehook/edge/conformance"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: conformancecheck DIR RUNTIME...")
		os.Exit(2)
	}
	problems, err := check(os.Args[1], os.Args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformancecheck:", err)
		os.Exit(1)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "conformancecheck:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Printf("conformancecheck: %d runtimes ran and passed every scenario\n", len(os.Args[2:]))
}

// check returns every way the reports in dir fall short of the scenario file.
func check(dir string, runtimes []string) ([]string, error) {
	suite, err := conformance.Load()
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, rt := range runtimes {
		data, err := os.ReadFile(filepath.Join(dir, rt+".json"))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: no report: %v", rt, err))
			continue
		}
		var r conformance.Report
		if err := json.Unmarshal(data, &r); err != nil {
			problems = append(problems, fmt.Sprintf("%s: report: %v", rt, err))
			continue
		}
		known := map[string]bool{}
		for _, sc := range suite.Scenarios {
			known[sc.Name] = true
			switch r.Results[sc.Name] {
			case conformance.ResultPass:
			case "":
				problems = append(problems, fmt.Sprintf("%s lacks scenario %s", rt, sc.Name))
			default:
				problems = append(problems, fmt.Sprintf("%s failed scenario %s", rt, sc.Name))
			}
		}
		for name := range r.Results {
			if !known[name] {
				problems = append(problems, fmt.Sprintf("%s reports %s, which is not in the scenario file", rt, name))
			}
		}
	}
	return problems, nil
}
