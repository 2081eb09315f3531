package harness

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/edgehook/edgehook/edge/harness/abi"
	"github.com/edgehook/edgehook/edge/harness/internal/fuel"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// HostConfig configures a Host.
type HostConfig struct {
	// WASM is the relay module built by `make edge-wasm` (build/relay.wasm).
	WASM []byte
	// CacheDir holds wazero's compilation cache, one subdirectory per module; empty means
	// CacheDir() (and memory only if that is empty too). NewHost removes the subdirectories of modules unused for CacheTTL.
	CacheDir string
	// Pool is the number of module instances, i.e. of requests handled at once.
	Pool int
	// CallTimeout bounds one request inside the module, the subscriber's timeout included.
	CallTimeout time.Duration
	// Relay is the relay's configuration, handed to each instance as its environment.
	Relay relay.Config
	// Deps are what the module's host functions reach: the KV namespaces, the upstream, the clock.
	Deps   relay.Deps
	Logger *slog.Logger
	// Uninterruptible runs the module as built. By default the host rewrites it first (package
	// internal/fuel): every loop header takes a unit of fuel and, every fuelPerRefuel iterations,
	// calls the host, which traps the call once it is past its deadline. That replaces wazero's
	// own termination checks, a call out to Go at every loop header (~45 ns here, about a thousand
	// per request since Go-compiled WASM jumps through each function's outer loop), for about a
	// nanosecond per loop header. Uninterruptible, a call past its deadline ends only when the
	// guest next calls the host (every host function traps then), never inside a loop of the
	// guest's own, and compiled code cannot be preempted, so such a loop would also stall the
	// host's garbage collector. It saves about half a µs of a 1 KB request, so only the
	// benchmarks that price the fuel set it; `edgehook edge local` never does.
	Uninterruptible bool
}

// CacheDir returns the default compilation cache directory: edgehook/wazero under the user cache
// directory ($XDG_CACHE_HOME or ~/.cache on Linux), or "" when there is none (no $HOME either, as
// in a system service without User=): the code is then compiled at each start and cached in memory
// only. Not under the temporary directory, where any local user could make the directory first
// and plant compiled code that the host would run. Each module's compiled code (~15 MB) has its
// own subdirectory there, named by the module's SHA-256 and marked used by each host that starts
// with it; a host starting removes those of other modules unused for CacheTTL (see pruneCache).
func CacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "edgehook", "wazero")
}

// Host runs the relay's WASI module in wazero: compiled once, instantiated Pool times. Each
// instance serves one request at a time; one that traps or overruns its deadline is closed and
// replaced by a fresh instance on its next use. Handle is safe for concurrent use.
type Host struct {
	rt       wazero.Runtime
	cache    wazero.CompilationCache
	compiled wazero.CompiledModule
	modCfg   wazero.ModuleConfig
	deps     relay.Deps
	timeout  time.Duration
	log      *slog.Logger
	// uninterruptible is HostConfig.Uninterruptible: every host function checks the deadline.
	uninterruptible bool
	// free holds a token per idle instance; idle holds those instances (a nil entry is one to
	// (re)create on its next use), the most recently used last. A request takes that one: with
	// fewer requests at once than instances, the same few instances serve them all with their
	// memory in the CPU's caches, where taking them in turn would go through all of them (~25%
	// slower per request with 8 instances, BenchmarkPool).
	free chan struct{}
	mu   sync.Mutex
	idle []*instance
}

// instance is one module instance and the state of the call it is running.
type instance struct {
	mod            api.Module
	buffer, handle api.Function
	// call is the context of the running call, and stack the parameters and results of the
	// exports, both reused.
	call  callCtx
	stack [1]uint64
	// inbox and inboxCap are the guest buffer BufferFunc last returned: the guest keeps it, so a
	// request that fits needs no call to ask for it again.
	inbox, inboxCap uint32
	// pending holds the bytes of the last host function result until the guest takes them.
	pending []byte
	// scratch holds the encoded request, results KVGetAllFunc's answer being built and lastKV
	// its last answer, which the guest keeps, answer UpstreamFunc's; all are reused.
	scratch, results, lastKV, answer []byte
	// mac is the HMAC-SHA256 of key macKey, and macSum its last result, for HMACFunc.
	mac            hash.Hash
	macKey, macSum []byte
}

