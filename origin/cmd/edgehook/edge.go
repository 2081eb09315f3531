package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
	"github.com/spf13/cobra"
)

// edgeCmd groups the edge commands. Other files (the local edge harness) add theirs to it.
var edgeCmd = &cobra.Command{Use: "edge", Short: "The edge relay: export its KV records, run it locally", Args: cobra.ArbitraryArgs, RunE: runGroup}

func init() {
	var out string
	var all bool
	exportCmd := &cobra.Command{
		Use:   "export-kv [--out FILE]",
		Short: "Write the subscribers' edge records as the JSON file `wrangler kv bulk put` reads",
		Long: `Writes one "sub:<id>" entry per subscriber in edge mode (every subscriber with --all): its URL,
timeout, extra headers, coalescing rule and whether it is active. The records carry no secrets.
Load them with:

  npx wrangler kv bulk put subscribers.json --binding SUBSCRIBERS --remote`,
		Example: `  edgehook edge export-kv --out subscribers.json`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				data, err := exportKV(ctx, st, all)
				if err != nil {
					return err
				}
				if out == "" || out == "-" {
					_, err = cmd.OutOrStdout().Write(append(data, '\n'))
					return err
				}
				if err := writeFileAtomic(out, append(data, '\n')); err != nil {
					return fmt.Errorf("--out: %w", err)
				}
				return nil
			})
		},
	}
	exportCmd.Flags().StringVar(&out, "out", "", `output file ("-" or empty: standard output)`)
	exportCmd.Flags().BoolVar(&all, "all", false, "include subscribers in direct mode")
	edgeCmd.AddCommand(exportCmd)
	rootCmd.AddCommand(edgeCmd)
}

// exportKV renders the KV bulk file for the subscribers the edge serves.
func exportKV(ctx context.Context, st *store.Store, all bool) ([]byte, error) {
	subs, err := st.ListSubscribers(ctx)
	if err != nil {
		return nil, err
	}
	entries := []wire.BulkEntry{}
	for _, s := range subs {
		if !all && s.Mode != store.ModeEdge {
			continue
		}
		e, err := wire.SubscriberEntry(s.ID, s.Record())
		if err != nil {
			return nil, fmt.Errorf("subscriber %s: %w", s.ID, err)
		}
		entries = append(entries, e)
	}
	return wire.EncodeBulk(entries)
}

// writeFileAtomic writes through a temporary file and a rename, so a reader (or a failed run)
// never sees half a file. A symbolic link at path is written through: renamed over, the link
// became a plain file, and the file it named kept the old records.
func writeFileAtomic(path string, data []byte) error {
	path, err := linkTarget(path)
	if err != nil {
		return err
	}
	// In the target's directory: a rename does not cross file systems.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".edgehook-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// A file replaced keeps its permissions (the operator's choice, e.g. readable by wrangler's
	// user); a new one is the temporary file's 0600, as a record's headers may carry credentials.
	if fi, err := os.Stat(path); err == nil {
		if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
			tmp.Close()
			return err
		}
	}
	// Synced before the rename: after a power loss the name could otherwise point at a file whose
	// data never reached the disk (an empty KV file).
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// linkTarget returns the file path names once symbolic links are followed, also when the last
// link names a file not there yet (created through it, as a shell's > does).
func linkTarget(path string) (string, error) {
	target, err := filepath.EvalSymlinks(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return target, err // found, or a loop of links
	}
	link, err := os.Readlink(path)
	if err != nil {
		return path, nil // nothing there: created as named
	}
	if !filepath.IsAbs(link) {
		// Relative to the link's directory as the system resolves it: joined lexically, a ".."
		// would undo a linked directory of path.
		dir, err := filepath.EvalSymlinks(filepath.Dir(path))
		if err != nil {
			return "", err
		}
		link = filepath.Join(dir, link)
	}
	return linkTarget(link)
}
