// Package netguard keeps outgoing requests away from internal addresses: a subscriber's URL is
// chosen by whoever holds an API token, and must not reach the machine's own services, its private
// network or a cloud metadata endpoint. The origin's direct sends and the local edge's forwards
// both dial through Control. It also tells loopback hosts (Loopback), where the API may answer
// without a token.
package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// ErrBlocked marks a refused destination.
var ErrBlocked = errors.New("destination address is internal and not in the allow-list")

// Control returns a net.Dialer Control that refuses internal destinations (Internal) outside
// allow. It runs after DNS resolution, on the address actually dialled, so a hostname that
// resolves (or re-resolves) to an internal address is refused too.
func Control(allow []netip.Prefix) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("%w: %q", ErrBlocked, host)
		}
		ip = ip.Unmap()
		for _, p := range allow {
			if p.Contains(ip) {
				return nil
			}
		}
		if Internal(ip) {
			return fmt.Errorf("%w: %s", ErrBlocked, ip)
		}
		return nil
	}
}

// internalNets are special-purpose ranges not covered by netip's predicates.
var internalNets = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),         // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),     // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),      // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),     // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),       // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b:1::/48"),    // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),     // documentation
	netip.MustParsePrefix("fd00:ec2::254/128"), // AWS metadata over IPv6 (also ULA)
}

// Prefixes of IPv6 addresses that carry an IPv4 address a gateway may reach: the well-known NAT64
// prefix (RFC 6052: the IPv4 address in the last 32 bits) and 6to4 (RFC 3056: in bits 16–47).
var (
	nat64Net = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4   = netip.MustParsePrefix("2002::/16")
)

// Internal reports loopback, private, link-local (including the 169.254.169.254 metadata
// address), multicast, unspecified and other special-purpose addresses, and an IPv6 address
// that carries one of those as an IPv4 address (NAT64, 6to4): on a network with a NAT64 gateway,
// 64:ff9b::a00:1 is 10.0.0.1.
func Internal(ip netip.Addr) bool {
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, p := range internalNets {
		if p.Contains(ip) {
			return true
		}
	}
	b := ip.As16()
	switch {
	case nat64Net.Contains(ip):
		return Internal(netip.AddrFrom4([4]byte(b[12:16])))
	case sixTo4.Contains(ip):
		return Internal(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return false
}

// Loopback reports whether host, a name or an IP address as net.SplitHostPort returns it (no
// port, no brackets), names only loopback addresses: "localhost" in any case, fully qualified
// ("localhost.") too, as resolvers take it; or an address of 127.0.0.0/8 or ::1, IPv4-mapped too.
// Any other name could resolve anywhere, and the empty host names no address.
func Loopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