// callCtx is the context of a call into an instance: the caller's, with the instance the host
// functions serve and the call's deadline. wazero hands the context of a call to each host
// function it makes; the deadline is kept as a time, not as context.WithTimeout's timer, which
// costs an allocation and a timer per call and, under a cancellable context such as an HTTP
// request's, a registration with it. refuel and the upstream request (context.WithDeadline, for
// the HTTP client) enforce it; KV, in memory in the harness, gets the caller's context.
type callCtx struct {
	context.Context
	in       *instance
	deadline time.Time
	// checked makes every host function check the deadline (HostConfig.Uninterruptible).
	checked bool
}

// err tells why the call must end now: its caller's context ended or its deadline passed.
func (c *callCtx) err() error { return callEnded(c.Context, c.deadline) }

// callEnded tells why a call in ctx with deadline must end now, or nil if it may run on.
func callEnded(ctx context.Context, deadline time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// NewHost compiles the module and creates every instance, so a bad module or setting fails here.
func NewHost(ctx context.Context, cfg HostConfig) (*Host, error) {
	switch {
	case cfg.Pool < 1:
		return nil, fmt.Errorf("pool: %d instances; at least 1 is required", cfg.Pool)
	case cfg.CallTimeout <= 0:
		return nil, fmt.Errorf("call timeout: %s must be positive", cfg.CallTimeout)
	case cfg.Logger == nil:
		return nil, errors.New("harness: HostConfig.Logger is nil")
	}
	env, err := relayEnv(cfg.Relay)
	if err != nil {
		return nil, err
	}
	if _, err := relay.New(cfg.Relay, cfg.Deps); err != nil { // the same checks the guest makes
		return nil, err
	}
	wasm := cfg.WASM
	if !cfg.Uninterruptible {
		if wasm, err = fuel.Instrument(wasm, abi.ImportModule, refuelFunc); err != nil {
			return nil, err
		}
	}
	root := cfg.CacheDir
	if root == "" {
		root = CacheDir()
	}
	cache := wazero.NewCompilationCache() // in memory, when there is no directory for it
	if root != "" {
		now := time.Now()
		dir, err := moduleCache(root, wasm, now)
		if err != nil {
			return nil, fmt.Errorf("compilation cache %s: %w", root, err)
		}
		if n := pruneCache(root, filepath.Base(dir), now); n > 0 {
			cfg.Logger.Info("compilation cache: removed the code of modules unused for a while", "dir", root, "modules", n, "unused_for", CacheTTL)
		}
		if cache, err = wazero.NewCompilationCacheWithDir(dir); err != nil {
			return nil, fmt.Errorf("compilation cache %s: %w", dir, err)
		}
	}
	h := &Host{
		cache: cache, deps: cfg.Deps, timeout: cfg.CallTimeout, log: cfg.Logger, uninterruptible: cfg.Uninterruptible,
		free: make(chan struct{}, cfg.Pool),
		// No CloseOnContextDone: its checks are replaced by the fuel's (see Uninterruptible).
		rt: wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache)),
	}
	if err := h.start(ctx, wasm, env); err != nil {
		_ = h.Close(ctx)
		return nil, err
	}
	return h, nil
}

func (h *Host) start(ctx context.Context, wasm []byte, env map[string]string) error {
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, h.rt); err != nil {
		return err
	}
	hostMod, err := h.instantiateHostModule(ctx)
	if err != nil {
		return err
	}
	compiled, err := h.rt.CompileModule(ctx, wasm)
	if err != nil {
		return fmt.Errorf("compile the relay module: %w", err)
	}
	h.compiled = compiled
	if err := checkImports(compiled, hostMod); err != nil {
		return err
	}
	for _, name := range []string{abi.BufferFunc, abi.HandleFunc} {
		if _, ok := compiled.ExportedFunctions()[name]; !ok {
			return fmt.Errorf("the relay module does not export %s: is it built from edge/cmd/wasi with -buildmode=c-shared?", name)
		}
	}
	stderr := logWriter{h.log}
	h.modCfg = wazero.NewModuleConfig().
		WithName(""). // anonymous, so one compiled module instantiates many times
		WithStartFunctions("_initialize").
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().
		WithRandSource(rand.Reader).
		WithStdout(stderr).WithStderr(stderr)
	for k, v := range env {
		h.modCfg = h.modCfg.WithEnv(k, v)
	}
	for range cap(h.free) {
		in, err := h.instantiate(ctx)
		if err != nil {
			return err
		}
		h.idle = append(h.idle, in)
		h.free <- struct{}{}
	}
	return nil
}

