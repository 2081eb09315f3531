package engine

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/edgehook/edgehook/origin/store"
)

// TestOutOfFileDescriptorsInTheLookupIsNotTheSubscribers: 13ff742 holds a send that
// could not open a socket (EMFILE) as the operator's fault, by errors.Is(err, syscall.EMFILE).
// A subscriber URL with a host name needs a socket for its DNS query first, and Go's resolver
// flattens that error into a *net.DNSError whose Err is a string (it wraps only context errors),
// so the errno is gone: the failure is filed as the subscriber's connection failure (an attempt
// counted, a circuit failure), the shared-hosting case the commit meant to fix. The error below is
// the one net.Dialer returns for such a host, produced by the real pure-Go resolver whose own
// socket fails with EMFILE (no packet is sent).
func TestOutOfFileDescriptorsInTheLookupIsNotTheSubscribers(t *testing.T) {
	t.Parallel()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("socket", syscall.EMFILE)}
	}}
	_, lerr := r.LookupHost(context.Background(), "hooks.example.com")
	if lerr == nil {
		t.Skip("the lookup succeeded (hosts file?)")
	}
	t.Logf("resolver error: %v (errors.Is EMFILE: %v)", lerr, errors.Is(lerr, syscall.EMFILE))
	// As net.Dialer.DialContext and the engine's do() wrap it.
	err := &url.Error{Op: "Post", URL: "https://hooks.example.com/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: lerr}}

	e := newEnv(t, Config{MaxAttempts: 10})
	now := e.clk.Now()
	c := store.Claimed{Seq: 1, AgeFrom: now, Attempts: 0, Subscriber: &store.Subscriber{ID: "s1", Mode: store.ModeDirect}}
	set := e.eng.decide(c, response{err: err}, now)
	if set.Circuit == store.CircuitFailure || set.Result != store.ResultReschedule {
		t.Fatalf("a send whose DNS lookup could not open a socket (EMFILE): result %d, circuit %d, error %q; "+
			"want it held as open_files (no attempt, no circuit failure)", set.Result, set.Circuit, set.Error)
	}
}
