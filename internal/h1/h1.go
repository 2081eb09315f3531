// Package h1 is a client transport for plain-http HTTP/1.1 requests that writes and reads each
// request on the caller's goroutine. The origin's engine sends deliveries with it and the local
// edge harness forwards to subscribers with it.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"syscall"
	"time"
)

// Transport sends plain-http requests itself, over HTTP/1.1 keep-alive connections, on the
// calling goroutine; every other request (https: TLS, HTTP/2) goes to next.
//
// Why: http.Transport runs a reader and a writer goroutine per connection and hands every request
// and response between them and the caller over channels. On the origin's drain over loopback
// that machinery and the scheduling under it cost about as much CPU as the TCP itself: a
// stand-alone client of 96 goroutines used ~40 CPU-µs per request through http.Transport and
// ~20 writing with one flush and reading the answer itself. Here the sender does just that.
//
// It keeps http.Transport's behaviour where a sender can see it: requests are written by
// http.Request.Write (as the transport writes them, less its Accept-Encoding: gzip, so answers come
// uncompressed rather than decompressed), answers are parsed by http.ReadResponse with the
// transport's header size limit and 1xx handling, a connection is reused only once its answer was
// read to the end and neither side asked to close, an idle connection the server has closed is
// noticed before reuse, a request that failed before a byte was written on a reused connection is
// sent again on a new one, and the request's context bounds and cancels every read and write.
type Transport struct {
	next    *http.Transport
	dial    func(ctx context.Context, network, address string) (net.Conn, error)
	maxIdle int           // idle connections kept per host:port
	idleFor time.Duration // an idle connection is closed after this long unused
	// maxHeader bounds an answer's status line and headers, with those of any 1xx before it;
	// tooLong is the error of an answer past it.
	maxHeader int64
	tooLong   error

	mu    sync.Mutex
	idle  map[string][]*conn // by host:port, the most recently used last
	sweep *time.Timer        // closes connections idle past idleFor; nil while none is idle
}

// defaultMaxHeaderBytes is the header limit when next.MaxResponseHeaderBytes is zero, as in
// http.Transport.
const defaultMaxHeaderBytes = 10 << 20

// ErrHeadersTooLong is wrapped by the error of an answer whose status line and headers pass the
// transport's limit.
var ErrHeadersTooLong = errors.New("server response headers too long")

// aLongTimeAgo is a deadline in the past: setting it makes blocked reads and writes return.
var aLongTimeAgo = time.Unix(1, 0)

// New returns a Transport that dials with d and hands what it does not send itself to next. It
// takes next's MaxIdleConnsPerHost, IdleConnTimeout and MaxResponseHeaderBytes; next should dial
// with d too, so both paths reach the same addresses.
func New(next *http.Transport, d *net.Dialer) *Transport {
	t := &Transport{next: next, dial: d.DialContext, maxIdle: next.MaxIdleConnsPerHost, idleFor: next.IdleConnTimeout,
		maxHeader: next.MaxResponseHeaderBytes, idle: map[string][]*conn{}}
	if t.maxHeader <= 0 {
		t.maxHeader = defaultMaxHeaderBytes
	}
	t.tooLong = fmt.Errorf("%w: they exceeded %d bytes; aborted", ErrHeadersTooLong, t.maxHeader)
	return t
}

// conn is one keep-alive connection. Its Read and Write (under br and bw) count what was
// written and bound what is read while a limit is set.
type conn struct {
	nc      net.Conn
	raw     syscall.RawConn // for alive's peek; nil if the connection has none
	br      *bufio.Reader
	bw      *bufio.Writer
	addr    string
	written int64
	limit   int64 // bytes left to read; negative: no limit
	tooLong error // Read's error once limit is used up
	idleAt  time.Time
	// peekFn is alive's callback, made once per connection rather than a closure per check;
	// peekLive is its answer.
	peekFn   func(fd uintptr) bool
	peekLive bool
}