// relayEnv renders cfg as the settings relay.ParseConfig reads.
func relayEnv(cfg relay.Config) (map[string]string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Tolerance%time.Second != 0 || cfg.DedupTTL%time.Second != 0 {
		return nil, fmt.Errorf("%s and %s must be whole seconds", relay.EnvTolerance, relay.EnvDedupTTL)
	}
	secrets := make([]string, len(cfg.Secrets))
	for i, s := range cfg.Secrets {
		secrets[i] = s.String()
	}
	return map[string]string{
		relay.EnvSecret:    strings.Join(secrets, ","),
		relay.EnvTolerance: strconv.FormatInt(int64(cfg.Tolerance/time.Second), 10),
		relay.EnvDedupTTL:  strconv.FormatInt(int64(cfg.DedupTTL/time.Second), 10),
		relay.EnvMaxBody:   strconv.FormatInt(cfg.MaxBody, 10),
	}, nil
}

func (h *Host) instantiate(ctx context.Context) (*instance, error) {
	mod, err := h.rt.InstantiateModule(ctx, h.compiled, h.modCfg)
	if err != nil {
		return nil, fmt.Errorf("instantiate the relay module: %w", err)
	}
	return &instance{mod: mod, buffer: mod.ExportedFunction(abi.BufferFunc), handle: mod.ExportedFunction(abi.HandleFunc)}, nil
}

// Close releases every instance, the runtime and the cache handle.
func (h *Host) Close(ctx context.Context) error {
	err := h.rt.Close(ctx) // closes every instance too
	return errors.Join(err, h.cache.Close(ctx))
}

// Handle runs one request through a pooled instance, waiting for a free one for up to the call
// timeout. The call ends at ctx's end or after the call timeout from when it starts, whichever
// comes first: the wait is not taken out of the subscriber's time, or a request queued behind
// others would cut a healthy subscriber's answer short. The instance is then replaced, and the
// request gets 500 with no outcome header, as from a Worker the platform stopped. An instance
// that fails otherwise (a trap) is replaced too, and the request gets 500 rejected:edge_crashed,
// as the Worker's loader answers when its Go instance dies.
func (h *Host) Handle(ctx context.Context, req *relay.Request) *relay.Response {
	select {
	case <-h.free:
	default: // every instance is busy: wait
		if err := h.waitFree(ctx, h.callDeadline(ctx)); err != nil {
			return edgeError("no relay instance became free: %v", err)
		}
	}
	deadline := h.callDeadline(ctx)
	h.mu.Lock()
	in := h.idle[len(h.idle)-1]
	h.idle = h.idle[:len(h.idle)-1]
	h.mu.Unlock()
	resp, err := h.call(ctx, deadline, &in, req)
	h.mu.Lock()
	h.idle = append(h.idle, in)
	h.mu.Unlock()
	h.free <- struct{}{}
	if err != nil {
		h.log.Error("relay module failed; the instance is replaced", "err", err)
		if callEnded(ctx, deadline) != nil {
			return edgeError("the relay module failed: %v", err)
		}
		return relay.Reject(500, wire.ReasonEdgeCrashed, "the relay module failed: %v", err)
	}
	return resp
}

// callDeadline is when a call starting now ends: after the call timeout, or at ctx's end if that
// is sooner.
func (h *Host) callDeadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(h.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return deadline
}

