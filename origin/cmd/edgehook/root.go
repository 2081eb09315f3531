package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/config"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Defaults of the global settings.
const (
	DefaultDB        = "edgehook.db"
	DefaultLogFormat = "text"
	DefaultLogLevel  = "info"
)

// global holds the settings every command shares.
var global struct {
	configPath  string
	db          string
	synchronous string
	busyTimeout time.Duration
	bodyLimit   config.ByteSize
	backlogCap  int64
	queueCap    int64
	logFormat   string
	logLevel    string
}

// rootCmd is the edgehook command. Every command group adds itself in its own file's init, so other
// areas (the edge harness) can add subcommands without touching this file.
var rootCmd = &cobra.Command{
	Use:   "edgehook",
	Short: "Durable, rate-limited webhook fan-out: an SQLite queue, an HTTP API and a delivery engine",
	Long: `edgehook stores product events in an SQLite file and delivers them to subscribers, directly or
through the edge relay, with rate limits, retries and dead letters.

Settings come from flags, then EDGEHOOK_* environment variables (--body-limit is
EDGEHOOK_BODY_LIMIT), then the JSON config file named by --config (keys like "body_limit").
The data commands (emit, events, subscribers, deliveries, dead, stats, edge export-kv, migrate)
work directly on the database file, so they need no running server.`,
	SilenceUsage:  true,
	SilenceErrors: true,
}

func init() {
	rootCmd.PersistentPreRunE = loadSettings // set here: loadSettings walks rootCmd
	pf := rootCmd.PersistentFlags()
	pf.StringVar(&global.configPath, "config", "", "JSON config file (also EDGEHOOK_CONFIG)")
	pf.StringVar(&global.db, "db", DefaultDB, "SQLite database file (created if missing)")
	pf.StringVar(&global.synchronous, "synchronous", store.SyncNormal, "SQLite synchronous mode: NORMAL (durable across a process crash) or FULL (also across power loss)")
	pf.DurationVar(&global.busyTimeout, "busy-timeout", store.DefaultBusyTimeout, "how long a write waits for another process's lock")
	global.bodyLimit = store.DefaultMaxBodyBytes
	pf.Var(&global.bodyLimit, "body-limit", "largest event data, by emit or the API, whose request bodies may add "+
		config.ByteSize(api.EnvelopeAllowance).String()+" of JSON around it (1KiB to 100MiB)")
	pf.Int64Var(&global.backlogCap, "backlog-cap", store.DefaultBacklogCap, "pending deliveries per subscriber before the oldest are dead-lettered")
	pf.Int64Var(&global.queueCap, "queue-cap", store.DefaultGlobalCap, "pending and in-flight deliveries before emits, retries and replays are refused (HTTP 429)")
	pf.StringVar(&global.logFormat, "log-format", DefaultLogFormat, "log format: text or json")
	pf.StringVar(&global.logLevel, "log-level", DefaultLogLevel, "log level: debug, info, warn or error")
	config.Mark(pf, "db", "synchronous", "busy-timeout", "body-limit", "backlog-cap", "queue-cap", "log-format", "log-level")
	rootCmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{hideSecret(err)} })
	rootCmd.SetHelpCommand(helpCmd)
}

// hideSecret rewords pflag's error for a bad value of a secret flag, which quotes the value: stderr
// reaches the journal of a service started with --token, as it does with EDGEHOOK_TOKEN (whose
// errors config.Apply words without the value).
func hideSecret(err error) error {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) || !config.IsSecret(ive.GetFlag()) {
		return err
	}
	return fmt.Errorf("--%s: invalid value (a secret, not shown): %v", ive.GetFlag().Name, errors.Unwrap(ive))
}

// loadSettings fills the flags the command line left unset from the environment and the config
// file, then checks the global ones.
func loadSettings(cmd *cobra.Command, _ []string) error {
	if name := cmd.Name(); name == cobra.ShellCompRequestCmd || name == cobra.ShellCompNoDescRequestCmd {
		return nil // completing a command line reads no settings, and the shell hides this error
	}
	limitProcs(cmd)
	path := global.configPath
	if !cmd.Flags().Changed("config") {
		path = os.Getenv(config.ConfigEnv)
	}
	var file config.File
	if path != "" {
		var err error
		if file, err = config.ReadFile(path, knownSetting); err != nil {
			return usageError{err}
		}
	}
	if err := config.Apply(cmd.Flags(), os.LookupEnv, file, path); err != nil {
		return usageError{err}
	}
	log, err := newLogger(os.Stderr)
	if err != nil {
		return err
	}
	for _, name := range config.UnknownEnv(os.Environ(), knownSetting) {
		log.Warn("this environment variable is no edgehook setting; ignored (misspelt?)", "variable", name)
	}
	return checkGlobal()
}

