// Package harness runs the edge locally: the relay core compiled to WASI (edge/cmd/wasi), hosted
// in wazero, with in-memory KV namespaces loaded from a `wrangler kv bulk put` file and real HTTP
// to the subscribers. It serves HTTP the way the Cloudflare Worker does, so an origin's edge URL
// can point at it and the whole path runs on one machine.
package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/httpupstream"
	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/internal/h1"
	"github.com/edgehook/edgehook/internal/httpserve"
	"github.com/edgehook/edgehook/internal/netguard"
	"github.com/edgehook/edgehook/shared/wire"
)

// Defaults of Config.
const (
	DefaultListen   = "127.0.0.1:8787"
	DefaultWASMPath = "build/relay.wasm"
	DefaultPool     = 8
	// DefaultCallTimeout leaves the slowest allowed subscriber time to answer.
	DefaultCallTimeout = wire.MaxTimeout + 5*time.Second
	// shutdownGrace is how long Serve lets requests in flight finish after its context ends.
	shutdownGrace = DefaultCallTimeout
)

// Config is the local edge's configuration; zero fields take the defaults above.
type Config struct {
	// Listen is the address to serve on.
	Listen string
	// KVFile is the SUBSCRIBERS namespace as a `wrangler kv bulk put` file (`edgehook edge
	// export-kv` writes one). Empty starts with an empty namespace.
	KVFile string
	// WASMPath is the relay module, built by `make edge-wasm`.
	WASMPath string
	// Relay holds the edge secrets and limits, as the Worker's EDGE_SECRET and vars do.
	Relay relay.Config
	// Pool is the number of module instances: requests relayed at once.
	Pool int
	// CallTimeout bounds one request inside the module.
	CallTimeout time.Duration
	// CacheDir holds the compilation cache; empty means CacheDir(). See HostConfig.CacheDir.
	CacheDir string
	// AllowNetworks are the internal networks the edge may forward to (netguard.Internal): none by
	// default, as the origin's direct mode.
	AllowNetworks []netip.Prefix
	// ReadTimeout bounds the reading of one request, head and body; zero means
	// httpserve.ReadTimeout(Relay.MaxBody), the origin's serve rule: an origin sending at 1 MiB/s
	// still gets the largest body the edge takes (relay.MaxMaxBody, 100 MiB: 160 s) in. On
	// loopback, where the local edge usually runs, that body takes well under a second; the margin
	// is for an origin across a real network. No module instance waits on a slow body: one is
	// taken only once the body is read.
	ReadTimeout time.Duration
}

func (c *Config) setDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.WASMPath == "" {
		c.WASMPath = DefaultWASMPath
	}
	if c.Pool == 0 {
		c.Pool = DefaultPool
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = httpserve.ReadTimeout(c.Relay.MaxBody)
	}
}

// Server is a local edge: the module host, its KV namespaces and the HTTP handler.
type Server struct {
	cfg         Config
	host        *Host
	subscribers *memkv.Store
	dedup       *memkv.Store
	handler     http.Handler
}

// New loads the KV file and the module and starts the instances.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	cfg.setDefaults()
	wasm, err := os.ReadFile(cfg.WASMPath)
	if err != nil {
		return nil, fmt.Errorf("relay module: %w (run `make edge-wasm` to build it)", err)
	}
	clock := relay.SystemClock{}
	s := &Server{cfg: cfg, subscribers: memkv.New(clock), dedup: memkv.New(clock)}
	if cfg.KVFile != "" {
		entries, err := ReadBulkFile(cfg.KVFile)
		if err != nil {
			return nil, err
		}
		s.subscribers.LoadBulk(entries)
	}
	s.host, err = NewHost(ctx, HostConfig{
		WASM: wasm, CacheDir: cfg.CacheDir, Pool: cfg.Pool, CallTimeout: cfg.CallTimeout, Relay: cfg.Relay,
		Deps:   relay.Deps{Subscribers: s.subscribers, Dedup: s.dedup, Upstream: NewUpstream(cfg.AllowNetworks), Clock: clock},
		Logger: log,
	})
	if err != nil {
		return nil, err
	}
	s.handler = NewHandler(s.host, cfg.Relay.MaxBody, log)
	return s, nil
}

// Subscribers is the SUBSCRIBERS namespace, for a process that writes the records itself.
func (s *Server) Subscribers() *memkv.Store { return s.subscribers }

// Handler serves the edge over HTTP.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx ends, then lets requests in flight finish and returns nil.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := httpserve.New(s.handler, s.cfg.Relay.MaxBody)
	srv.ReadTimeout = s.cfg.ReadTimeout
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if serveErr := <-done; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}

// Close stops the module instances.
func (s *Server) Close(ctx context.Context) error { return s.host.Close(ctx) }

// NewUpstream returns the subscribers' HTTP client: no proxy, no redirects and no response head
// over wire.MaxAnswerHeaderBytes, as the Worker's fetch, and enough idle connections per
// subscriber for a full pool of instances. Plain-http subscribers get their requests written and
// read on the instance's goroutine (h1.Transport): the relay waits for each answer anyway, and
// net/http's transport would hand every request and answer between goroutines. Like the origin's
// direct mode, it refuses internal addresses outside allow: whoever can create an edge-mode
// subscriber must not reach the machine the local edge runs on, or its network.
func NewUpstream(allow []netip.Prefix) *httpupstream.Client {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, // as http.DefaultTransport's
		Control: netguard.Control(slices.Clone(allow))}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = d.DialContext
	tr.MaxIdleConnsPerHost = 64
	tr.MaxResponseHeaderBytes = wire.MaxAnswerHeaderBytes
	return httpupstream.New(h1.New(tr, d))
}

// ReadBulkFile reads a `wrangler kv bulk put` file, as `edgehook edge export-kv` writes it.
func ReadBulkFile(path string) ([]wire.BulkEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kv file: %w", err)
	}
	entries, err := wire.DecodeBulk(data)
	if err != nil {
		return nil, fmt.Errorf("kv file %s: %w", path, err)
	}
	return entries, nil
}

// ListenAndServe runs a local edge on cfg.Listen until ctx ends.
func ListenAndServe(ctx context.Context, cfg Config, log *slog.Logger) error {
	s, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return err
	}
	log.Info("local edge listening", "addr", ln.Addr().String(), "instances", s.cfg.Pool, "kv_file", s.cfg.KVFile)
	return s.Serve(ctx, ln)
}
