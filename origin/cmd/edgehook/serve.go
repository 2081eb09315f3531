package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/edgehook/edgehook/internal/httpserve"
	"github.com/edgehook/edgehook/internal/netguard"
	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/config"
	"github.com/edgehook/edgehook/origin/engine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
)

// DefaultListen is the API's address unless configured: loopback, so no token is needed.
const DefaultListen = "127.0.0.1:8080"

var serveFlags struct {
	listen         string
	tokens         []string
	batchBodyLimit config.ByteSize
	engine         engineFlags
}

func init() {
	cmd := &cobra.Command{
		Use:         "serve",
		Annotations: map[string]string{allCores: "yes"},
		Short:       "Run the HTTP API and the delivery engine until SIGTERM, SIGINT or SIGHUP",
		Long: `Serve runs the HTTP API (see docs/openapi.yaml) and the delivery engine on the database file.
On SIGTERM, SIGINT or SIGHUP (a closed terminal; ignored under nohup) it stops accepting requests
and claiming deliveries, lets requests and sends in flight finish for up to --shutdown-grace,
releases what is left, and exits 0, or 1 if it could not write the outcomes of some sends (they
are sent again once their leases expire). A second signal ends it at once: nothing committed is
lost, and what was in flight is sent again once its lease expires.

Listening on anything but a loopback address requires at least one --token.`,
		Example: `  edgehook serve
  EDGEHOOK_TOKEN=s3cret edgehook serve --listen 0.0.0.0:8080`,
		Args: noArgs,
		RunE: runServe,
	}
	f := cmd.Flags()
	f.StringVar(&serveFlags.listen, "listen", DefaultListen, "address of the HTTP API (host:port)")
	f.StringSliceVar(&serveFlags.tokens, "token", nil, "accepted bearer token (comma-separated or repeated); none: no auth, loopback only")
	serveFlags.batchBodyLimit = api.DefaultBatchBodyLimit
	f.Var(&serveFlags.batchBodyLimit, "batch-body-limit", "largest POST /v1/events/batch body, plus "+
		config.ByteSize(api.EnvelopeAllowance).String()+" as for --body-limit (at least --body-limit: raise it with a --body-limit above 8MiB)")
	config.Mark(f, "listen", "token", "batch-body-limit")
	config.MarkSecret(f, "token")
	serveFlags.engine.register(f)
	rootCmd.AddCommand(cmd)
}

// checkServe validates serve's settings; the API must not be open to a network without a token.
func checkServe() error {
	host, err := checkHostPort("--listen", serveFlags.listen)
	if err != nil {
		return err
	}
	for _, t := range serveFlags.tokens {
		if strings.TrimSpace(t) == "" || strings.ContainsAny(t, " \t\r\n") {
			return usagef("--token: tokens must be non-empty and contain no white space")
		}
	}
	if len(serveFlags.tokens) == 0 && !netguard.Loopback(host) { // an empty host is every interface
		return usagef("--listen: %s is not a loopback address; set --token (or EDGEHOOK_TOKEN) to serve on it", serveFlags.listen)
	}
	if serveFlags.batchBodyLimit < global.bodyLimit {
		return usagef("--batch-body-limit: %s is below --body-limit %s", serveFlags.batchBodyLimit, global.bodyLimit)
	}
	return nil
}

// checkHostPort returns the host of addr, the value of flag, or a usage error if addr is not
// host:port: checked with the other settings, before a command loads anything.
func checkHostPort(flag, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return "", usagef("%s: %q is not host:port: %v", flag, addr, err)
	}
	return host, nil
}

// newRegistry is the Prometheus registry /metrics serves, with the Go and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func runServe(cmd *cobra.Command, _ []string) error {
	if err := checkServe(); err != nil {
		return err
	}
	engCfg, err := serveFlags.engine.config()
	if err != nil {
		return err
	}
	log, err := newLogger(os.Stderr)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	st, err := openWritableStore(ctx)
	if err != nil {
		return startupErr(ctx, err)
	}
	defer st.Close()
	if err := warnNoEdge(ctx, st, engCfg, log); err != nil {
		return startupErr(ctx, err)
	}

	reg := newRegistry()
	eng, err := engine.New(st, engCfg, log, reg)
	if err != nil {
		return err
	}
	srv, err := api.New(api.Options{Store: st, Tokens: serveFlags.tokens, BodyLimit: int64(global.bodyLimit),
		BatchBodyLimit: int64(serveFlags.batchBodyLimit), Logger: log, Registry: reg, Wake: eng.Wake})
	if err != nil {
		return err
	}
	ln, err := listenOn("--listen", serveFlags.listen)
	if err != nil {
		return err
	}
	hs := httpserve.New(srv, srv.MaxBody())
	hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	// The engine gets a context that the signal does not cancel: shutdown stops it and the HTTP
	// server together, within one grace period.
	if err := eng.Start(context.WithoutCancel(ctx)); err != nil {
		ln.Close()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "db", global.db, "auth", len(serveFlags.tokens) > 0, "version", Version())

	var serveErr error
	select {
	case err := <-served:
		serveErr = fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
		log.Info("shutting down", "grace", engCfg.StopGrace.String()) // "10s", not nanoseconds in JSON
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engCfg.StopGrace)
	defer cancel()
	// Together, not one after the other: the engine stopped only once the last request had
	// finished, and one slow client kept it claiming (sends then cut at the grace's end, and
	// released, to be sent again) for as long.
	var httpErr error
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		if httpErr = hs.Shutdown(shutdownCtx); errors.Is(httpErr, context.DeadlineExceeded) {
			httpErr = hs.Close()
		}
	}()
	engErr := eng.Stop(shutdownCtx)
	<-httpDone
	if err := errors.Join(serveErr, httpErr, engErr); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// listenOn binds addr, the value of flag; an address in use says what to do about it.
func listenOn(flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%s: %s is in use (another edgehook?): stop what listens there, or choose another address with %s", flag, addr, flag)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return ln, nil
}
