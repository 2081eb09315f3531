package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/origin/config"
	"github.com/edgehook/edgehook/shared/signature"
)

// edgeLocalFlags are the settings of `edge local`; they mirror the Worker's secret and vars.
type edgeLocalFlags struct {
	listen, kv, wasm, secret string
	tolerance, dedupTTL      time.Duration
	maxBody                  config.ByteSize
	instances                int
	allowNetworks            []string
}

func (f *edgeLocalFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", harness.DefaultListen, "address to serve the edge on (host:port)")
	fs.StringVar(&f.kv, "kv", "", "the SUBSCRIBERS namespace: the `FILE` 'edgehook edge export-kv' writes (wrangler kv bulk put format)")
	fs.StringVar(&f.wasm, "wasm", harness.DefaultWASMPath, "the relay module `FILE` ('make edge-wasm' builds it)")
	fs.StringVar(&f.secret, "edge-secret", "", "edge secret(s) the origin signs hops with (whsec_..., comma-separated during a rotation)")
	fs.DurationVar(&f.tolerance, "tolerance", relay.DefaultTolerance, "how far a hop timestamp may be from the edge's clock")
	fs.DurationVar(&f.dedupTTL, "dedup-ttl", relay.DefaultDedupTTL, "how long a delivery acknowledged with a 2xx is remembered")
	f.maxBody = relay.DefaultMaxBody
	fs.Var(&f.maxBody, "max-body", "largest request body the edge accepts (keep it at the origin's --body-limit or more)")
	fs.IntVar(&f.instances, "instances", harness.DefaultPool, fmt.Sprintf("module instances, i.e. requests relayed at once (1 to %d)", maxInstances))
	fs.StringSliceVar(&f.allowNetworks, "allow-network", nil, allowNetworkUsage)
	config.Mark(fs, "edge-secret", "allow-network")
	config.MarkSecret(fs, "edge-secret")
}

// maxInstances bounds --instances: every instance is created at start and holds about 6 MB, so a
// typo of a few digits took all the machine's memory before the kernel killed the process. 1,024
// is four times the origin's default --workers, about 6 GB.
const maxInstances = 1024

// harnessConfig checks the flags, naming the one at fault, and builds the harness configuration.
func (f *edgeLocalFlags) harnessConfig() (harness.Config, error) {
	if f.secret == "" {
		return harness.Config{}, usagef("--edge-secret: required (or EDGEHOOK_EDGE_SECRET): the secret the origin signs hops with")
	}
	secrets, err := signature.ParseSecrets(f.secret)
	if err != nil {
		return harness.Config{}, usagef("--edge-secret: %v", err)
	}
	if _, err := checkHostPort("--listen", f.listen); err != nil {
		return harness.Config{}, err
	}
	rc := relay.Config{Secrets: secrets, Tolerance: f.tolerance, DedupTTL: f.dedupTTL, MaxBody: int64(f.maxBody)}
	switch {
	case f.tolerance < time.Second || f.tolerance%time.Second != 0:
		return harness.Config{}, usagef("--tolerance: %s must be whole seconds, at least 1s", f.tolerance)
	case f.dedupTTL < relay.MinKVTTL || f.dedupTTL%time.Second != 0:
		return harness.Config{}, usagef("--dedup-ttl: %s must be whole seconds, at least %s", f.dedupTTL, relay.MinKVTTL)
	case f.dedupTTL < f.tolerance:
		return harness.Config{}, usagef("--dedup-ttl: %s is below --tolerance %s: a replayed delivery would be forwarded again", f.dedupTTL, f.tolerance)
	case f.maxBody < 1 || f.maxBody > relay.MaxMaxBody:
		return harness.Config{}, usagef("--max-body: %s is outside 1B to %s", f.maxBody, config.ByteSize(relay.MaxMaxBody))
	case f.instances < 1 || f.instances > maxInstances:
		return harness.Config{}, usagef("--instances: %d is outside 1 to %d", f.instances, maxInstances)
	}
	allow, err := parseNetworks(f.allowNetworks)
	if err != nil {
		return harness.Config{}, err
	}
	return harness.Config{Listen: f.listen, KVFile: f.kv, WASMPath: f.wasm, Relay: rc, Pool: f.instances, AllowNetworks: allow}, nil
}

func init() {
	var f edgeLocalFlags
	cmd := &cobra.Command{
		Use:         "local --kv FILE --edge-secret SECRET",
		Annotations: map[string]string{allCores: "yes"},
		Short:       "Run the edge relay locally: the relay core as a WASI module in wazero, serving HTTP as the Worker does",
		Long: `Runs the same relay core as the Cloudflare Worker, compiled to WASI, in an embedded WebAssembly
runtime. The SUBSCRIBERS namespace is loaded from --kv (the file ` + "`edgehook edge export-kv`" + ` writes, the
one ` + "`wrangler kv bulk put`" + ` reads); the DEDUP namespace lives in memory. Point the origin's edge URL at
--listen. Restart after re-exporting the subscribers. The module's compiled code is cached under
$XDG_CACHE_HOME/edgehook/wazero (~/.cache/edgehook/wazero), about 15 MB per module build; each start
removes the code of other builds unused for 30 days. With neither variable set, it is compiled at
each start and kept in memory only.`,
		Example: `  edgehook edge export-kv --out build/subscribers.json
  EDGEHOOK_EDGE_SECRET=whsec_... edgehook edge local --kv build/subscribers.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.kv == "" {
				return usagef("--kv: required: the subscribers' records, from `edgehook edge export-kv --out FILE`")
			}
			cfg, err := f.harnessConfig()
			if err != nil {
				return err
			}
			log, err := newLogger(os.Stderr)
			if err != nil {
				return err
			}
			return harness.ListenAndServe(cmd.Context(), cfg, log)
		},
	}
	f.register(cmd)
	edgeCmd.AddCommand(cmd)
}