// checkGlobal validates the global settings, naming the flag at fault.
func checkGlobal() error {
	switch {
	case global.db == "":
		return usagef("--db: must name a database file")
	case !strings.EqualFold(global.synchronous, store.SyncNormal) && !strings.EqualFold(global.synchronous, store.SyncFull):
		return usagef("--synchronous: %q is not NORMAL or FULL", global.synchronous)
	case global.busyTimeout < time.Millisecond: // SQLite counts it in whole milliseconds: less would not wait at all
		return usagef("--busy-timeout: %s is below 1ms", global.busyTimeout)
	case global.busyTimeout > store.MaxBusyTimeout:
		return usagef("--busy-timeout: %s is above %s, the most SQLite waits", global.busyTimeout, store.MaxBusyTimeout)
	case global.bodyLimit < 1024 || global.bodyLimit > store.MaxMaxBodyBytes:
		return usagef("--body-limit: %s is outside 1KiB to %s", global.bodyLimit, config.ByteSize(store.MaxMaxBodyBytes))
	case global.backlogCap < 1:
		return usagef("--backlog-cap: must be at least 1, not %d", global.backlogCap)
	case global.queueCap < 1:
		return usagef("--queue-cap: must be at least 1, not %d", global.queueCap)
	}
	return nil
}

// openStore opens the database the global settings name (creating and migrating it as needed).
func openStore(ctx context.Context) (*store.Store, error) {
	st, err := store.Open(ctx, store.Options{Path: global.db, Synchronous: global.synchronous, BusyTimeout: global.busyTimeout,
		MaxBodyBytes: int(global.bodyLimit), BacklogCap: global.backlogCap, GlobalCap: global.queueCap})
	if store.ResultCode(err) == store.CodeReadOnly { // a directory it may not write: no -wal, -shm
		return nil, notWritable(err)
	}
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", global.db, err)
	}
	return st, nil
}

// notWritable is the error for a database this process may not write (or whose directory it may
// not write, where SQLite makes the -wal and -shm files).
func notWritable(err error) error {
	return fmt.Errorf("open database %s: this process may not write it (file or directory permissions?): %w", global.db, err)
}

// openWritableStore opens the database for serve and drain, which must write it: a file this
// process may only read is an error at once, instead of a claim failure logged at every poll.
// A lock held by another process is not: it passes.
func openWritableStore(ctx context.Context) (*store.Store, error) {
	st, err := openStore(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Ping(ctx); store.ResultCode(err) == store.CodeReadOnly {
		st.Close()
		return nil, notWritable(err)
	}
	return st, nil
}

// withStore runs fn on the open database and closes it.
func withStore(cmd *cobra.Command, fn func(ctx context.Context, st *store.Store) error) error {
	ctx := cmd.Context()
	st, err := openStore(ctx)
	if err != nil {
		return err
	}
	return errors.Join(fn(ctx, st), st.Close())
}

// knownSetting reports whether key is a setting of any command, so one config file can serve them
// all while a misspelt key is still an error.
func knownSetting(key string) bool {
	found := false
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		visit := func(f *pflag.Flag) {
			if config.IsSetting(f) && config.FileKey(f.Name) == key {
				found = true
			}
		}
		c.LocalFlags().VisitAll(visit)
		c.PersistentFlags().VisitAll(visit)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd)
	return found
}

