package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// ReportDirEnv names the directory where each runner writes <runtime>.json for the cross-runtime
// check (edge/harness/internal/conformancecheck). make sets it; a plain `go test` writes nothing.
const ReportDirEnv = "EDGEHOOK_CONFORMANCE_DIR"

// Result values of a Report.
const (
	ResultPass = "pass"
	ResultFail = "fail"
)

// Report is what a runner writes: the result of every scenario it ran.
type Report struct {
	Runtime string            `json:"runtime"`
	Results map[string]string `json:"results"`
}

// WriteReport writes the report of runtime to the directory named by ReportDirEnv, if it is set.
func WriteReport(runtime string, results map[string]string) error {
	dir := os.Getenv(ReportDirEnv)
	if dir == "" {
		return nil
	}
	data, err := json.MarshalIndent(Report{Runtime: runtime, Results: results}, "", "  ")
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, runtime+".json"), append(data, '\n'), 0o644)
	}
	if err != nil {
		return fmt.Errorf("conformance report for %s: %w", runtime, err)
	}
	return nil
}