// waitTimers holds stopped timers for waitFree: under load most requests wait for an instance,
// and a pooled timer costs none of context.WithDeadline's allocations.
var waitTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// waitFree takes a free instance's token, or fails when ctx ends or the deadline passes first.
func (h *Host) waitFree(ctx context.Context, deadline time.Time) error {
	t := waitTimers.Get().(*time.Timer)
	defer waitTimers.Put(t)
	t.Reset(time.Until(deadline))
	defer t.Stop() // since Go 1.23, a stopped timer's channel holds no stale value for its next use
	select {
	case <-h.free:
		return nil
	case <-t.C:
		return context.DeadlineExceeded
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call runs req in *in, creating the instance if needed; on failure it closes the instance and
// leaves *in nil.
func (h *Host) call(ctx context.Context, deadline time.Time, in **instance, req *relay.Request) (*relay.Response, error) {
	if *in == nil {
		// Not bound by the call's deadline: _initialize of a Go module takes a while on a busy
		// machine, and a half-made instance helps nobody.
		created, err := h.instantiate(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		*in = created
	}
	c := &(*in).call
	*c = callCtx{Context: ctx, in: *in, deadline: deadline, checked: h.uninterruptible}
	resp, err := (*in).run(c, req)
	c.Context = nil // keep nothing of the caller's past the call
	if err != nil {
		_ = (*in).mod.Close(context.WithoutCancel(ctx))
		*in = nil
	}
	return resp, err
}

// run calls the module with req in the context c of the call.
func (in *instance) run(c *callCtx, req *relay.Request) (*relay.Response, error) {
	in.scratch = abi.EncodeRequest(in.scratch[:0], req)
	if n := uint32(len(in.scratch)); n > in.inboxCap || in.inboxCap == 0 {
		in.stack[0] = uint64(n)
		if err := in.buffer.CallWithStack(c, in.stack[:]); err != nil {
			return nil, err
		}
		in.inbox, in.inboxCap = uint32(in.stack[0]), n
	}
	if !in.mod.Memory().Write(in.inbox, in.scratch) {
		return nil, fmt.Errorf("%s returned %#x, outside memory", abi.BufferFunc, in.inbox)
	}
	in.stack[0] = uint64(len(in.scratch))
	if err := in.handle.CallWithStack(c, in.stack[:]); err != nil {
		return nil, err
	}
	ptr, n := abi.SplitPointer(in.stack[0])
	view, ok := in.mod.Memory().Read(ptr, n)
	if !ok {
		return nil, fmt.Errorf("%s returned %d bytes at %#x, outside memory", abi.HandleFunc, n, ptr)
	}
	// The view is guest memory, reused by the next call: the response must own its bytes.
	return abi.DecodeResponse(bytes.Clone(view))
}

// errTimeout tells whether an upstream error is a timeout, which the guest must see as one.
func errTimeout(err error) bool {
	return errors.Is(err, relay.ErrUpstreamTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// edgeError is the answer when the module itself failed.
func edgeError(format string, args ...any) *relay.Response {
	msg := fmt.Sprintf(format, args...)
	return &relay.Response{
		Status: 500,
		Header: relay.Header{{Name: "content-type", Value: "text/plain; charset=utf-8"}},
		Body:   []byte("edge error: " + msg + "\n"),
		Detail: msg,
	}
}

// logWriter sends the module's stdout and stderr (a Go panic's trace) to the logger.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Warn("relay module output", "text", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// instantiateHostModule defines the functions of package abi.
func (h *Host) instantiateHostModule(ctx context.Context) (api.Module, error) {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	b := h.rt.NewHostModuleBuilder(abi.ImportModule)
	def := func(name string, fn api.GoModuleFunc, params, results []api.ValueType) {
		b.NewFunctionBuilder().WithGoModuleFunction(fn, params, results).Export(name)
	}
	def(abi.KVGetAllFunc, h.kvGetAll, []api.ValueType{i32, i32}, []api.ValueType{i64})
	def(abi.KVPutFunc, h.kvPut, []api.ValueType{i32, i32, i32, i32, i32, i64}, []api.ValueType{i64})
	def(abi.UpstreamFunc, h.upstream, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i64})
	def(abi.TakeFunc, take, []api.ValueType{i32}, nil)
	def(abi.NowFunc, h.now, nil, []api.ValueType{i64})
	def(abi.LogFunc, h.logLine, []api.ValueType{i32, i32}, nil)
	def(abi.HMACFunc, hmacSHA256, []api.ValueType{i32, i32, i32, i32, i32}, nil)
	def(refuelFunc, refuel, nil, []api.ValueType{i32})
	return b.Instantiate(ctx)
}

// checkImports tells, before instantiating, a module built for another version of the host ABI (an
// old build/relay.wasm beside a new edgehook, say) in the operator's words rather than wazero's.
func checkImports(compiled wazero.CompiledModule, host api.Module) error {
	provided := host.ExportedFunctionDefinitions()
	for _, imp := range compiled.ImportedFunctions() {
		module, name, _ := imp.Import()
		if module != abi.ImportModule {
			continue
		}
		want, ok := provided[name]
		switch {
		case !ok:
			return fmt.Errorf("the relay module imports %s.%s, which this edgehook does not provide: it was built from other sources; rebuild it with 'make edge-wasm'", module, name)
		case !slices.Equal(imp.ParamTypes(), want.ParamTypes()) || !slices.Equal(imp.ResultTypes(), want.ResultTypes()):
			return fmt.Errorf("the relay module imports %s.%s as %s, but this edgehook provides %s: it was built from other sources; rebuild it with 'make edge-wasm'",
				module, name, signature(imp), signature(want))
		}
	}
	return nil
}

// signature renders a function's type as (i32, i32) -> (i64).
func signature(f api.FunctionDefinition) string {
	names := func(types []api.ValueType) string {
		s := make([]string, len(types))
		for i, t := range types {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ", ")
	}
	return "(" + names(f.ParamTypes()) + ") -> (" + names(f.ResultTypes()) + ")"
}

// running returns the context of the call that reached a host function. With
// HostConfig.Uninterruptible it traps the guest (a panic in a host function does) when the call
// must end, which is how such a module is stopped; otherwise refuel does.
func running(ctx context.Context) *callCtx {
	c, ok := ctx.(*callCtx)
	if !ok {
		panic("edgehook host function called outside a request")
	}
	if c.checked {
		if err := c.err(); err != nil {
			panic(fmt.Errorf("call deadline: %w", err))
		}
	}
	return c
}

// view returns a view of guest memory, trapping the guest on an out-of-range pointer. It is valid
// only until the guest runs again.
func view(m api.Module, ptr, n uint64) []byte {
	v, ok := m.Memory().Read(uint32(ptr), uint32(n))
	if !ok {
		panic(fmt.Sprintf("guest passed %d bytes at %#x, outside memory", n, ptr))
	}
	return v
}

// readString copies guest memory into a string.
func readString(m api.Module, ptr, n uint64) string { return string(view(m, ptr, n)) }

// viewString is view as a string, for KV, which copies what it keeps (relay.KV).
func viewString(m api.Module, ptr, n uint64) string {
	v := view(m, ptr, n)
	return unsafe.String(unsafe.SliceData(v), len(v))
}

// result leaves b for TakeFunc and returns the packed result.
func (in *instance) result(code uint32, b []byte) uint64 {
	in.pending = b
	return abi.Result(code, len(b))
}

func (h *Host) namespace(ns uint64) relay.KV {
	switch uint32(ns) {
	case abi.NamespaceSubscribers:
		return h.deps.Subscribers
	case abi.NamespaceDedup:
		return h.deps.Dedup
	}
	panic(fmt.Sprintf("unknown KV namespace %d", ns))
}

// kvGetAll answers every read in one message, built in the instance's reused results buffer.
// Deliveries to one subscriber read the same values again and again (its record, no dedup
// mark): when the message is the last one again, CodeSame has the guest reuse its copy, which
// saves it taking and allocating a copy and also comparing the record with the last one it saw
// (equal strings at one address compare at once; otherwise byte by byte, a loop in WASM).
func (h *Host) kvGetAll(ctx context.Context, m api.Module, stack []uint64) {
	c := running(ctx)
	in := c.in
	iov, out := view(m, stack[0], stack[1]*12), in.results[:0]
	for i := 0; i < len(iov); i += 12 {
		kv := h.namespace(uint64(binary.LittleEndian.Uint32(iov[i:])))
		key := viewString(m, uint64(binary.LittleEndian.Uint32(iov[i+4:])), uint64(binary.LittleEndian.Uint32(iov[i+8:])))
		v, found, err := kv.Get(c.Context, key)
		out = abi.AppendKVResult(out, v, found, err)
	}
	if bytes.Equal(out, in.lastKV) { // a new instance's last answer is nil, as the guest's is empty
		in.results, in.pending = out, nil
		stack[0] = abi.Result(abi.CodeSame, len(out))
		return
	}
	in.results, in.lastKV = in.lastKV, out
	stack[0] = in.result(abi.CodeOK, out)
}

func (h *Host) kvPut(ctx context.Context, m api.Module, stack []uint64) {
	c, kv := running(ctx), h.namespace(stack[0])
	in := c.in
	key, value := viewString(m, stack[1], stack[2]), viewString(m, stack[3], stack[4])
	if err := kv.Put(c.Context, key, value, time.Duration(int64(stack[5]))*time.Second); err != nil {
		stack[0] = in.result(abi.CodeError, []byte(err.Error()))
		return
	}
	stack[0] = in.result(abi.CodeOK, nil)
}

// upstream decodes a copy of the request: the HTTP client may still read the body after Do
// returns, when guest memory belongs to the guest again. The answer's encoding is kept in the
// instance until the guest takes it, and reused.
func (h *Host) upstream(ctx context.Context, m api.Module, stack []uint64) {
	c := running(ctx)
	in := c.in
	req, err := abi.DecodeUpstreamRequest(bytes.Clone(view(m, stack[0], stack[1])))
	if err != nil {
		panic(err)
	}
	resp, err := h.doUpstream(c, req)
	switch {
	case err != nil && errTimeout(err):
		stack[0] = in.result(abi.CodeTimeout, []byte(err.Error()))
	case errors.Is(err, relay.ErrUpstreamBlocked):
		stack[0] = in.result(abi.CodeBlocked, []byte(err.Error()))
	case err != nil:
		stack[0] = in.result(abi.CodeError, []byte(err.Error()))
	default:
		in.answer = abi.EncodeUpstreamResponse(in.answer[:0], resp)
		if out, outCap := uint32(stack[2]), uint32(stack[3]); len(in.answer) <= int(outCap) { // it fits: nothing to take
			if !m.Memory().Write(out, in.answer) {
				panic(fmt.Sprintf("guest passed %d bytes at %#x for the answer, outside memory", outCap, out))
			}
			in.pending = nil
			stack[0] = abi.Result(abi.CodeOK, len(in.answer))
			return
		}
		stack[0] = in.result(abi.CodeOK, in.answer)
	}
}

// doUpstream sends req within the call's deadline. Upstream.Do bounds the request by its
// Timeout, so a context of the call's deadline is needed only when that comes first (rarely: the
// call timeout leaves the slowest subscriber time to answer), which saves a timer and its context
// on each request.
func (h *Host) doUpstream(c *callCtx, req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	if time.Now().Add(req.Timeout).Before(c.deadline) {
		return h.deps.Upstream.Do(c.Context, req)
	}
	ctx, cancel := context.WithDeadline(c.Context, c.deadline)
	defer cancel()
	return h.deps.Upstream.Do(ctx, req)
}

// refuelFunc is the function internal/fuel makes the module import, and fuelPerRefuel the loop
// iterations it allows each time: about one call every four requests (each a host call, ~70 ns),
// and some ten microseconds at most (about a millisecond for a loop of long bodies) between two
// chances to stop the guest.
const (
	refuelFunc    = "refuel"
	fuelPerRefuel = 4000
)

// refuel traps a call that must end and otherwise lets it run on. It also runs in _initialize,
// outside any request.
func refuel(ctx context.Context, _ api.Module, stack []uint64) {
	if c, ok := ctx.(*callCtx); ok {
		if err := c.err(); err != nil {
			panic(fmt.Errorf("call deadline: %w", err))
		}
	}
	stack[0] = fuelPerRefuel
}

func take(ctx context.Context, m api.Module, stack []uint64) {
	in := running(ctx).in
	if !m.Memory().Write(uint32(stack[0]), in.pending) {
		panic(fmt.Sprintf("guest asked for %d bytes at %#x, outside memory", len(in.pending), stack[0]))
	}
	in.pending = nil
}

func (h *Host) now(ctx context.Context, _ api.Module, stack []uint64) {
	running(ctx)
	stack[0] = uint64(h.deps.Clock.Now().UnixNano())
}

func (h *Host) logLine(ctx context.Context, m api.Module, stack []uint64) {
	running(ctx)
	h.log.Warn(readString(m, stack[0], stack[1]))
}

// hmacSHA256 hashes straight from guest memory views: nothing calls back into the guest while
// they are in use. The instance keeps the HMAC of the last key (the edge secret, the same on every
// request): Reset returns it to its keyed state without hashing the key again or allocating.
func hmacSHA256(ctx context.Context, m api.Module, stack []uint64) {
	in := running(ctx).in
	if key := view(m, stack[0], stack[1]); in.mac == nil || !bytes.Equal(key, in.macKey) {
		in.macKey = append(in.macKey[:0], key...)
		in.mac = hmac.New(sha256.New, in.macKey)
	} else {
		in.mac.Reset()
	}
	iov := view(m, stack[2], stack[3]*8)
	for i := 0; i < len(iov); i += 8 {
		in.mac.Write(view(m, uint64(binary.LittleEndian.Uint32(iov[i:])), uint64(binary.LittleEndian.Uint32(iov[i+4:]))))
	}
	in.macSum = in.mac.Sum(in.macSum[:0])
	if !m.Memory().Write(uint32(stack[4]), in.macSum) {
		panic(fmt.Sprintf("guest passed an HMAC output at %#x, outside memory", stack[4]))
	}
}