func (c *conn) Read(p []byte) (int, error) {
	if c.limit < 0 {
		return c.nc.Read(p)
	}
	if c.limit == 0 {
		return 0, c.tooLong
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.nc.Read(p)
	c.limit -= int64(n)
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	n, err := c.nc.Write(p)
	c.written += int64(n)
	return n, err
}

// alive reports whether an idle connection can take a request: the server has not closed it
// and has sent nothing unasked (a non-blocking peek, the one read http.Transport's reader makes
// between answers too).
func (c *conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if c.raw == nil {
		return true
	}
	c.peekLive = false
	return c.raw.Read(c.peekFn) == nil && c.peekLive
}

func (c *conn) peek(fd uintptr) bool {
	c.peekLive = peekIdle(fd)
	return true // never wait for data
}

// maxBody is the largest request body Transport sends; larger ones, and bodies of unknown
// length, go to next. A receiver may answer before it has read the body (a quick 503 with
// Retry-After, a 413) and stop reading: net/http reads the answer while it writes, Transport
// only after. A body this small fits the socket's send buffer, so its write completes and the
// answer is read; a larger one could block until the deadline and lose the answer.
const maxBody = 8 << 10

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A host name in Unicode goes to next too: it dials the name's ASCII (punycode) form.
	if req.URL.Scheme != "http" || !canPeek || !knownSmallBody(req) || !asciiOnly(req.URL.Host) {
		return t.next.RoundTrip(req)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil { // before taking an idle connection the cancel would close
		return nil, err
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	trace := httptrace.ContextClientTrace(ctx)
	for fresh := false; ; fresh = true {
		c, reused, err := t.get(ctx, addr, fresh)
		if err != nil {
			return nil, err
		}
		if trace != nil && trace.GotConn != nil { // as net/http's transport tells it
			trace.GotConn(httptrace.GotConnInfo{Conn: c.nc, Reused: reused})
		}
		// The deadline first: AfterFunc may run at once, and its deadline in the past must win.
		deadline, _ := ctx.Deadline()
		c.nc.SetDeadline(deadline)
		stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(aLongTimeAgo) })
		resp, err := t.exchange(c, req, stop)
		if err == nil {
			return resp, nil
		}
		stop()
		c.nc.Close()
		if err := contextErr(ctx); err != nil {
			return nil, err
		}
		// Sent again only if nothing of it went out, and only once: the server closed a
		// reused connection between the peek and the write.
		if !reused || c.written > 0 || req.GetBody == nil {
			return nil, err
		}
		if req.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
}

// exchange writes req on c and reads the answer's headers. On success the answer's body owns c
// and stop, the context's AfterFunc (c goes back to the pool once the body is read to the end,
// or is closed).
func (t *Transport) exchange(c *conn, req *http.Request, stop func() bool) (*http.Response, error) {
	c.written = 0
	werr := req.Write(c.bw)
	if werr == nil {
		werr = c.bw.Flush()
	}
	keep := true
	if werr != nil {
		if c.written == 0 {
			return nil, werr
		}
		// The receiver may have answered and closed before reading all of the request: its
		// answer (a 503 with Retry-After, a 413) says more than the write's error. The answer is
		// already here or not coming; the connection is not reused either way.
		if deadline, ok := req.Context().Deadline(); !ok || time.Until(deadline) > earlyAnswerWait {
			c.nc.SetReadDeadline(time.Now().Add(earlyAnswerWait))
		}
		// A cancel that came first set a deadline in the past, which the line above replaced; one
		// that comes later sets it again after ours.
		if req.Context().Err() != nil {
			return nil, werr
		}
		keep = false
	}
	resp, err := t.readAnswer(c, req, stop, keep)
	if werr != nil && err != nil {
		return nil, werr
	}
	return resp, err
}

// earlyAnswerWait is how long a request whose write failed waits for an answer already sent.
const earlyAnswerWait = 100 * time.Millisecond

// readAnswer reads the answer to req from c. On success the answer's body owns c and stop; keep
// says whether c may serve another request once that body is read to the end.
func (t *Transport) readAnswer(c *conn, req *http.Request, stop func() bool, keep bool) (*http.Response, error) {
	c.limit = t.maxHeader
	var resp *http.Response
	for {
		var err error
		if resp, err = http.ReadResponse(c.br, req); err != nil {
			if c.limit == 0 { // the head passed the limit: the parse error is of the line it cut
				err = c.tooLong
			}
			return nil, err
		}
		// 1xx answers but 101 are interim: the final one follows (http.Transport does the same).
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	c.limit = -1
	b := &body{t: t, c: c, ctx: req.Context(), src: resp.Body, stop: stop,
		keep: keep && !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols}
	if resp.Body == http.NoBody {
		b.eof = true
		b.Close()
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// body is an answer's body: its connection goes back to the pool once it was read to the end.
type body struct {
	t    *Transport
	c    *conn
	ctx  context.Context // the request's
	src  io.ReadCloser
	keep bool // the connection may serve another request once the body is read
	eof  bool
	stop func() bool // the context's AfterFunc
	done bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, errors.New("read on a closed body")
	}
	n, err := b.src.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil {
		if cerr := contextErr(b.ctx); cerr != nil {
			err = cerr
		}
	}
	return n, err
}

// contextErr returns the context's error if it is done or its deadline has passed (the
// connection's deadline may fire before the context's own timer, and Request.Write wraps a body
// write's error where errors.Is does not see it), or nil. Call it after an error.
func contextErr(ctx context.Context) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// knownSmallBody reports whether req's body has a known length of at most maxBody.
func knownSmallBody(req *http.Request) bool {
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	return req.ContentLength > 0 && req.ContentLength <= maxBody
}

// asciiOnly reports whether s has no byte outside ASCII.
func asciiOnly(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// Close hands the connection back, or closes it when the body was not read to the end (reading
// the rest could take forever) or the connection cannot be reused.
func (b *body) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	if b.eof && b.keep && b.stop() {
		b.t.put(b.c)
		return nil
	}
	b.stop()
	return b.c.nc.Close()
}

// get returns an idle connection to addr that is still alive (unless fresh) or dials one.
func (t *Transport) get(ctx context.Context, addr string, fresh bool) (*conn, bool, error) {
	for !fresh {
		c := t.take(addr)
		if c == nil {
			break
		}
		if time.Since(c.idleAt) < t.idleFor && c.alive() {
			return c, true, nil
		}
		c.nc.Close()
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c := &conn{nc: nc, addr: addr, limit: -1, tooLong: t.tooLong}
	if sc, ok := nc.(syscall.Conn); ok {
		if c.raw, err = sc.SyscallConn(); err != nil {
			nc.Close()
			return nil, false, err
		}
	}
	c.peekFn = c.peek
	c.br, c.bw = bufio.NewReader(c), bufio.NewWriter(c)
	return c, false, nil
}

// take removes the most recently used idle connection to addr from the pool.
func (t *Transport) take(addr string) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	conns := t.idle[addr]
	if len(conns) == 0 {
		return nil
	}
	c := conns[len(conns)-1]
	conns[len(conns)-1] = nil
	t.idle[addr] = conns[:len(conns)-1]
	return c
}

// put returns c to the pool, or closes it when the pool holds maxIdle connections to its host.
func (t *Transport) put(c *conn) {
	c.nc.SetDeadline(time.Time{})
	c.idleAt = time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle[c.addr]) >= t.maxIdle {
		c.nc.Close()
		return
	}
	t.idle[c.addr] = append(t.idle[c.addr], c)
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.idleFor, t.sweepIdle)
	}
}

// sweepIdle closes the connections idle for idleFor or longer and runs again when the next one
// will be.
func (t *Transport) sweepIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	var next time.Time
	for addr, conns := range t.idle {
		kept := conns[:0]
		for _, c := range conns {
			if now.Sub(c.idleAt) >= t.idleFor {
				c.nc.Close()
				continue
			}
			kept = append(kept, c)
			if next.IsZero() || c.idleAt.Before(next) {
				next = c.idleAt
			}
		}
		clear(conns[len(kept):])
		if len(kept) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = kept
		}
	}
	t.sweep = nil
	if !next.IsZero() {
		t.sweep = time.AfterFunc(next.Add(t.idleFor).Sub(now), t.sweepIdle)
	}
}

// CloseIdleConnections closes the idle connections, its own and next's.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	for addr, conns := range t.idle {
		for _, c := range conns {
			c.nc.Close()
		}
		delete(t.idle, addr)
	}
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	t.next.CloseIdleConnections()
}
