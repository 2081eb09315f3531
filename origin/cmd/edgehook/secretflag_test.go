package main_test

import (
	"strings"
	"testing"
)

// TestSecretFlagNotInErrors: a bad secret given on the command line is refused without quoting it,
// as one from the environment or the config file is (TestSecretNotInErrors): stderr reaches the
// journal of a service started with --token.
func TestSecretFlagNotInErrors(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	r := c.run("serve", "--listen", "127.0.0.1:0", "--token", `fl"ag-s3cret`)
	if r.code != 2 || !strings.Contains(r.stderr, "--token") || strings.Contains(r.stderr, "s3cret") {
		t.Errorf("exit %d, stderr %q; want exit 2 naming --token without its value", r.code, r.stderr)
	}
}