// newLogger builds the slog logger the global settings ask for, writing to w.
func newLogger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(global.logLevel)); err != nil {
		return nil, usagef("--log-level: %q is not one of debug, info, warn, error", global.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(global.logFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format: %q is not text or json", global.logFormat)
}

// startupErr is what serve and drain return for err, from a step of their start: nothing if the
// signal to stop (ctx's end) came first, as it would have a moment later, so SIGTERM while they
// wait for another process's lock (or migrate) exits 0 as documented, not 1 with "context
// canceled" (a failed systemd unit, a mail from cron).
func startupErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// runGroup runs a command group given without one of its commands: its help, or a usage error
// naming the word that is not one of them. Without it cobra printed the help and exited 0 for
// `edgehook subscribers lst`, which a script or cron job takes for success.
func runGroup(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return cmd.Help()
}

// initCompletionCmd adds cobra's completion command now, which Execute would add later, to give
// it what the other groups and help have: a word that names no shell is a usage error (cobra
// printed the help and exited 0), and, as it reads no settings, a bad one does not stop it.
func initCompletionCmd() {
	rootCmd.InitDefaultCompletionCmd()
	for _, c := range rootCmd.Commands() {
		if c.Name() == "completion" {
			c.Args, c.RunE = cobra.ArbitraryArgs, runGroup
			c.PersistentPreRunE = func(*cobra.Command, []string) error { return nil }
		}
	}
}

// helpCmd replaces cobra's help command, which answered a topic that is no command (`edgehook
// help nosuch`, `help dead nosuch`) with the root's usage or the group's help, and exit 0: it is
// a usage error, as `edgehook nosuch` is.
var helpCmd = &cobra.Command{
	Use:   "help [command]",
	Short: "Help about any command",
	Long:  "Help prints the help of any command: edgehook help [path to command].",
	// Like --help, answers whatever the settings hold: it reads none.
	PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
	RunE: func(cmd *cobra.Command, args []string) error {
		topic, err := helpTopic(cmd, args)
		if err != nil {
			return err
		}
		topic.InitDefaultHelpFlag() // listed, as in its --help
		return topic.Help()
	},
	// Completes the names of the commands, as cobra's did.
	ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var names []cobra.Completion
		if topic, err := helpTopic(cmd, args); err == nil {
			for _, c := range topic.Commands() {
				if c.IsAvailableCommand() && strings.HasPrefix(c.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(c.Name(), c.Short))
				}
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	},
}

// helpTopic returns the command that args, the words after help, name (the root for none), or a
// usage error if they name none.
func helpTopic(help *cobra.Command, args []string) (*cobra.Command, error) {
	topic, rest, err := help.Root().Find(args)
	if err != nil || len(rest) > 0 {
		return nil, usagef("unknown help topic %q: no such command", strings.Join(args, " "))
	}
	return topic, nil
}

// noArgs rejects positional arguments with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// exactArgs wants n positional arguments, described by names for the error.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("%s needs %d argument(s): %s; got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// printJSON writes v as indented JSON, with DEL and the C1 controls escaped as encoding/json
// escapes those below U+0020 (see escapeControls): an attempt's excerpt is a subscriber's text.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	// Line by line, as the newlines are the indentation's: encoding/json leaves no C0 control
	// within a line, and escapeControls writes DEL and C1 as JSON does. It leaves invalid UTF-8
	// only in a json.RawMessage: replaced as it replaces it in strings, the output stays JSON.
	var out strings.Builder
	for line := range strings.SplitSeq(strings.ToValidUTF8(string(b), "\uFFFD"), "\n") {
		out.WriteString(escapeControls(line))
		out.WriteByte('\n')
	}
	_, err = io.WriteString(w, out.String())
	return err
}

// printRow writes cells as one row of a table for a tabwriter, each with escapeControls: tables
// show what operators and subscribers chose (a URL may carry C1 controls), and a tab or a newline
// in a cell would break the table too.
func printRow(w io.Writer, cells ...any) {
	for i, c := range cells {
		end := "\t"
		if i == len(cells)-1 {
			end = "\n"
		}
		io.WriteString(w, escapeControls(fmt.Sprint(c))+end)
	}
}

// escapeControls returns s with what a terminal acts on escaped: the C0 controls, DEL and the C1
// controls (U+0080–U+009F: U+009B starts a control sequence, U+009D an operating-system command)
// as \u00XX, as JSON escapes them, and each byte of invalid UTF-8 as \xXX (a terminal in a Latin-1
// locale reads a lone 0x9b as U+009B).
func escapeControls(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"): // invalid UTF-8, one byte at a time
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 || r >= 0x7f && r <= 0x9f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// fieldFlags maps the store's field names to the flags that carry them where the names differ.
var fieldFlags = map[string]string{
	"rate_per_sec": "rate", "timeout_ms": "timeout", "headers": "header", "body": "data",
	"coalesce.event_types": "coalesce-types", "coalesce.key": "coalesce-key", "coalesce.window_seconds": "coalesce-window",
}

// flagError rewrites a validation error from the store to name the flag instead of the field:
// `url: "ftp://x" must be …` becomes `--url: "ftp://x" must be …`. Other errors pass unchanged.
func flagError(err error) error {
	var fe *wire.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	field := fe.Field
	if i := strings.IndexByte(field, '['); i >= 0 {
		field = field[:i]
	}
	name, ok := fieldFlags[field]
	if !ok { // "headers.X-Team" is --header's
		if i := strings.IndexByte(field, '.'); i >= 0 {
			field = field[:i]
		}
		if name, ok = fieldFlags[field]; !ok {
			name = strings.ReplaceAll(field, "_", "-")
		}
	}
	if errors.Is(err, store.ErrConflict) { // the value is well formed, the stored state disagrees
		return fmt.Errorf("--%s: %w", name, fe.Err)
	}
	return usagef("--%s: %v", name, fe.Err)
}

// idCommand is a command taking one id argument that prints the JSON fn returns.
func idCommand(use, short string, fn func(ctx context.Context, st *store.Store, id string) (any, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, func(ctx context.Context, st *store.Store) error {
				v, err := fn(ctx, st, args[0])
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), v)
			})
		},
	}
}
