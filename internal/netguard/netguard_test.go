package netguard

import (
	"net/netip"
	"testing"
)

func TestInternal(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true, "169.254.169.254": true,
		"100.64.0.1": true, "0.0.0.0": true, "::1": true, "fe80::1": true, "fd00:ec2::254": true, "::ffff:127.0.0.1": true,
		"93.184.216.34": false, "2606:4700::1": false,
		// IPv4 carried in IPv6: NAT64 (the last 32 bits) and 6to4 (bits 16–47).
		"64:ff9b::a00:1": true, "64:ff9b::a9fe:a9fe": true, "64:ff9b::5db8:d822": false,
		"2002:a00:1::1": true, "2002:7f00:1::": true, "2002:5db8:d822::1": false,
	} {
		ip := netip.MustParseAddr(addr)
		if got := Internal(ip.Unmap()); got != want {
			t.Errorf("Internal(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		// Names are case-insensitive, and a final dot only makes one fully qualified.
		"localhost": true, "LOCALHOST": true, "LocalHost": true, "localhost.": true,
		"127.0.0.1": true, "127.0.0.2": true, "127.255.255.254": true, "::1": true, "::ffff:127.0.0.1": true, "::1%lo": true,
		"0.0.0.0": false, "::": false, "10.0.0.1": false, "::ffff:10.0.0.1": false, "128.0.0.1": false, "::2": false,
		"localhost..": false, "foo.localhost": false, "localhost.example.com": false, "localhostx": false, "127.0.0.1.": false,
		// No address (for a listener, every interface); the brackets of an IPv6 URL host are not the host's.
		"": false, "[::1]": false,
	} {
		if got := Loopback(host); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", host, got, want)
		}
	}
}
