package main

import (
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/origin/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// settingsTable renders the README's configuration reference from the command tree, so the
// document cannot drift from the flags.
func settingsTable() string {
	type row struct {
		f        *pflag.Flag
		commands []string
	}
	rows := map[string]*row{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		visit := func(f *pflag.Flag) {
			if !config.IsSetting(f) {
				return
			}
			r := rows[f.Name]
			if r == nil {
				r = &row{f: f}
				rows[f.Name] = r
			}
			name := strings.TrimPrefix(c.CommandPath(), "edgehook ")
			if c == rootCmd {
				name = "all"
			}
			r.commands = append(r.commands, name)
		}
		c.LocalNonPersistentFlags().VisitAll(visit)
		c.PersistentFlags().VisitAll(visit)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd)
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	// Global settings first, then by name.
	sort.Slice(names, func(i, j int) bool {
		gi, gj := rows[names[i]].commands[0] == "all", rows[names[j]].commands[0] == "all"
		if gi != gj {
			return gi
		}
		return names[i] < names[j]
	})
	var b strings.Builder
	b.WriteString("| Flag | Environment | Config file key | Default | Commands | Meaning |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, n := range names {
		r := rows[n]
		def := r.f.DefValue
		if def == "" || def == "[]" {
			def = "(none)"
		}
		b.WriteString("| `--" + n + "` | `" + config.EnvName(n) + "` | `" + config.FileKey(n) + "` | `" + def + "` | " +
			strings.Join(r.commands, ", ") + " | " + strings.ReplaceAll(r.f.Usage, "|", `\|`) + " |\n")
	}
	return b.String()
}

// TestREADMESettings fails when the README's configuration table differs from the flags.
func TestREADMESettings(t *testing.T) {
	data, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
	_, rest, ok1 := strings.Cut(string(data), begin)
	table, _, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("README.md lacks the %q … %q markers around the configuration table", begin, end)
	}
	if want := settingsTable(); table != want {
		t.Errorf("README.md configuration table is out of date; replace it with:\n%s", want)
	}
}
